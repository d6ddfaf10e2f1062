"""pgdrain's own SigV4 (pgdrain.aws.sigv4): byte for byte what botocore signs, so a cold start
in secret or IAM mode needs no boto3; bounded retries; secrets never in a repr."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from pgdrain.aws import sigv4

FROZEN = datetime.datetime(2026, 12, 1, 5, 4, 3)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=[None, "session-token/with+odd=chars"], ids=["no-token", "token"])
def keys(request):
    return sigv4.Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                             request.param)


def _botocore(keys: sigv4.Credentials) -> BotoCredentials:
    return BotoCredentials(keys.access_key, keys.secret_key, keys.token)


def test_a_json_api_request_is_signed_as_botocore_signs_it(keys, monkeypatch):
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: FROZEN)
    url = "https://secretsmanager.eu-west-1.amazonaws.com/"
    body = json.dumps({"SecretId": "arn:aws:secretsmanager:eu-west-1:1:secret:db"}).encode()
    headers = {"Content-Type": "application/x-amz-json-1.1",
               "X-Amz-Target": "secretsmanager.GetSecretValue"}
    expected = AWSRequest("POST", url, data=body, headers=dict(headers))
    botocore.auth.SigV4Auth(_botocore(keys), "secretsmanager", "eu-west-1").add_auth(expected)
    mine = sigv4.signed_headers(method="POST", url=url, headers=headers, body=body,
                                credentials=keys, region="eu-west-1",
                                service="secretsmanager",
                                now=FROZEN.replace(tzinfo=datetime.UTC))
    assert mine["Authorization"] == expected.headers["Authorization"]
    assert mine["X-Amz-Date"] == expected.headers["X-Amz-Date"] == "20261201T050403Z"
    assert mine.get("X-Amz-Security-Token") == keys.token


@pytest.mark.parametrize(("host", "port", "region"), [
    ("orders.c9akciq32.eu-west-1.rds.amazonaws.com", 5432, "eu-west-1"),
    ("proxy.proxy-c9akciq32.us-east-2.rds.amazonaws.com", 6543, "us-east-2"),
])
def test_an_iam_token_is_the_one_botocore_makes(keys, monkeypatch, host, port, region):
    import boto3

    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: FROZEN)
    client = boto3.session.Session(
        aws_access_key_id=keys.access_key, aws_secret_access_key=keys.secret_key,
        aws_session_token=keys.token).client("rds", region_name=region)
    expected = client.generate_db_auth_token(DBHostname=host, Port=port, DBUsername="app_user")
    mine = sigv4.rds_iam_token(host=host, port=port, user="app_user", region=region,
                               credentials=keys, now=FROZEN.replace(tzinfo=datetime.UTC))
    assert mine == expected


def test_credentials_never_show_their_secret_parts():
    keys = sigv4.Credentials("AKID", "s3cret-part", "the-session-token")
    assert "s3cret-part" not in repr(keys) and "the-session-token" not in repr(keys)
    assert sigv4.Credentials.from_env({"AWS_ACCESS_KEY_ID": "AKID"}) is None


def test_endpoints_follow_boto3s_variables():
    assert sigv4.endpoint("secretsmanager", "eu-west-1", {}) == (
        "https://secretsmanager.eu-west-1.amazonaws.com")
    assert sigv4.endpoint("secretsmanager", "cn-north-1", {}) == (
        "https://secretsmanager.cn-north-1.amazonaws.com.cn")
    assert sigv4.endpoint("secretsmanager", "eu-west-1", {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1/",
        "AWS_ENDPOINT_URL_SECRETS_MANAGER": "http://127.0.0.1:2/"}) == "http://127.0.0.1:2"


@pytest.fixture
def flaky_api():
    """A loopback JSON API answering each request with the next (status, body) queued."""
    queue: list[tuple[int, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            status, body = queue.pop(0)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", queue
    server.shutdown()
    server.server_close()


def _call(endpoint: str, attempts: int):
    return sigv4.call_json_api(
        service="secretsmanager", target="secretsmanager.GetSecretValue",
        payload={"SecretId": "x"}, region="eu-west-1",
        credentials=sigv4.Credentials("AKID", "secret"), timeout=5, attempts=attempts,
        env={"AWS_ENDPOINT_URL_SECRETS_MANAGER": endpoint})


def test_a_throttle_or_a_5xx_is_tried_again_within_the_attempts(flaky_api):
    endpoint, queue = flaky_api
    queue += [(429, b'{"__type": "ThrottlingException"}'), (503, b"<html>busy</html>"),
              (200, b'{"SecretString": "ok"}')]
    assert _call(endpoint, attempts=3) == {"SecretString": "ok"}
    queue += [(503, b"<html>busy</html>"), (200, b'{"SecretString": "late"}')]
    with pytest.raises(sigv4.AwsCallFailed, match="HTTP 503: the answer is not JSON"):
        _call(endpoint, attempts=1)


def test_a_client_error_is_not_tried_again(flaky_api):
    endpoint, queue = flaky_api
    queue += [(400, b'{"__type": "com.amazonaws#AccessDeniedException", "Message": "no"}'),
              (200, b"{}")]
    with pytest.raises(sigv4.AwsCallFailed, match=r"^AccessDeniedException: no$") as caught:
        _call(endpoint, attempts=3)
    assert caught.value.code == "AccessDeniedException"
    assert len(queue) == 1  # one request only


def test_a_secret_mode_connection_never_imports_boto3(aws):
    # The function's cold start: credentials from the environment, the secret over HTTPS
    # (here the loopback stand-in), and neither boto3 nor botocore loaded.
    secret = {"username": "app", "password": "pw", "host": "db.example.com", "port": 5432,
              "dbname": "app"}
    arn = aws.create_secret(Name="db", SecretString=json.dumps(secret))["ARN"]
    import os

    env = {**os.environ, "DB_SECRET_ARN": arn,
           "PYTHONPATH": str(ROOT / "layers" / "pgdrain")}
    env.pop("DATABASE_URL", None)  # it would win over the secret (a run against PostgreSQL 15)
    code = ("import sys, json; from pgdrain.aws.credentials import connect_params_from_env; "
            "p = connect_params_from_env(); "
            "print(json.dumps([p.user, p.host, 'boto3' in sys.modules, "
            "'botocore' in sys.modules]))")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["app", "db.example.com", False, False]
