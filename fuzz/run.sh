#!/usr/bin/env bash
# Builds every fuzz target (cargo-fuzz, libFuzzer, on the stable toolchain: no sanitizer)
# and runs each for SECONDS_EACH seconds (default 10; the README test command runs them
# for a minute in all). The corpus of each target lives in fuzz/corpus/<target> (not
# committed; it grows across runs) and is seeded at every run from fuzz/seeds/<target>
# and from the test fixtures of the decoders. A crash stops the run with the input saved
# under fuzz/artifacts/<target>/; reproduce it with
#   cargo fuzz run -s none --fuzz-dir fuzz <target> fuzz/artifacts/<target>/<file>
# and turn it into a regression test next to the code it broke.
#
# Usage: bash fuzz/run.sh [SECONDS_EACH] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds_each=${1:-10}
shift || true

if ! command -v cargo-fuzz > /dev/null; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked --version 0.13.1
fi
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$HOME/.cache/keelson-fuzz-target}
corpus_root=${FUZZ_CORPUS:-fuzz/corpus}

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
fi

echo "== building ${#targets[@]} fuzz targets"
cargo fuzz build -s none --fuzz-dir fuzz

seed() {
    local target=$1 dir=$2
    [ -d "fuzz/seeds/$target" ] && cp -f fuzz/seeds/"$target"/* "$dir"/ 2> /dev/null || true
    case $target in
        protobuf_body) cp -f crates/keelson-kube-protobuf/tests/fixtures/*.pb "$dir"/ ;;
        body_decode) cp -f crates/keelson-kube-protobuf/tests/fixtures/*.json cmd/keelson/tests/fixtures/*.yaml "$dir"/ ;;
    esac
}

for target in "${targets[@]}"; do
    dir="$corpus_root/$target"
    mkdir -p "$dir"
    seed "$target" "$dir"
    echo "== fuzzing $target for ${seconds_each}s ($(ls "$dir" | wc -l) inputs in its corpus)"
    log=$(mktemp)
    status=0
    cargo fuzz run -s none --fuzz-dir fuzz "$target" "$dir" -- \
        -max_total_time="$seconds_each" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 > "$log" 2>&1 || status=$?
    grep -E "^(#[0-9]+.*(DONE|INITED)|stat::number_of_executed_units|stat::peak_rss_mb)" "$log" || true
    if [ "$status" -ne 0 ]; then
        tail -n 60 "$log" >&2
        rm -f "$log"
        echo "FUZZ FAILURE: $target exited $status; the input is under fuzz/artifacts/$target/" >&2
        exit 1
    fi
    rm -f "$log"
done
echo "== fuzzing: no crash in ${#targets[@]} targets"
