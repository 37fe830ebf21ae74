#!/usr/bin/env bash
# Builds Keelson and starts a local 3-server cluster in the foreground (Ctrl-C stops it).
# Extra arguments go to `keelson up` (e.g. --servers 5 --data-dir DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-build-deps.sh
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/keelson-target}
cargo build --release --bin keelson
exec "$CARGO_TARGET_DIR/release/keelson" up "$@"
