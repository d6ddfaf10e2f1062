"""Database credentials in AWS: ``DATABASE_URL``, a Secrets Manager secret, or RDS IAM auth.

The mode follows the first setting that is present:

1. ``DATABASE_URL``: the URL says everything (``pgdrain.db.parse_database_url``).
2. ``DB_SECRET_ARN``: a Secrets Manager secret in the RDS JSON format
   (``{"username", "password", "host", "port", "dbname", "engine", ...}``), fetched with boto3
   (its waits bounded by the caller's time left) and cached for
   ``PGDRAIN_SECRET_MAX_AGE_SECONDS`` across invocations.
   ``DB_HOST``, ``DB_PORT`` and ``DB_NAME``, when set, take precedence over the secret's
   values (an RDS Proxy endpoint; an RDS-managed master secret holds only username and
   password). When the server rejects the password, ``connect_from_env`` fetches the secret
   again and retries once, so a rotated password is picked up without waiting for the cache.
3. ``DB_IAM_AUTH`` true: the password is a fresh RDS IAM token for ``DB_USER`` at
   ``DB_HOST:DB_PORT`` (valid 15 minutes; only checked at login).

For 2 and 3, TLS comes from ``DB_SSLMODE`` (default ``verify-full``) and ``DB_SSL_ROOT_CERT``;
RDS certificates are not in the system store, so verification needs the RDS CA bundle.

boto3 costs hundreds of milliseconds to import; it is imported only by the modes that use it,
so a ``DATABASE_URL`` cold start never loads it.

Passwords and tokens never appear in pgdrain's messages, nor in the exceptions it chains.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import ssl
import sys
import time
from collections.abc import Mapping
from typing import Any, Literal

import pg8000.exceptions
import pg8000.native

from ..db import _SSLMODES, ConnectParams, connect, parse_database_url, rds_region, sqlstate
from ..errors import ConfigError, DatabaseConnectError
from ..pgpass import password_for
from ..settings import read, setting
from . import sigv4

log = logging.getLogger(__name__)

Mode = Literal["url", "secret", "iam"]

DEFAULT_DB_PORT = 5432
DEFAULT_DB_NAME = "postgres"
DEFAULT_DB_SSLMODE = "verify-full"
RDS_CA_BUNDLE_URL = "https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem"

# invalid_password, invalid_authorization_specification (e.g. no pg_hba.conf entry / rejected)
AUTH_FAILURE_SQLSTATES = frozenset({"28P01", "28000"})


_rds_clients: dict[str | None, Any] = {}

SETUP_HINT = (
    "set DATABASE_URL, or DB_SECRET_ARN (a Secrets Manager secret in the RDS JSON format), "
    "or DB_IAM_AUTH=true with DB_HOST, DB_USER and DB_NAME"
)


def credential_mode(env: Mapping[str, str] | None = None) -> Mode:
    """Which way ``env`` configures the database: ``url``, ``secret`` or ``iam``.

    Raises ConfigError when none is configured, or ``DB_IAM_AUTH`` is not a boolean.
    """
    env = os.environ if env is None else env
    if _get(env, "DATABASE_URL"):
        return "url"
    if _get(env, "DB_SECRET_ARN"):
        return "secret"
    if read("DB_IAM_AUTH", env):
        return "iam"
    raise ConfigError(f"no database configured: {SETUP_HINT}")


def connect_params_from_env(
    env: Mapping[str, str] | None = None, *, refresh: bool = False,
    timeout: float | None = None,
) -> ConnectParams:
    """Connection parameters from the environment (see the module docstring for the modes).

    ``refresh=True`` fetches the secret again instead of using the cached copy; ``timeout``
    (seconds) bounds that fetch. Raises ConfigError for missing or invalid settings and
    DatabaseConnectError when the secret or the IAM token cannot be obtained from AWS.
    """
    env = os.environ if env is None else env
    mode = credential_mode(env)
    if mode == "url":
        params = parse_database_url(_get(env, "DATABASE_URL"))
        if params.password is None:  # as libpq: PGPASSWORD, then the password file
            password = password_for(None if params.unix_sock else params.host, params.port,
                                    params.database, params.user,
                                    password=_get(env, "PGPASSWORD") or None,
                                    passfile=_get(env, "PGPASSFILE") or None)
            params = dataclasses.replace(params, password=password)
        return params
    if mode == "secret":
        return params_from_secret(_fetch_secret(env, refresh=refresh, timeout=timeout), env)
    return _iam_params(env)


def connect_from_env(env: Mapping[str, str] | None = None, *, timeout: float | None = None
                     ) -> pg8000.native.Connection:
    """Open a pg8000 native connection (autocommit) with ``connect_params_from_env``
    (``open_from_env``, without where it went)."""
    return open_from_env(env, timeout=timeout)[0]


def open_from_env(env: Mapping[str, str] | None = None, *, timeout: float | None = None
                  ) -> tuple[pg8000.native.Connection, ConnectParams]:
    """Open a pg8000 native connection (autocommit) with ``connect_params_from_env``, and the
    parameters it was opened with (``where`` says where, without the password).

    ``timeout`` (seconds) bounds the connect and login (see ``pgdrain.db.connect``).

    With a secret, a failed login (SQLSTATE 28P01 or 28000) fetches the secret again and, if
    it changed (a rotated password), retries once. Bad settings raise ConfigError; any failure
    to connect raises DatabaseConnectError saying where, as whom and why, without the password
    or token and without chaining the original exception.
    """
    env = os.environ if env is None else env
    deadline = None if timeout is None else time.monotonic() + timeout
    mode = credential_mode(env)
    params = connect_params_from_env(env, timeout=_left(deadline))
    # An exception the caller is handling is no part of this failure's story.
    outer = sys.exc_info()[1]
    try:
        return connect(params, timeout=_left(deadline)), params
    except Exception as exc:
        failure: Exception = exc
    retried = False
    if mode == "secret" and _sqlstate(failure, outer) in AUTH_FAILURE_SQLSTATES:
        fresh = connect_params_from_env(env, refresh=True, timeout=_left(deadline))
        if fresh != params:
            log.warning("login as %s at %s failed (%s); the secret has changed since it was "
                        "cached, retrying with the new one",
                        params.user, params.where, _sqlstate(failure, outer))
            params, retried = fresh, True
            try:
                return connect(params, timeout=_left(deadline)), params
            except Exception as exc:
                failure = exc
    raise DatabaseConnectError(_connect_message(params, failure, mode, retried, outer)) \
        from None


def params_from_secret(secret: Any, env: Mapping[str, str] | None = None) -> ConnectParams:
    """ConnectParams from a secret in the RDS JSON format.

    ``DB_HOST``, ``DB_PORT`` and ``DB_NAME`` in ``env`` take precedence over the secret's
    ``host``, ``port`` and ``dbname``; ``dbname`` defaults to ``postgres``, ``port`` to 5432.
    A ``host`` starting with ``/`` is a Unix socket directory. Messages never show the secret.
    """
    env = os.environ if env is None else env
    where = "the secret in DB_SECRET_ARN"
    if not isinstance(secret, Mapping):
        raise ConfigError(f"{where} is not a JSON object in the RDS format "
                          '({"username", "password", "host", "port", "dbname", ...})')
    engine = secret.get("engine")
    if engine is not None and "postgres" not in str(engine).lower():
        raise ConfigError(f"{where} is for engine {engine!r}, not PostgreSQL")
    for key in ("username", "password"):
        if not isinstance(secret.get(key), str) or not secret[key]:
            raise ConfigError(f"{where} has no {key!r} (a non-empty string)")
    host = _get(env, "DB_HOST") or secret.get("host")
    if not isinstance(host, str) or not host.strip():
        raise ConfigError(f"{where} has no 'host'; set DB_HOST")
    if _get(env, "DB_PORT"):
        port = _port(_get(env, "DB_PORT"), "DB_PORT")
    elif secret.get("port") not in (None, ""):
        port = _port(secret["port"], f"{where}: 'port'")
    else:
        port = DEFAULT_DB_PORT
    database = _get(env, "DB_NAME") or secret.get("dbname") or DEFAULT_DB_NAME
    if not isinstance(database, str):
        raise ConfigError(f"{where} has a 'dbname' that is not a string")
    return _params(env, user=secret["username"], password=secret["password"],
                   host=host.strip(), port=port, database=database, iam=False)


def clear_cache() -> None:
    """Forget cached secrets and AWS clients (tests; the next call fetches again)."""
    _rds_clients.clear()
    _secrets.clear()
    _secrets_clients.clear()


def _left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (at least a few milliseconds: the step then fails fast)."""
    return None if deadline is None else max(deadline - time.monotonic(), 0.01)


