#!/usr/bin/env bash
# Runs every test of the workspace. Installs the Debian packages the build and tests
# need when running as root (CI runs as root on a fresh machine).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-build-deps.sh
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/keelson-target}
export RUST_BACKTRACE=${RUST_BACKTRACE:-1}
# As root every package the node tests need was installed above: they must not skip.
if [ "$(id -u)" = 0 ]; then
  export KEELSON_REQUIRE_NODE_TESTS=1
fi
status=0
cargo test --workspace --no-fail-fast 2>&1 || status=$?
# Every fuzz target for 10 s (about a minute in all, after its own build): see fuzz/run.sh.
bash fuzz/run.sh 10 2>&1 || status=$?
exit "$status"
