"""Checks tests/schemathesis.sh adds to schemathesis' own (loaded through SCHEMATHESIS_HOOKS).

error_is_a_status: every 4xx/5xx answer of the Kubernetes API is a `v1 Status` whose
`code` is the HTTP status, as kube-apiserver answers (client-go and kubectl read the
reason and message from it).
"""
import json

import schemathesis


@schemathesis.check
def error_is_a_status(ctx, response, case):
    if response.status_code < 400:
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        raise AssertionError(f"a {response.status_code} whose body is not JSON: {response.content[:200]!r}")
    if not isinstance(body, dict) or body.get("kind") != "Status" or body.get("apiVersion") != "v1":
        raise AssertionError(f"a {response.status_code} whose body is not a v1 Status: {str(body)[:200]}")
    if body.get("status") != "Failure":
        raise AssertionError(f"a {response.status_code} Status with status {body.get('status')!r}, not Failure")
    if body.get("code") != response.status_code:
        raise AssertionError(f"a {response.status_code} Status with code {body.get('code')!r}")
    if not body.get("message"):
        raise AssertionError(f"a {response.status_code} Status without a message")
    return None