# --- secret mode -------------------------------------------------------------------------------

# Secrets Manager answers in milliseconds: two short tries when there is time, one shorter try
# when there is not. The secret itself is cached here (value and when it was fetched).
SECRETS_CONNECT_TIMEOUT_SECONDS = 2.0
SECRETS_READ_TIMEOUT_SECONDS = 3.0
SECRETS_ATTEMPTS = 2
_secrets: dict[str, tuple[float, Any]] = {}
_secrets_clients: dict[tuple[float, float, int], Any] = {}


def _fetch_secret(env: Mapping[str, str], *, refresh: bool, timeout: float | None = None
                  ) -> Any:
    arn = _get(env, "DB_SECRET_ARN")
    max_age = _max_age(env)
    cached = _secrets.get(arn)
    if cached is not None and not refresh and time.monotonic() - cached[0] < max_age:
        return cached[1]
    # botocore logs whole response bodies at DEBUG, GetSecretValue's password included: keep
    # its loggers above DEBUG even when the function's log level (or the root's) is DEBUG.
    logging.getLogger("botocore").setLevel(max(logging.getLogger("botocore").level,
                                               logging.INFO))
    try:
        text = _get_secret_string(arn, env, timeout)
    except Exception as exc:  # AWS's error code and message, a timeout
        raise DatabaseConnectError(f"could not read the secret {arn}: "
                                   f"{type(exc).__name__}: {exc}") from None
    try:
        value = json.loads(text or "")
    except ValueError:
        raise ConfigError(f"the secret {arn} is not valid JSON; pgdrain expects the RDS format "
                          '{"username", "password", "host", "port", "dbname"}') from None
    _secrets[arn] = (time.monotonic(), value)
    return value


