#!/usr/bin/env python3
"""Reads `perf script` output (call chains, leaf first) from stdin and prints where the
samples went, by stage of the API server's work.

A sample belongs to the innermost frame of a named stage of the server (audit, RBAC,
admission, schema checks, the store call, Raft, RocksDB, the watch cache, ...): walking
from the leaf up, the first frame matching a stage pattern decides. A sample with no such
frame is put under the generic work at its leaf (TLS, HTTP, JSON, the allocator, the
runtime, the kernel). So JSON written by the audit log counts as audit, and JSON decoded
by the request handler as JSON.
"""

import collections
import re
import sys

# (stage, pattern on the demangled symbol), innermost-first decides.
STAGES = [
    ("audit log", r"keelson_apiserver::audit"),
    ("RBAC", r"keelson_rbac::"),
    ("authentication", r"keelson_apiserver::auth::"),
    ("priority and fairness", r"keelson_apiserver::inflight"),
    ("admission", r"keelson_apiserver::admission"),
    ("schema checks", r"keelson_schema::"),
    ("managed fields", r"keelson_apiserver::fieldset"),
    ("defaults and validation", r"keelson_apimachinery::|keelson_apiserver::strategy"),
    ("protobuf encoding", r"keelson_kube_protobuf::|keelson_apiserver::protobuf"),
    ("watch cache", r"keelson_apiserver::watch_cache"),
    ("watch serving", r"keelson_apiserver::http::watch"),
    ("list serving", r"keelson_apiserver::http::list"),
    ("RocksDB", r"rocksdb|keelson_rocks::"),
    ("MVCC store", r"keelson_mvcc::"),
    ("Raft (openraft)", r"openraft::|keelson_raft::"),
    ("replica (apply, peers)", r"keelson_replica::"),
    ("store client", r"keelson_client::|keelson_apiserver::storage"),
    ("metrics and tracing", r"prometheus|tracing_subscriber|tracing_core|keelson_apiserver::metrics|opentelemetry"),
]
GENERIC = [
    ("TLS", r"rustls|ring::|aws_lc|libcrypto|libssl"),
    ("HTTP (hyper, h2)", r"hyper::|h2::|^http::|tower::|tonic::"),
    ("JSON", r"serde_json|serde::"),
    ("protobuf (peer RPC)", r"prost::"),
    ("allocator and memcpy", r"malloc|free|realloc|memmove|memcpy|memset|__rust_alloc|__rust_dealloc|alloc::"),
    ("tokio runtime", r"tokio::|mio::"),
]
STAGE_RES = [(n, re.compile(p)) for n, p in STAGES]
GENERIC_RES = [(n, re.compile(p)) for n, p in GENERIC]


def classify(frames):
    """frames: [(symbol, dso)], leaf first."""
    for sym, _ in frames:
        for name, rx in STAGE_RES:
            if rx.search(sym):
                return name
    if frames:
        sym, dso = frames[0]
        if "kernel" in dso:
            return "kernel (syscalls, network)"
        for sym, dso in frames[:8]:
            for name, rx in GENERIC_RES:
                if rx.search(sym) or rx.search(dso):
                    return name
    return "other"


def samples(lines):
    frames, in_sample = [], False
    for line in lines:
        if not line.strip():
            if in_sample:
                yield frames
            frames, in_sample = [], False
            continue
        if not line.startswith(("\t", " ")):
            in_sample = True
            continue
        # "\t    55d0c0a1b2c3 symbol+0x12 (/path/to/dso)"
        m = re.match(r"\s*[0-9a-f]+\s+(.*?)(?:\+0x[0-9a-f]+)?\s+\((.*)\)\s*$", line)
        if m:
            frames.append((m.group(1), m.group(2)))
    if in_sample:
        yield frames


def main():
    counts = collections.Counter(classify(f) for f in samples(sys.stdin))
    total = sum(counts.values())
    if total == 0:
        sys.exit("no samples in the perf script output")
    print(f"{'stage':<28} {'share':>7}   ({total} samples)")
    for name, n in counts.most_common():
        print(f"{name:<28} {100.0 * n / total:6.1f}%")


if __name__ == "__main__":
    main()
