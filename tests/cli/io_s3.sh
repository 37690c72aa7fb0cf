#!/usr/bin/env bash
# `prism io` on s3:// against moto's S3 server (tests/tools/s3_server.py), which checks SigV4
# signatures: reads with the right key, and one clear error line and a non-zero exit for a wrong
# secret key or an unknown access key.
set -euo pipefail
prism="$1"
python="${PRISM_VENV_PYTHON:?}"
tmp="$(mktemp -d)"
server=""
cleanup() {
  [[ -n "$server" ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

[[ -x "$python" ]] || fail "no virtual environment at $python (scripts/setup.sh makes it)"
"$python" "$PRISM_SOURCE_DIR/tests/tools/s3_server.py" models >"$tmp/server.out" 2>"$tmp/server.log" &
server=$!
for _ in $(seq 300); do
  [[ -s "$tmp/server.out" ]] && break
  kill -0 "$server" 2>/dev/null || fail "the S3 server did not start: $(cat "$tmp/server.log")"
  sleep 0.1
done
read -r port key secret < <("$python" -c '
import json, sys
s = json.load(open(sys.argv[1]))
print(s["port"], s["access_key_id"], s["secret_access_key"])' "$tmp/server.out")
export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID="$key" AWS_SECRET_ACCESS_KEY="$secret"
unset AWS_ENDPOINT_URL_S3 AWS_SESSION_TOKEN
export PRISM_HTTP_RETRIES=1 PRISM_HTTP_BACKOFF_MS=10

# An object put by boto3 (AWS's own client and signer), read back by prism.
"$python" -c '
import boto3, os
boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1").put_object(
    Bucket="models", Key="notes/hello.txt", Body=b"hello from s3\n")'
[[ "$("$prism" io cat s3://models/notes/hello.txt)" == "hello from s3" ]] || fail "cat"
"$prism" io ls s3://models | grep -q "notes/" || fail "ls"

# Wrong secret: refused by the signature check, one line, non-zero exit.
set +e
AWS_SECRET_ACCESS_KEY="not-the-secret" "$prism" io cat s3://models/notes/hello.txt \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "a wrong secret key was accepted"
[[ ! -s "$tmp/out" ]] || fail "output despite the refusal: $(cat "$tmp/out")"
[[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "expected one error line: $(cat "$tmp/err")"
grep -q "s3://models/notes/hello.txt: access denied (HTTP 403, SignatureDoesNotMatch); check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY" \
  "$tmp/err" || fail "wrong-secret message: $(cat "$tmp/err")"

# Unknown access key.
set +e
AWS_ACCESS_KEY_ID="AKIANOTAKEY" "$prism" io ls s3://models >"$tmp/out" 2>"$tmp/err"
rc=$?
set -e
[[ $rc -ne 0 && $(wc -l <"$tmp/err") -eq 1 ]] || fail "unknown key: rc $rc, $(cat "$tmp/err")"
grep -q "InvalidAccessKeyId" "$tmp/err" || fail "unknown-key message: $(cat "$tmp/err")"
echo "io_s3: ok"