def _get_secret_string(arn: str, env: Mapping[str, str], timeout: float | None) -> Any:
    """The secret's SecretString: signed by pgdrain itself with the function's credentials
    from the environment (no boto3 at a cold start), else through boto3 (profiles, SSO,
    instance roles: a shell, not a function)."""
    keys = sigv4.Credentials.from_env(env)
    region = _secret_region(arn, env)
    if keys is None or region is None:
        return _secrets_client(timeout).get_secret_value(SecretId=arn).get("SecretString")
    connect, read = SECRETS_CONNECT_TIMEOUT_SECONDS, SECRETS_READ_TIMEOUT_SECONDS
    attempts, each = SECRETS_ATTEMPTS, connect + read
    if timeout is not None and timeout < attempts * each:
        attempts, each = 1, max(timeout, 0.1)
    answer = sigv4.call_json_api(service="secretsmanager",
                                 target="secretsmanager.GetSecretValue",
                                 payload={"SecretId": arn}, region=region, credentials=keys,
                                 timeout=each, attempts=attempts, env=env)
    return answer.get("SecretString")


def _secret_region(arn: str, env: Mapping[str, str]) -> str | None:
    """The region of a secret's ARN (arn:PARTITION:secretsmanager:REGION:...), or the
    function's for a secret named without one."""
    parts = arn.split(":")
    if len(parts) > 4 and parts[0] == "arn" and parts[3]:
        return parts[3]
    return _get(env, "AWS_REGION") or _get(env, "AWS_DEFAULT_REGION") or None


def _secrets_client(timeout: float | None) -> Any:
    """A Secrets Manager client whose connect, read and retries fit in ``timeout``."""
    connect, read = SECRETS_CONNECT_TIMEOUT_SECONDS, SECRETS_READ_TIMEOUT_SECONDS
    attempts = SECRETS_ATTEMPTS
    if timeout is not None and timeout < attempts * (connect + read):
        # In half-second steps, so that a few clients serve every invocation.
        budget = max(math.floor(timeout * 2) / 2, 0.5)
        attempts, connect, read = 1, min(connect, budget / 2), min(read, budget / 2)
    key = (connect, read, attempts)
    client = _secrets_clients.get(key)
    if client is None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise ConfigError("DB_SECRET_ARN needs boto3 (the Lambda runtime has it)") from None
        # A session of its own: the application's default session (and the credentials it
        # cached) stay as they were.
        client = _secrets_clients[key] = boto3.session.Session().client(
            "secretsmanager", config=Config(connect_timeout=connect, read_timeout=read,
                                            retries={"total_max_attempts": attempts}))
    return client


