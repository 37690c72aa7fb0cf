#!/usr/bin/env python3
"""Writes tests/data/io/sigv4_vectors.json: SigV4 signatures computed by botocore.

prism's signer (prism/io/sigv4.cpp) is checked against these, step by step: the canonical
request, the string to sign and the signature of each case. Needs botocore
(scripts/requirements/tools.txt); writes into the repository whatever the directory it runs from:

  scripts/setup.sh --tools && .venv/bin/python tools/gen_sigv4_vectors.py
"""
import datetime
import json
import pathlib
from unittest import mock

import botocore
from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ROOT = pathlib.Path(__file__).resolve().parent.parent
AMZ_DATE = "20240513T093000Z"
FIXED_NOW = datetime.datetime(2024, 5, 13, 9, 30, 0)

CASES = [
    # name, service, region, method, host, path (encoded, as sent), query, headers, token
    ("s3-get-object-range", "s3", "us-east-1", "GET", "examplebucket.s3.amazonaws.com",
     "/test.txt", [], [("Range", "bytes=0-9")], None),
    ("s3-head-object-path-style", "s3", "eu-west-3", "HEAD", "127.0.0.1:4569",
     "/models/llama/model-00001-of-00002.safetensors", [], [], None),
    ("s3-get-object-encoded-key", "s3", "us-west-2", "GET", "bucket.s3.us-west-2.amazonaws.com",
     "/dir%20a/%C3%A9t%C3%A9%2Bplus.safetensors", [], [("Range", "bytes=100-199")], None),
    ("s3-list-objects-v2", "s3", "us-east-1", "GET", "127.0.0.1:4569", "/models",
     [("list-type", "2"), ("prefix", "llama 3/weights+x/"), ("delimiter", "/"),
      ("continuation-token", "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=")], [], None),
    ("s3-session-token", "s3", "ap-southeast-1", "GET", "bucket.s3.ap-southeast-1.amazonaws.com",
     "/key", [], [], "FwoGZXIvYXdzEJr//////////wEaDNtoken"),
    ("service-get-vanilla-query", "service", "us-east-1", "GET", "example.amazonaws.com", "/",
     [("Param2", "value2"), ("Param1", "value1")], [], None),
]

ACCESS_KEY = "AKIDEXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


def fixed_clock():
    """botocore's clock stopped at FIXED_NOW: the function newer versions read the time from,
    or the datetime module whose utcnow() older ones call."""
    if hasattr(botocore.auth, "get_current_datetime"):
        return mock.patch("botocore.auth.get_current_datetime", return_value=FIXED_NOW)
    fake = mock.MagicMock()
    fake.datetime.utcnow.return_value = FIXED_NOW
    fake.datetime.strptime = datetime.datetime.strptime
    return mock.patch("botocore.auth.datetime", fake)


def sign(case):
    name, service, region, method, host, path, query, headers, token = case
    url = "http://" + host + path
    request = AWSRequest(method=method, url=url, headers=dict(headers), params=query)
    request.headers["Host"] = host
    credentials = Credentials(ACCESS_KEY, SECRET_KEY, token)
    signer = (S3SigV4Auth if service == "s3" else SigV4Auth)(credentials, service, region)
    # Record the canonical request and string to sign as botocore computes them while signing.
    seen = {}
    original_string_to_sign = signer.string_to_sign

    def recording_string_to_sign(req, canonical_request):
        seen["canonical_request"] = canonical_request
        seen["string_to_sign"] = original_string_to_sign(req, canonical_request)
        return seen["string_to_sign"]

    signer.string_to_sign = recording_string_to_sign
    with fixed_clock():
        signer.add_auth(request)
    assert request.context["timestamp"] == AMZ_DATE
    canonical_request = seen["canonical_request"]
    string_to_sign = seen["string_to_sign"]
    authorization = request.headers["Authorization"]
    return {
        "name": name,
        "service": service,
        "region": region,
        "method": method,
        "host": host,
        "path": path,
        "query": [list(q) for q in query],
        "headers": [list(h) for h in headers],
        "session_token": token or "",
        "amz_date": AMZ_DATE,
        "canonical_request": canonical_request,
        "string_to_sign": string_to_sign,
        "signature": authorization.rsplit("Signature=", 1)[1],
        "authorization": authorization,
    }


def main():
    out = {
        "generator": "tools/gen_sigv4_vectors.py with botocore " + botocore.__version__,
        "access_key_id": ACCESS_KEY,
        "secret_access_key": SECRET_KEY,
        "cases": [sign(case) for case in CASES],
    }
    path = ROOT / "tests/data/io/sigv4_vectors.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)} ({len(CASES)} cases)")


if __name__ == "__main__":
    main()
