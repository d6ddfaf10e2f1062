"""AWS Signature Version 4 for the two calls a connection needs (Secrets Manager's
GetSecretValue, an RDS IAM auth token), so that a cold start in secret or IAM mode does not
import boto3 (about 200 ms of init in the Lambda runtime; docs/benchmarks.md).

Used when the credentials are in the environment, as Lambda gives them to a function
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``); anywhere else
(profiles, SSO, instance roles) ``pgdrain.aws.credentials`` falls back to boto3. The signing is
the published algorithm (docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv4.html) and
the tests check it byte for byte against botocore's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

from ..settings import read

ALGORITHM = "AWS4-HMAC-SHA256"
IAM_TOKEN_SECONDS = 900
"""An RDS IAM token is good for logging in for 15 minutes (RDS's own limit)."""


@dataclass(frozen=True)
class Credentials:
    """An access key; ``repr`` never shows the secret part or the session token."""

    access_key: str
    secret_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Credentials | None:
        """The key Lambda puts in a function's environment; None where there is none."""
        access, secret = read("AWS_ACCESS_KEY_ID", env), read("AWS_SECRET_ACCESS_KEY", env)
        if not (access and secret):
            return None
        return cls(access, secret, read("AWS_SESSION_TOKEN", env) or None)


def utc_now() -> datetime:
    """The signing time (a function, so that tests can hold the clock still)."""
    return datetime.now(UTC)


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _scope(moment: datetime, region: str, service: str) -> str:
    return f"{moment:%Y%m%d}/{region}/{service}/aws4_request"


def _signature(credentials: Credentials, moment: datetime, region: str, service: str,
               canonical_request: str) -> str:
    string_to_sign = "\n".join([
        ALGORITHM, f"{moment:%Y%m%dT%H%M%SZ}", _scope(moment, region, service),
        hashlib.sha256(canonical_request.encode()).hexdigest()])
    key = _hmac(f"AWS4{credentials.secret_key}".encode(), f"{moment:%Y%m%d}")
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def _encode(pairs: list[tuple[str, str]]) -> str:
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in pairs)


def signed_headers(*, method: str, url: str, headers: Mapping[str, str], body: bytes,
                   credentials: Credentials, region: str, service: str,
                   now: datetime | None = None) -> dict[str, str]:
    """``headers`` plus ``X-Amz-Date``, the session token and ``Authorization`` for a request
    to ``url`` (no query string) with ``body``."""
    moment = (now or utc_now()).astimezone(UTC)
    parts = urlsplit(url)
    signed = {**headers, "X-Amz-Date": f"{moment:%Y%m%dT%H%M%SZ}"}
    if credentials.token:
        signed["X-Amz-Security-Token"] = credentials.token
    canonical = {k.lower(): " ".join(v.split()) for k, v in signed.items()}
    canonical["host"] = parts.netloc
    names = sorted(canonical)
    request = "\n".join([
        method, parts.path or "/", "",
        "".join(f"{name}:{canonical[name]}\n" for name in names), ";".join(names),
        hashlib.sha256(body).hexdigest()])
    signature = _signature(credentials, moment, region, service, request)
    signed["Authorization"] = (
        f"{ALGORITHM} Credential={credentials.access_key}/{_scope(moment, region, service)}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}")
    return signed


def rds_iam_token(*, host: str, port: int, user: str, region: str, credentials: Credentials,
                  now: datetime | None = None) -> str:
    """An RDS IAM auth token (a presigned ``connect`` URL without its scheme), what botocore's
    ``generate_db_auth_token`` makes."""
    moment = (now or utc_now()).astimezone(UTC)
    netloc = f"{host}:{port}"
    operation = [("Action", "connect"), ("DBUser", user)]
    auth = [("X-Amz-Algorithm", ALGORITHM),
            ("X-Amz-Credential", f"{credentials.access_key}/{_scope(moment, region, 'rds-db')}"),
            ("X-Amz-Date", f"{moment:%Y%m%dT%H%M%SZ}"),
            ("X-Amz-Expires", str(IAM_TOKEN_SECONDS)), ("X-Amz-SignedHeaders", "host")]
    if credentials.token:
        auth.append(("X-Amz-Security-Token", credentials.token))
    # Sorted by name (every name here is letters, digits and '-': the same encoded or not).
    canonical_query = _encode(sorted(operation + auth))
    request = "\n".join(["GET", "/", canonical_query, f"host:{netloc}\n", "host",
                         hashlib.sha256(b"").hexdigest()])
    signature = _signature(credentials, moment, region, "rds-db", request)
    return f"{netloc}/?{_encode(operation + auth)}&X-Amz-Signature={signature}"


def endpoint(service: str, region: str, env: Mapping[str, str] | None = None) -> str:
    """The service's regional HTTPS endpoint, or the one ``AWS_ENDPOINT_URL_<SERVICE>`` or
    ``AWS_ENDPOINT_URL`` names (as boto3 reads them: a stand-in, a VPC endpoint's URL)."""
    overrides = {"secretsmanager": "AWS_ENDPOINT_URL_SECRETS_MANAGER"}
    override = str(read(overrides[service], env) or read("AWS_ENDPOINT_URL", env) or "")
    if override:
        return override.rstrip("/")
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"https://{service}.{region}.{suffix}"


class AwsCallFailed(Exception):
    """An AWS API answered an error (``code``: its ``__type``), or could not be reached."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code


RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


def call_json_api(*, service: str, target: str, payload: dict[str, Any], region: str,
                  credentials: Credentials, timeout: float, attempts: int = 1,
                  env: Mapping[str, str] | None = None) -> Any:
    """One AWS JSON 1.1 API call (``X-Amz-Target``), each attempt bounded by ``timeout``
    seconds; a throttle, a 5xx or a network failure is tried again up to ``attempts`` times."""
    import http.client  # only here: the URL mode never needs it at init

    url = endpoint(service, region, env)
    parts = urlsplit(url)
    body = json.dumps(payload).encode()
    last: AwsCallFailed | None = None
    for _ in range(max(attempts, 1)):
        headers = signed_headers(
            method="POST", url=f"{parts.scheme}://{parts.netloc}/", body=body,
            headers={"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": target},
            credentials=credentials, region=region, service=service)
        connection_class = (http.client.HTTPSConnection if parts.scheme == "https"
                            else http.client.HTTPConnection)
        connection = connection_class(parts.netloc, timeout=timeout)
        try:
            connection.request("POST", "/", body=body, headers=headers)
            response = connection.getresponse()
            status, text = response.status, response.read()
        except OSError as exc:  # refused, reset, timed out, TLS
            last = AwsCallFailed(type(exc).__name__, str(exc))
            continue
        finally:
            connection.close()
        try:
            answer = json.loads(text or b"{}")
        except ValueError:  # not the API's JSON: a proxy's page, a truncated answer
            answer = {"__type": f"HTTP {status}", "message": "the answer is not JSON"}
        if status == 200:
            return answer
        code = str(answer.get("__type", f"HTTP {status}")).rsplit("#", 1)[-1]
        last = AwsCallFailed(code, str(answer.get("message") or answer.get("Message") or ""))
        if status not in RETRYABLE_STATUS:
            break
    assert last is not None
    raise last
