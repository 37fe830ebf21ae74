#!/usr/bin/env bash
# Installs the Debian packages Keelson builds and tests with, when they are missing:
# RocksDB, clang (bindgen) and protoc to build; iproute2 and nftables for the chaos
# harness (network namespaces and partitions; its tests need root anyway); containerd,
# runc, the CNI plugins, busybox-static (the built-in images) and curl for real nodes;
# chromium for the status page's browser test.
# Needs root to install; without root it says what is missing and fails only if the
# build itself cannot work.
set -euo pipefail
need=()
optional=()
dpkg -s librocksdb-dev >/dev/null 2>&1 || need+=(librocksdb-dev)
dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
command -v ip >/dev/null 2>&1 || optional+=(iproute2)
command -v nft >/dev/null 2>&1 || optional+=(nftables)
command -v containerd >/dev/null 2>&1 || optional+=(containerd)
command -v runc >/dev/null 2>&1 || optional+=(runc)
[ -x /usr/lib/cni/bridge ] || optional+=(containernetworking-plugins)
[ -x /bin/busybox ] || optional+=(busybox-static)
command -v curl >/dev/null 2>&1 || optional+=(curl)
# The CNI portmap plugin (hostPort) programs iptables inside each node.
command -v iptables >/dev/null 2>&1 || optional+=(iptables)
# The service proxy flushes the conntrack entries of removed UDP endpoints.
command -v conntrack >/dev/null 2>&1 || optional+=(conntrack)
# `keelson bench ingress` (and its test) measures nginx as a reverse proxy beside the ingress.
[ -x /usr/sbin/nginx ] || optional+=(nginx)
# `keelson bench store|failover --compare-etcd` (and their tests, which run side by side)
# start a 3-member etcd: installed here once, not by each of them at the same moment.
[ -x /usr/bin/etcd ] || optional+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || optional+=(etcd-client)
# The status page's test draws /ui in headless Chromium.
[ -x /usr/bin/chromium ] || optional+=(chromium)
for extra in "$@"; do
  dpkg -s "$extra" >/dev/null 2>&1 || need+=("$extra")
done
all=("${need[@]}" "${optional[@]}")
if [ ${#all[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "missing Debian packages: ${all[*]} (run as root, or: sudo apt-get install ${all[*]})" >&2
  [ ${#need[@]} -eq 0 ] || exit 1
  exit 0
fi
echo "installing: ${all[*]}" >&2
apt-get update -qq
# Packages must not start their services (nginx would take port 80 of the host): the
# tests and benches start what they need themselves.
guard=
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  guard=1
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${all[@]}" >/dev/null
[ -z "$guard" ] || rm -f /usr/sbin/policy-rc.d