def _max_age(env: Mapping[str, str]) -> int:
    return int(setting("PGDRAIN_SECRET_MAX_AGE_SECONDS").read(env))


# --- IAM mode ----------------------------------------------------------------------------------


def _iam_params(env: Mapping[str, str]) -> ConnectParams:
    missing = [name for name in ("DB_HOST", "DB_USER", "DB_NAME") if not _get(env, name)]
    if missing:
        raise ConfigError(f"DB_IAM_AUTH needs {', '.join(missing)} to be set")
    host = _get(env, "DB_HOST")
    port = _port(_get(env, "DB_PORT"), "DB_PORT") if _get(env, "DB_PORT") else DEFAULT_DB_PORT
    user = _get(env, "DB_USER")
    # Validate the TLS settings before asking AWS for anything.
    _params(env, user=user, password=None, host=host, port=port,
            database=_get(env, "DB_NAME"), iam=True)
    # A Unix socket (local tests, a sidecar proxy) has no host name to sign the token for.
    token = _iam_token("localhost" if host.startswith("/") else host, port, user)
    return _params(env, user=user, password=token, host=host, port=port,
                   database=_get(env, "DB_NAME"), iam=True)


def _iam_token(host: str, port: int, user: str, env: Mapping[str, str] | None = None) -> str:
    """A fresh RDS IAM auth token (a presigned URL; local signing, no network call): signed
    by pgdrain itself with credentials from the environment, else by boto3."""
    env = os.environ if env is None else env
    keys = sigv4.Credentials.from_env(env)
    signing_region = (rds_region(host) or _get(env, "AWS_REGION")
                      or _get(env, "AWS_DEFAULT_REGION"))
    if keys is not None and signing_region:
        return sigv4.rds_iam_token(host=host, port=port, user=user, region=signing_region,
                                   credentials=keys)
    try:
        import boto3
        from botocore.exceptions import NoRegionError
    except ImportError:
        raise ConfigError("DB_IAM_AUTH needs boto3 (the Lambda runtime and the pgdrain layer "
                          "have it)") from None
    region = rds_region(host)  # else boto3's: AWS_DEFAULT_REGION (Lambda)
    try:
        client = _rds_clients.get(region)
        if client is None:
            client = _rds_clients[region] = boto3.client("rds", region_name=region)
        return str(client.generate_db_auth_token(DBHostname=host, Port=port, DBUsername=user))
    except NoRegionError:
        raise ConfigError("DB_IAM_AUTH: no AWS region; set AWS_DEFAULT_REGION (Lambda sets it) "
                          "or use the RDS endpoint name as DB_HOST") from None
    except Exception as exc:  # BotoCoreError, ClientError, or a host botocore cannot parse
        raise DatabaseConnectError(
            f"could not make an RDS IAM token for {user} at {host}:{port}: "
            f"{type(exc).__name__}: {exc}") from None


# --- shared ------------------------------------------------------------------------------------


def _params(env: Mapping[str, str], *, user: str, password: str | None, host: str, port: int,
            database: str, iam: bool) -> ConnectParams:
    """ConnectParams for the secret and IAM modes, with TLS from DB_SSLMODE/DB_SSL_ROOT_CERT."""
    unix_sock = None
    if host.startswith("/"):  # a socket directory, as in libpq
        unix_sock = f"{host.rstrip('/')}/.s.PGSQL.{port}"
    sslmode = _get(env, "DB_SSLMODE") or ("disable" if unix_sock else DEFAULT_DB_SSLMODE)
    if sslmode not in _SSLMODES:
        raise ConfigError(f"DB_SSLMODE must be one of {', '.join(_SSLMODES)}, got {sslmode!r}")
    if iam and sslmode == "disable" and unix_sock is None:
        raise ConfigError("DB_SSLMODE=disable cannot be used with DB_IAM_AUTH: RDS accepts IAM "
                          "tokens only over TLS (use verify-full with DB_SSL_ROOT_CERT)")
    rootcert = _get(env, "DB_SSL_ROOT_CERT") or None
    if rootcert is not None and not os.path.isfile(rootcert):
        raise ConfigError(f"DB_SSL_ROOT_CERT: no such file: {rootcert}")
    return ConnectParams(
        user=user, database=database, host=None if unix_sock else host, port=port,
        unix_sock=unix_sock, password=password, sslmode=sslmode, sslrootcert=rootcert,
    )


