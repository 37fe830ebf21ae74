#!/usr/bin/env bash
# Property-based API fuzzing with schemathesis (PyPI) against a running cluster's served
# /openapi/v3: every group-version's document (or the ones named), every operation,
# checked for no 5xx and for every error being a v1 Status with the right code
# (tests/schemathesis_checks.py).
#
#   bash tests/schemathesis.sh KUBECONFIG [MAX_EXAMPLES_PER_OPERATION [GROUP_VERSION ...]]
#
# MAX_EXAMPLES defaults to 20; GROUP_VERSION as /openapi/v3 names them (`api/v1`,
# `apis/apps/v1`), all of them by default.
#
# Bring a cluster up first (`keelson up --servers 1 --data-dir DIR`, then DIR/kubeconfig).
# It writes and deletes objects at random: use a throwaway cluster. Watches are left out
# (`watch`, `follow` and the /watch/ paths stream until they time out by design); each
# request has 15 s. The venv lives in ${SCHEMATHESIS_VENV:-$HOME/.cache/keelson-schemathesis}.
set -euo pipefail
venv=${SCHEMATHESIS_VENV:-$HOME/.cache/keelson-schemathesis}
[ -x "$venv/bin/schemathesis" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q "schemathesis==4.32.5"; }
# `--install` only makes sure the venv is there (the e2e test asks first, to tell a
# machine without PyPI from a failing run).
[ "${1:-}" = --install ] && exit 0
kubeconfig=${1:?usage: tests/schemathesis.sh KUBECONFIG [MAX_EXAMPLES [GROUP_VERSION ...]]}
examples=${2:-20}
shift $(( $# < 2 ? $# : 2 ))
wanted=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KUBECONFIG=$kubeconfig
server=$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
kubectl config view --raw --minify -o jsonpath='{.users[0].user.client-certificate-data}' | base64 -d > "$work/cert.pem"
kubectl config view --raw --minify -o jsonpath='{.users[0].user.client-key-data}' | base64 -d > "$work/key.pem"
served=$(kubectl get --raw /openapi/v3 | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)["paths"]))')
for gv in "${wanted[@]}"; do
  [[ " $served " == *" $gv "* ]] || { echo "$gv is not served at /openapi/v3 (served: $served)" >&2; exit 2; }
done
for gv in ${wanted[@]:-$served}; do
  kubectl get --raw "/openapi/v3/$gv" > "$work/$(echo "$gv" | tr / _).json"
done
python3 - "$work"/*.json <<'EOF'
import json, sys
streaming = {"watch", "allowWatchBookmarks", "sendInitialEvents", "follow"}
for f in sys.argv[1:]:
    doc = json.load(open(f))
    keep = lambda ps: [p for p in ps if not (isinstance(p, dict) and p.get("name") in streaming)]
    for item in doc["paths"].values():
        for key, op in list(item.items()):
            if key == "parameters":
                item[key] = keep(op)
            elif isinstance(op, dict) and "parameters" in op:
                op["parameters"] = keep(op["parameters"])
    json.dump(doc, open(f, "w"))
EOF
status=0
export PYTHONPATH="$(cd "$(dirname "$0")" && pwd)${PYTHONPATH:+:$PYTHONPATH}" SCHEMATHESIS_HOOKS=schemathesis_checks
# schemathesis keeps a .schemathesis directory where it runs: run it in the scratch directory
cd "$work"
for spec in "$work"/*.json; do
  echo "== $(basename "$spec" .json)"
  "$venv/bin/schemathesis" run "$spec" --url "$server" --request-cert "$work/cert.pem" --request-cert-key "$work/key.pem" \
    --tls-verify false --checks not_a_server_error,error_is_a_status --exclude-path-regex '/watch/' --max-examples "$examples" \
    --request-timeout 15 --phases coverage,fuzzing --no-color --seed 1 --generation-database none || status=$?
done
exit "$status"
