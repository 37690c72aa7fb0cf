"""An S3 server for the tests: moto's server mode on 127.0.0.1, with AWS request authentication
switched on, so every request's SigV4 signature is checked against the secret key (a wrong
secret is refused with SignatureDoesNotMatch, an unknown access key with InvalidAccessKeyId).

Usage: .venv/bin/python tests/tools/s3_server.py BUCKET [BUCKET ...]

It picks a free port, makes an IAM user allowed every S3 action, gives it an access key, makes
the buckets with that key, and then prints one line of JSON and serves until killed:
  {"port": 40123, "access_key_id": "AKIA...", "secret_access_key": "..."}
"""
import json
import os
import signal
import sys

# The three IAM calls below run before authentication starts; every request after them is
# authenticated. moto reads this when it is imported.
SETUP_ACTIONS = 3
os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = str(SETUP_ACTIONS)

import boto3  # noqa: E402
from moto.server import ThreadedMotoServer  # noqa: E402

ALLOW_S3 = {"Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}


def main():
    buckets = sys.argv[1:]
    if not buckets:
        sys.exit("usage: s3_server.py BUCKET [BUCKET ...]")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    endpoint = f"http://127.0.0.1:{port}"

    def client(service, key_id, secret):
        return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1",
                            aws_access_key_id=key_id, aws_secret_access_key=secret)

    iam = client("iam", "setup", "setup")  # not checked: these are the first SETUP_ACTIONS
    iam.create_user(UserName="prism-tests")
    iam.put_user_policy(UserName="prism-tests", PolicyName="s3",
                        PolicyDocument=json.dumps(ALLOW_S3))
    key = iam.create_access_key(UserName="prism-tests")["AccessKey"]
    s3 = client("s3", key["AccessKeyId"], key["SecretAccessKey"])
    for bucket in buckets:
        s3.create_bucket(Bucket=bucket)
    print(json.dumps({"port": port, "access_key_id": key["AccessKeyId"],
                      "secret_access_key": key["SecretAccessKey"]}), flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.stop()


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    main()
