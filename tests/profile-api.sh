#!/usr/bin/env bash
# Where the API servers' CPU goes during one phase of `keelson bench api`: perf samples
# the three `keelson server` processes the bench starts (DWARF call chains) for the
# length of the phase, and tests/profile_stages.py sorts the samples into the stages of
# the server's work (TLS, HTTP, JSON, audit, RBAC, admission, the store call, Raft,
# RocksDB, the watch cache, ...). The bench's own figures are printed after.
#
#   bash tests/profile-api.sh [PHASE] [KEELSON]
#
# PHASE is what the bench prints when the phase starts: creates (the default), updates,
# gets, "pod rounds". KEELSON defaults to the release build. Needs perf (linux-perf) and
# root or kernel.perf_event_paranoid <= 1.
set -euo pipefail
phase=${1:-creates}
keelson=${2:-${CARGO_TARGET_DIR:-$HOME/.cache/keelson-target}/release/keelson}
secs=10
work=$(mktemp -d)
bench=
cleanup() {
  [ -n "$bench" ] && kill "$bench" 2>/dev/null && wait "$bench" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
"$keelson" bench api --duration-secs "$secs" --list-sizes 1000 --watchers 10 --watch-secs 2 \
  --pods 2000 --lease-nodes 200 >"$work/report" 2>"$work/log" &
bench=$!
until grep -q "^bench: $phase" "$work/log"; do
  kill -0 "$bench" 2>/dev/null || { cat "$work/log" >&2; echo "the bench ended before '$phase'" >&2; exit 1; }
  sleep 0.1
done
# The servers are the bench's children.
pids=$(pgrep -P "$bench" -f "keelson server" | paste -sd, -)
[ -n "$pids" ] || { echo "no keelson server among the bench's children" >&2; exit 1; }
echo "profiling servers $pids for $((secs - 2)) s of '$phase'" >&2
perf record -q -F 199 --call-graph dwarf,16384 -p "$pids" -o "$work/perf.data" -- sleep $((secs - 2)) 2>/dev/null
perf script -i "$work/perf.data" -F comm,tid,ip,sym,dso --no-inline 2>/dev/null | python3 "$(dirname "$0")/profile_stages.py"
wait "$bench"
bench=
cat "$work/report"
