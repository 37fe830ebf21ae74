#!/usr/bin/env bash
# Runs every test of the workspace. Installs the Debian packages the build and tests
# need when running as root (CI runs as root on a fresh machine).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-build-deps.sh
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/keelson-target}
export RUST_BACKTRACE=${RUST_BACKTRACE:-1}
cargo test --workspace --no-fail-fast 2>&1
