#!/usr/bin/env bash
# Installs the Debian packages Keelson builds and tests with, when they are missing.
# Needs root to install; without root it only checks and says what is missing.
set -euo pipefail
need=()
dpkg -s librocksdb-dev >/dev/null 2>&1 || need+=(librocksdb-dev)
dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
for extra in "$@"; do
  dpkg -s "$extra" >/dev/null 2>&1 || need+=("$extra")
done
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "missing Debian packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
  exit 1
fi
echo "installing: ${need[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