def _connect_message(params: ConnectParams, exc: Exception, mode: Mode, retried: bool,
                     outer: BaseException | None) -> str:
    via = {"url": "", "secret": " (password from DB_SECRET_ARN)", "iam": " (RDS IAM token)"}
    message = (f"could not connect to {params.where} as {params.user}{via[mode]}: "
               f"{_reason(exc, outer)}")
    if retried:
        message += "; it failed again with the secret fetched anew"
    hint = _hint(exc, mode, outer)
    if hint:
        message += f". {hint}"
    if params.password:  # defence in depth: no message may carry the password or token
        message = message.replace(params.password, "***")
    return message


def _reason(exc: Exception, outer: BaseException | None) -> str:
    server = _server_error(exc, outer)
    if server is not None:
        fields = server.args[0]
        text = " ".join(str(fields[k]) for k in ("C", "M") if fields.get(k))
        return f"{type(server).__name__}: {text}"
    text = str(exc)
    cause = exc.__cause__ or exc.__context__
    if cause is not None and cause is not outer and str(cause) not in text:
        text = f"{text} ({type(cause).__name__}: {cause})"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _hint(exc: Exception, mode: Mode, outer: BaseException | None) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError) or (
            isinstance(exc, ssl.SSLError) and "CERTIFICATE_VERIFY_FAILED" in str(exc)):
        where = ("add sslrootcert=/path/to/ca.pem to DATABASE_URL" if mode == "url" else
                 "set DB_SSL_ROOT_CERT to the CA bundle file that signed the server's certificate")
        return (f"The server's certificate could not be verified: {where} (RDS and Aurora "
                f"hosts are verified against the RDS CA bundle pgdrain ships; {RDS_CA_BUNDLE_URL} "
                "is AWS's own copy)")
    if isinstance(exc, pg8000.exceptions.InterfaceError) and "refuses SSL" in str(exc):
        setting = "sslmode in DATABASE_URL" if mode == "url" else "DB_SSLMODE"
        return f"The server does not offer TLS; set {setting} to prefer or disable"
    if isinstance(exc, pg8000.exceptions.InterfaceError) and "no password was provided" in str(
            exc):
        return ("Give it one: in DATABASE_URL (postgresql://user:password@host/db), or in "
                "PGPASSWORD, or in a password file (~/.pgpass, or PGPASSFILE), as psql reads "
                "them" if mode == "url" else "")
    state = _sqlstate(exc, outer)
    if mode == "iam" and state in AUTH_FAILURE_SQLSTATES:
        return ("For IAM auth the user needs GRANT rds_iam, and the function's role needs "
                "rds-db:connect on it")
    return ""


def _sqlstate(exc: BaseException, outer: BaseException | None = None) -> str | None:
    server = _server_error(exc, outer)
    return None if server is None else sqlstate(server)


def _server_error(exc: BaseException, outer: BaseException | None = None
                  ) -> pg8000.exceptions.DatabaseError | None:
    """The server's error behind ``exc``, if any.

    When the server refuses a login it sends the error and hangs up; pg8000 then writes a
    Terminate message to the closed socket and may raise ``InterfaceError("network error")``
    (a broken pipe) instead, with the server's error as its context. Look through the chain,
    up to ``outer``, the exception the caller was handling when it called us.
    """
    seen: set[int] = {id(outer)} if outer is not None else set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, pg8000.exceptions.DatabaseError) and current.args and \
                isinstance(current.args[0], dict):
            return current
        current = current.__cause__ or current.__context__
    return None


def _port(raw: Any, name: str) -> int:
    try:
        port = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{name} must be a port number, got {raw!r}") from None
    if not 0 < port < 65536:
        raise ConfigError(f"{name} must be a port number, got {port}")
    return port


def _get(env: Mapping[str, str], name: str) -> str:
    # Through the settings table: every variable read here is documented there.
    return str(read(name, env) or "")

