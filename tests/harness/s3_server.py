"""A real S3 server on loopback for the tests of s3:// SOURCEs: moto's
server mode (ThreadedMotoServer), with request signing checked.

Run by harness.s3.S3Server under a Python that has moto (it is not the
tests' Python): `python s3_server.py`. It starts moto on 127.0.0.1 (a free
port), makes an IAM user with an access key allowed everything (the first
three requests, before moto starts to check signatures: see
INITIAL_NO_AUTH_ACTION_COUNT), and prints one JSON line
{"port", "access_key", "secret_key"}. From then on every request must be
signed with that key, so wrong credentials fail as on AWS.

It then answers commands, one JSON object per line on stdin, one JSON line
on stdout each:
  {"op": "bucket", "bucket": B}                       create a bucket
  {"op": "put", "bucket": B, "key": K, "path": P}     upload file P as K
  {"op": "put_bytes", "bucket": B, "key": K, "hex": H}
  {"op": "put_tree", "bucket": B, "prefix": P, "root": R}
                                  every file under R as P/<its relative path>
  {"op": "delete", "bucket": B, "key": K}
  {"op": "etag", "bucket": B, "key": K}               -> {"etag": E}
EOF on stdin stops it.
"""

import json
import logging
import os
import sys
import urllib.parse

os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

import boto3  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from moto.iam.access_control import S3IAMRequest  # noqa: E402
from moto.server import ThreadedMotoServer  # noqa: E402


def _create_aws_request(self):
    """moto 5.2 checks a bucket-level request (ListObjectsV2) against a body
    made of its parsed parameters ("BucketName=..."), which no client sent:
    every signed listing fails, boto3's too; and it hands the query over
    decoded. Check what was sent: the body, else nothing, and the query
    encoded. The rest of the check (botocore's Signature V4) is moto's."""
    signed_headers = self._get_string_between(
        "SignedHeaders=", ",", self._headers["Authorization"]).split(";")
    headers = self._create_headers_for_aws_request(signed_headers, self._headers)
    path, _, query = self._path.partition("?")
    if query:
        # moto hands the query over decoded; Signature V4 signs it encoded.
        query = "&".join(
            "%s=%s" % (urllib.parse.quote(k, safe="-_.~"), urllib.parse.quote(v, safe="-_.~"))
            for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True))
        path += "?" + query
    request = AWSRequest(method=self._method, url=path, data=self._body or b"",
                         headers=headers)
    request.context["timestamp"] = headers["X-Amz-Date"]
    return request


S3IAMRequest._create_aws_request = _create_aws_request


def main():
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    url = "http://127.0.0.1:%d" % port
    boot = dict(endpoint_url=url, region_name="us-east-1",
                aws_access_key_id="boot", aws_secret_access_key="boot")
    iam = boto3.client("iam", **boot)
    iam.create_user(UserName="joaderfs-test")
    key = iam.create_access_key(UserName="joaderfs-test")["AccessKey"]
    iam.put_user_policy(
        UserName="joaderfs-test", PolicyName="all",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                      aws_access_key_id=key["AccessKeyId"],
                      aws_secret_access_key=key["SecretAccessKey"])
    print(json.dumps({"port": port, "access_key": key["AccessKeyId"],
                      "secret_key": key["SecretAccessKey"]}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        answer = {}
        try:
            if op == "bucket":
                s3.create_bucket(Bucket=cmd["bucket"])
            elif op == "put":
                with open(cmd["path"], "rb") as f:
                    s3.put_object(Bucket=cmd["bucket"], Key=cmd["key"], Body=f.read())
            elif op == "put_bytes":
                s3.put_object(Bucket=cmd["bucket"], Key=cmd["key"],
                              Body=bytes.fromhex(cmd["hex"]))
            elif op == "put_tree":
                for folder, _, files in os.walk(cmd["root"]):
                    for name in files:
                        path = os.path.join(folder, name)
                        key = os.path.relpath(path, cmd["root"])
                        if cmd["prefix"]:
                            key = cmd["prefix"] + "/" + key
                        with open(path, "rb") as f:
                            s3.put_object(Bucket=cmd["bucket"], Key=key, Body=f.read())
            elif op == "delete":
                s3.delete_object(Bucket=cmd["bucket"], Key=cmd["key"])
            elif op == "etag":
                head = s3.head_object(Bucket=cmd["bucket"], Key=cmd["key"])
                answer["etag"] = head["ETag"].strip('"')
            else:
                answer["error"] = "unknown op " + op
        except Exception as e:  # reported to the test, which fails on it
            answer["error"] = repr(e)
        print(json.dumps(answer), flush=True)
    server.stop()


if __name__ == "__main__":
    main()
