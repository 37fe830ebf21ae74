#!/usr/bin/env bash
# Starts or stops a 3-member etcd cluster on loopback, for side-by-side benchmarks.
#   etcd-cluster.sh start DIR   -> prints the client endpoints (host:port) on stdout
#   etcd-cluster.sh stop DIR
#   etcd-cluster.sh kill DIR I      -> SIGKILL member eI (1..3), as a crash
#   etcd-cluster.sh restart DIR I   -> starts member eI again from its data directory
# With ETCD_TLS_DIR set (holding ca.crt, server.crt, server.key, client.crt, client.key),
# client and peer traffic use mutual TLS, as a production etcd (and Keelson) does; the
# server certificate must name 127.0.0.1 and allow both server and client auth.
# Needs Debian's etcd-server package (installed when missing and running as root).
set -euo pipefail
cmd=${1:?usage: etcd-cluster.sh start|stop DIR}
dir=${2:?usage: etcd-cluster.sh start|stop DIR}
base=${ETCD_BASE_PORT:-32379}

etcd_bin=$(command -v etcd || true)
if [ -z "$etcd_bin" ] && [ -x /usr/bin/etcd ]; then etcd_bin=/usr/bin/etcd; fi

case "$cmd" in
start)
  if [ -z "$etcd_bin" ] || ! command -v etcdctl >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
      # One install at a time: benches started together would race for dpkg's lock.
      (flock 9; if ! [ -x /usr/bin/etcd ] || ! command -v etcdctl >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client; fi) 9>/tmp/keelson-etcd-install.lock >&2
      etcd_bin=/usr/bin/etcd
    else
      echo "etcd is not installed (apt-get install etcd-server)" >&2; exit 1
    fi
  fi
  mkdir -p "$dir"
  scheme=http
  tls_args=()
  ctl_args=()
  if [ -n "${ETCD_TLS_DIR:-}" ]; then
    t=$ETCD_TLS_DIR
    for f in ca.crt server.crt server.key client.crt client.key; do
      [ -f "$t/$f" ] || { echo "ETCD_TLS_DIR=$t lacks $f" >&2; exit 1; }
    done
    scheme=https
    tls_args=(--cert-file "$t/server.crt" --key-file "$t/server.key" --trusted-ca-file "$t/ca.crt" --client-cert-auth
      --peer-cert-file "$t/server.crt" --peer-key-file "$t/server.key" --peer-trusted-ca-file "$t/ca.crt" --peer-client-cert-auth)
    ctl_args=(--cacert "$t/ca.crt" --cert "$t/client.crt" --key "$t/client.key")
  fi
  cluster=""
  for i in 1 2 3; do
    cluster+="e$i=$scheme://127.0.0.1:$((base + 10 * i + 1)),"
  done
  cluster=${cluster%,}
  endpoints=()
  for i in 1 2 3; do
    cport=$((base + 10 * i)); pport=$((base + 10 * i + 1))
    # Same durability as Keelson: fsync on every commit (etcd's default). Each member's
    # command is kept in eI.sh, so `restart` starts it again the same way.
    {
      printf 'exec'
      printf ' %q' "$etcd_bin" --name "e$i" --data-dir "$dir/e$i" \
        --listen-client-urls "$scheme://127.0.0.1:$cport" --advertise-client-urls "$scheme://127.0.0.1:$cport" \
        --listen-peer-urls "$scheme://127.0.0.1:$pport" --initial-advertise-peer-urls "$scheme://127.0.0.1:$pport" \
        --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token keelson-bench \
        --quota-backend-bytes $((8 * 1024 * 1024 * 1024)) "${tls_args[@]}"
      printf ' >>%q 2>&1\n' "$dir/e$i.log"
    } >"$dir/e$i.sh"
    bash "$dir/e$i.sh" &
    echo $! >"$dir/e$i.pid"
    endpoints+=("127.0.0.1:$cport")
  done
  # Wait until a leader exists (a put succeeds).
  for _ in $(seq 1 100); do
    if ETCDCTL_API=3 etcdctl --endpoints="$scheme://${endpoints[0]}" "${ctl_args[@]}" put /bench/ready 1 >/dev/null 2>&1; then
      echo "${endpoints[*]}"
      exit 0
    fi
    sleep 0.2
  done
  echo "etcd did not become ready; see $dir/e*.log" >&2
  exit 1
  ;;
stop)
  for f in "$dir"/e*.pid; do
    [ -f "$f" ] || continue
    kill "$(cat "$f")" 2>/dev/null || true
  done
  sleep 0.5
  for f in "$dir"/e*.pid; do
    [ -f "$f" ] || continue
    kill -9 "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
  ;;
kill)
  i=${3:?usage: etcd-cluster.sh kill DIR I}
  kill -9 "$(cat "$dir/e$i.pid")" 2>/dev/null || true
  ;;
restart)
  i=${3:?usage: etcd-cluster.sh restart DIR I}
  [ -f "$dir/e$i.sh" ] || { echo "$dir/e$i.sh missing: start the cluster first" >&2; exit 1; }
  bash "$dir/e$i.sh" &
  echo $! >"$dir/e$i.pid"
  ;;
*) echo "usage: etcd-cluster.sh start|stop DIR, or kill|restart DIR I" >&2; exit 2 ;;
esac
