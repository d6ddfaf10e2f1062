"""Database credentials in AWS: mode selection, the RDS secret format, IAM tokens, TLS settings
and messages that never carry a password. AWS is moto; no database is needed here (the real
logins are in tests/integration/test_credentials_db.py).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import traceback
from pathlib import Path

import pytest

from pgdrain.aws import credentials
from pgdrain.aws.credentials import (
    connect_from_env,
    connect_params_from_env,
    credential_mode,
    params_from_secret,
)
from pgdrain.db import ssl_context_for
from pgdrain.errors import ConfigError, DatabaseConnectError
from pgdrain.settings import CREDENTIAL_SETTINGS, SETTINGS

LIBRARY = Path(__file__).resolve().parents[2] / "layers" / "pgdrain"
PASSWORD = "pw-Zq8!rotating"
RDS_HOST = "app.cluster-abc123.eu-central-1.rds.amazonaws.com"
RDS_SECRET = {
    "engine": "postgres", "username": "app", "password": PASSWORD, "host": RDS_HOST,
    "port": 5432, "dbname": "appdb", "dbInstanceIdentifier": "app",
}
IAM_ENV = {"DB_IAM_AUTH": "true", "DB_HOST": RDS_HOST, "DB_USER": "app", "DB_NAME": "appdb"}


def _secret(sm, value, name="pgdrain/db") -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return sm.create_secret(Name=name, SecretString=text)["ARN"]


# --- mode -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "mode"),
    [
        ({"DATABASE_URL": "postgresql://u@h/db"}, "url"),
        ({"DATABASE_URL": "postgresql://u@h/db", "DB_SECRET_ARN": "arn", "DB_IAM_AUTH": "1"},
         "url"),
        ({"DB_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:1:secret:db", "DB_IAM_AUTH": "1"},
         "secret"),
        ({"DB_IAM_AUTH": "1"}, "iam"),
        ({"DB_IAM_AUTH": "True"}, "iam"),
        ({"DB_IAM_AUTH": " yes "}, "iam"),
        ({"DATABASE_URL": "  ", "DB_SECRET_ARN": "", "DB_IAM_AUTH": "yes"}, "iam"),
    ],
)
def test_mode_follows_precedence(env, mode):
    assert credential_mode(env) == mode


@pytest.mark.parametrize("env", [{}, {"DB_IAM_AUTH": "0"}, {"DB_IAM_AUTH": "false"},
                                 {"DB_HOST": "db", "DB_USER": "app", "DB_NAME": "x"}])
def test_nothing_configured_says_what_to_set(env):
    with pytest.raises(ConfigError, match=r"DATABASE_URL.*DB_SECRET_ARN.*DB_IAM_AUTH=true"):
        connect_params_from_env(env)


def test_iam_flag_must_be_a_boolean():
    with pytest.raises(ConfigError, match=r"DB_IAM_AUTH must be true or false.*'maybe'"):
        credential_mode({"DB_IAM_AUTH": "maybe"})


def test_database_url_mode_is_the_url():
    params = connect_params_from_env({"DATABASE_URL": "postgresql://app:pw@db.internal:6543/jobs",
                                      "DB_SSLMODE": "disable", "DB_HOST": "elsewhere"})
    assert (params.user, params.password, params.host, params.port, params.database,
            params.sslmode) == ("app", "pw", "db.internal", 6543, "jobs", "verify-full")


def test_reads_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgresql://app@db.internal/jobs")
    assert connect_params_from_env().database == "jobs"


def test_every_credential_variable_is_documented():
    documented = {s.name for s in SETTINGS}
    assert set(CREDENTIAL_SETTINGS) <= documented
    source = (LIBRARY / "pgdrain" / "aws" / "credentials.py").read_text()
    for name in CREDENTIAL_SETTINGS:
        assert f'"{name}"' in source, name


def test_importing_reads_no_aws_sdk():
    """Cold start: boto3 and Powertools Parameters load only in the modes that need them."""
    code = ("import pgdrain.aws.credentials as c; "
            "c.connect_params_from_env({'DATABASE_URL': 'postgresql://u@h/db'})")
    env = {**os.environ, "PYTHONPATH": str(LIBRARY)}
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env,
                            capture_output=True, text=True, timeout=60, check=True)
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()]
    assert "pgdrain.aws.credentials" in imported
    heavy = [m for m in imported if m.split(".")[0] in ("boto3", "botocore", "s3transfer")
             or m.startswith("aws_lambda_powertools.utilities.parameters")]
    assert heavy == []


# --- the RDS secret format --------------------------------------------------------------------


def test_rds_secret():
    params = params_from_secret(RDS_SECRET, {})
    assert (params.user, params.password, params.host, params.port, params.database) == (
        "app", PASSWORD, RDS_HOST, 5432, "appdb")
    assert params.unix_sock is None
    assert params.sslmode == "verify-full"
    assert params.sslrootcert is None
    assert PASSWORD not in repr(params)


def test_port_may_be_a_string_and_dbname_missing():
    secret = {k: v for k, v in RDS_SECRET.items() if k != "dbname"} | {"port": " 6543"}
    params = params_from_secret(secret, {})
    assert (params.port, params.database) == (6543, "postgres")


def test_rds_managed_secret_has_only_username_and_password():
    secret = {"username": "app", "password": PASSWORD}
    with pytest.raises(ConfigError, match="has no 'host'; set DB_HOST"):
        params_from_secret(secret, {})
    params = params_from_secret(secret, {"DB_HOST": RDS_HOST})
    assert (params.host, params.port, params.database) == (RDS_HOST, 5432, "postgres")


def test_env_overrides_where_but_not_who():
    env = {"DB_HOST": "proxy.proxy-abc.eu-central-1.rds.amazonaws.com", "DB_PORT": "5433",
           "DB_NAME": "jobs", "DB_USER": "ignored"}
    params = params_from_secret(RDS_SECRET, env)
    assert (params.host, params.port, params.database, params.user, params.password) == (
        env["DB_HOST"], 5433, "jobs", "app", PASSWORD)


def test_socket_directory_host():
    params = params_from_secret(RDS_SECRET | {"host": "/tmp/pg/", "port": "5433"}, {})
    assert params.unix_sock == "/tmp/pg/.s.PGSQL.5433"
    assert params.host is None
    assert params.sslmode == "disable"  # TLS does not apply to a Unix socket
    assert params.where == "/tmp/pg/.s.PGSQL.5433/appdb"


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        ("not an object", "is not a JSON object in the RDS format"),
        ([1, 2], "is not a JSON object"),
        (RDS_SECRET | {"engine": "mysql"}, "engine 'mysql', not PostgreSQL"),
        ({k: v for k, v in RDS_SECRET.items() if k != "username"}, "has no 'username'"),
        ({k: v for k, v in RDS_SECRET.items() if k != "password"}, "has no 'password'"),
        (RDS_SECRET | {"password": ""}, "has no 'password'"),
        (RDS_SECRET | {"port": "fivefour"}, "'port' must be a port number, got 'fivefour'"),
        (RDS_SECRET | {"port": 70000}, "must be a port number, got 70000"),
        (RDS_SECRET | {"dbname": 5}, "'dbname' that is not a string"),
    ],
)
def test_invalid_secret_says_what_is_wrong_without_the_password(secret, message):
    with pytest.raises(ConfigError, match=message) as caught:
        params_from_secret(secret, {})
    assert PASSWORD not in str(caught.value)


def test_aurora_engine_is_postgres():
    assert params_from_secret(RDS_SECRET | {"engine": "aurora-postgresql"}, {}).user == "app"


# --- TLS settings -----------------------------------------------------------------------------


def test_sslmode_and_root_cert(tmp_path):
    bundle = tmp_path / "global-bundle.pem"
    bundle.write_text("")
    params = params_from_secret(RDS_SECRET, {"DB_SSLMODE": "verify-ca",
                                             "DB_SSL_ROOT_CERT": str(bundle)})
    assert (params.sslmode, params.sslrootcert) == ("verify-ca", str(bundle))
    assert params_from_secret(RDS_SECRET, {"DB_SSLMODE": "require"}).sslmode == "require"


def test_root_cert_must_exist(tmp_path):
    with pytest.raises(ConfigError, match="DB_SSL_ROOT_CERT: no such file"):
        params_from_secret(RDS_SECRET, {"DB_SSL_ROOT_CERT": str(tmp_path / "missing.pem")})


def test_unknown_sslmode():
    with pytest.raises(ConfigError, match=r"DB_SSLMODE must be one of .*got 'verify'"):
        params_from_secret(RDS_SECRET, {"DB_SSLMODE": "verify"})


# --- secret mode through Secrets Manager (moto) -----------------------------------------------


def test_secret_is_fetched_and_cached(aws):
    arn = _secret(aws, RDS_SECRET)
    env = {"DB_SECRET_ARN": arn}
    assert connect_params_from_env(env).password == PASSWORD
    aws.put_secret_value(SecretId=arn, SecretString=json.dumps(RDS_SECRET | {"password": "new"}))
    assert connect_params_from_env(env).password == PASSWORD  # cached
    assert connect_params_from_env(env, refresh=True).password == "new"
    assert connect_params_from_env(env).password == "new"  # the refetch refreshed the cache


def test_secret_cache_can_be_turned_off(aws):
    arn = _secret(aws, RDS_SECRET)
    env = {"DB_SECRET_ARN": arn, "PGDRAIN_SECRET_MAX_AGE_SECONDS": "0"}
    assert connect_params_from_env(env).password == PASSWORD
    aws.put_secret_value(SecretId=arn, SecretString=json.dumps(RDS_SECRET | {"password": "new"}))
    assert connect_params_from_env(env).password == "new"


@pytest.mark.parametrize(("raw", "message"), [("soon", "must be an integer, got 'soon'"),
                                              ("-1", "must be at least 0, got -1")])
def test_invalid_max_age(raw, message):
    env = {"DB_SECRET_ARN": "arn", "PGDRAIN_SECRET_MAX_AGE_SECONDS": raw}
    with pytest.raises(ConfigError, match=f"PGDRAIN_SECRET_MAX_AGE_SECONDS {message}"):
        connect_params_from_env(env)


def test_secret_by_name(aws):
    _secret(aws, RDS_SECRET, name="prod/pgdrain")
    assert connect_params_from_env({"DB_SECRET_ARN": "prod/pgdrain"}).user == "app"


def test_missing_secret_is_a_connect_error(aws):
    arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:nope-AbCdEf"
    with pytest.raises(DatabaseConnectError, match="could not read the secret") as caught:
        connect_params_from_env({"DB_SECRET_ARN": arn})
    assert arn in str(caught.value)
    assert "ResourceNotFoundException" in str(caught.value)


def test_secret_that_is_not_json(aws):
    arn = _secret(aws, f"username=app password={PASSWORD}")
    with pytest.raises(ConfigError, match="is not valid JSON") as caught:
        connect_params_from_env({"DB_SECRET_ARN": arn})
    assert PASSWORD not in "".join(traceback.format_exception(caught.value))


def test_secret_from_another_engine(aws):
    arn = _secret(aws, RDS_SECRET | {"engine": "mysql"})
    with pytest.raises(ConfigError, match="not PostgreSQL"):
        connect_params_from_env({"DB_SECRET_ARN": arn})


# --- IAM mode ---------------------------------------------------------------------------------


def test_iam_password_is_a_fresh_token(aws):
    params = connect_params_from_env(IAM_ENV)
    assert (params.user, params.host, params.port, params.database, params.sslmode) == (
        "app", RDS_HOST, 5432, "appdb", "verify-full")
    token = params.password
    assert token.startswith(f"{RDS_HOST}:5432/?Action=connect&DBUser=app&")
    assert "X-Amz-Signature=" in token
    # The region comes from the endpoint name, not from AWS_DEFAULT_REGION (eu-west-1).
    assert "%2Feu-central-1%2Frds-db%2Faws4_request" in token
    assert token not in repr(params)


def test_iam_token_matches_boto3(aws, monkeypatch):
    """The token is exactly what boto3's generate_db_auth_token gives for those arguments."""
    import boto3
    import botocore.auth

    from pgdrain.aws import sigv4

    frozen = datetime.datetime(2026, 1, 2, 3, 4, 5)  # the signing time, so both tokens agree
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: frozen)
    monkeypatch.setattr(sigv4, "utc_now", lambda: frozen.replace(tzinfo=datetime.UTC))
    env = IAM_ENV | {"DB_HOST": "db.internal", "DB_PORT": "6543"}
    expected = boto3.client("rds").generate_db_auth_token(
        DBHostname="db.internal", Port=6543, DBUsername="app")
    assert "X-Amz-Date=20260102T030405Z" in expected
    assert "%2Feu-west-1%2Frds-db" in expected  # not an RDS name: the SDK's region
    assert connect_params_from_env(env).password == expected


def test_iam_needs_host_user_and_database():
    with pytest.raises(ConfigError, match="DB_IAM_AUTH needs DB_HOST, DB_USER, DB_NAME"):
        connect_params_from_env({"DB_IAM_AUTH": "1"})
    with pytest.raises(ConfigError, match="needs DB_NAME to be set"):
        connect_params_from_env({k: v for k, v in IAM_ENV.items() if k != "DB_NAME"})


def test_iam_needs_tls():
    with pytest.raises(ConfigError, match="DB_SSLMODE=disable cannot be used with DB_IAM_AUTH"):
        connect_params_from_env(IAM_ENV | {"DB_SSLMODE": "disable"})


def test_iam_port(aws):
    params = connect_params_from_env(IAM_ENV | {"DB_PORT": "6543"})
    assert params.port == 6543
    assert params.password.startswith(f"{RDS_HOST}:6543/?Action=connect")
    with pytest.raises(ConfigError, match="DB_PORT must be a port number, got 'x'"):
        connect_params_from_env(IAM_ENV | {"DB_PORT": "x"})


def test_iam_without_a_region(aws, monkeypatch):
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(ConfigError, match="no AWS region"):
        connect_params_from_env(IAM_ENV | {"DB_HOST": "db.internal"})


def test_iam_without_aws_credentials(monkeypatch):
    """Outside moto (which supplies credentials of its own) and with none anywhere."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN",
                 "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_ROLE_ARN",
                 "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # boto3's default session keeps the credentials it found for an earlier test's client.
    import boto3

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    credentials.clear_cache()
    try:
        with pytest.raises(DatabaseConnectError, match="could not make an RDS IAM token for app "
                                                       f"at {RDS_HOST}:5432: NoCredentialsError"):
            connect_params_from_env(IAM_ENV)
    finally:
        credentials.clear_cache()


# --- connection failures: where, as whom, why; never the password ----------------------------


def _assert_clean(exc: BaseException, *secrets: str) -> None:
    assert exc.__cause__ is None
    assert exc.__context__ is None or exc.__suppress_context__
    text = "".join(traceback.format_exception(exc))
    for secret in secrets:
        assert secret not in str(exc)
        assert secret not in text


def test_unreachable_socket(tmp_path):
    url = f"postgresql://app:{PASSWORD}@/jobs?host={tmp_path}"
    with pytest.raises(DatabaseConnectError) as caught:
        connect_from_env({"DATABASE_URL": url})
    message = str(caught.value)
    assert message.startswith(f"could not connect to {tmp_path}/.s.PGSQL.5432/jobs as app: "
                              "InterfaceError: communication error (FileNotFoundError")
    _assert_clean(caught.value, PASSWORD)


def test_refused_tcp_port_in_secret_mode(aws):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    arn = _secret(aws, RDS_SECRET | {"host": "127.0.0.1", "port": port})
    with pytest.raises(DatabaseConnectError) as caught:
        connect_from_env({"DB_SECRET_ARN": arn, "DB_SSLMODE": "prefer"})
    message = str(caught.value)
    assert f"could not connect to 127.0.0.1:{port}/appdb as app (password from DB_SECRET_ARN)" \
        in message
    assert "InterfaceError: Can't create a connection" in message
    _assert_clean(caught.value, PASSWORD)


def test_a_password_in_the_reason_is_masked(monkeypatch):
    """Defence in depth: even an exception that quoted the password would be masked."""

    def leaky_connect(params, timeout=None):
        raise OSError(f"bad password {params.password!r}")

    monkeypatch.setattr(credentials, "connect", leaky_connect)
    with pytest.raises(DatabaseConnectError, match=r"OSError: bad password '\*\*\*'") as caught:
        connect_from_env({"DATABASE_URL": f"postgresql://app:{PASSWORD}@db.internal/jobs"})
    _assert_clean(caught.value, PASSWORD)


class _FakeServer:
    """A TCP endpoint that answers PostgreSQL's SSLRequest: 'N', or 'S' and a TLS handshake
    with a self-signed certificate for 127.0.0.1. Enough to test the client's TLS checks."""

    def __init__(self, tmp_path: Path, *, tls: bool):
        self.cert = tmp_path / "server.pem"
        self.tls = tls
        if tls:
            self._make_certificate(tmp_path)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _make_certificate(self, tmp_path: Path) -> None:
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pgdrain test CA")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        self.key = tmp_path / "server.key"
        self.key.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        self.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
            with conn:
                conn.recv(8)  # SSLRequest
                if not self.tls:
                    conn.sendall(b"N")
                    conn.recv(1024)  # the startup message, then hang up
                    return
                conn.sendall(b"S")
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.load_cert_chain(self.cert, self.key)
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1024)  # the startup message, then hang up
        except (OSError, ssl.SSLError):
            pass  # the client gave up, as the tests intend

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


@pytest.fixture
def tls_server(tmp_path):
    server = _FakeServer(tmp_path, tls=True)
    yield server
    server.close()


@pytest.mark.parametrize("mode", ["url", "secret"])
def test_unverified_certificate_says_to_set_the_root_cert(tls_server, mode, request):
    if mode == "url":
        env = {"DATABASE_URL": f"postgresql://app:{PASSWORD}@127.0.0.1:{tls_server.port}/appdb"
                               "?sslmode=verify-full"}
        setting = "add sslrootcert=/path/to/ca.pem to DATABASE_URL"
    else:
        sm = request.getfixturevalue("aws")
        arn = _secret(sm, RDS_SECRET | {"host": "127.0.0.1", "port": tls_server.port})
        env = {"DB_SECRET_ARN": arn}  # DB_SSLMODE defaults to verify-full
        setting = "set DB_SSL_ROOT_CERT to the CA bundle file"
    with pytest.raises(DatabaseConnectError) as caught:
        connect_from_env(env)
    message = str(caught.value)
    assert "SSLCertVerificationError" in message
    assert f"The server's certificate could not be verified: {setting}" in message
    assert credentials.RDS_CA_BUNDLE_URL in message
    _assert_clean(caught.value, PASSWORD)


def test_root_cert_is_used_for_verification(tls_server, aws):
    arn = _secret(aws, RDS_SECRET | {"host": "127.0.0.1", "port": tls_server.port})
    env = {"DB_SECRET_ARN": arn, "DB_SSL_ROOT_CERT": str(tls_server.cert)}
    params = connect_params_from_env(env)
    assert isinstance(ssl_context_for(params), ssl.SSLContext)
    with pytest.raises(DatabaseConnectError) as caught:
        connect_from_env(env)  # verified; then the fake server hangs up
    assert "certificate" not in str(caught.value)
    _assert_clean(caught.value, PASSWORD)


def test_server_without_tls(tmp_path, aws):
    server = _FakeServer(tmp_path, tls=False)
    try:
        arn = _secret(aws, RDS_SECRET | {"host": "127.0.0.1", "port": server.port})
        with pytest.raises(DatabaseConnectError,
                           match=r"Server refuses SSL\. The server does not offer TLS; set "
                                 r"DB_SSLMODE to prefer or disable"):
            connect_from_env({"DB_SECRET_ARN": arn})
    finally:
        server.close()


def test_iam_over_a_unix_socket(aws):
    """No RDS is on a socket, but a local test or sidecar proxy may be: TLS does not apply and
    the token is signed for localhost."""
    params = connect_params_from_env(IAM_ENV | {"DB_HOST": "/run/pg"})
    assert (params.unix_sock, params.host, params.sslmode) == (
        "/run/pg/.s.PGSQL.5432", None, "disable")
    assert params.password.startswith("localhost:5432/?Action=connect&DBUser=app&")


def _refused_login() -> Exception:
    """What pg8000 may raise when the server refuses a login and hangs up at once: its
    Terminate message hits the closed socket, and the server's error is only the context."""
    import pg8000.exceptions

    try:
        try:
            raise pg8000.exceptions.DatabaseError(
                {"S": "FATAL", "C": "28P01", "M": 'password authentication failed for user "app"'})
        except pg8000.exceptions.DatabaseError:
            try:
                raise BrokenPipeError(32, "Broken pipe")
            except BrokenPipeError as pipe:
                raise pg8000.exceptions.InterfaceError("network error") from pipe
    except pg8000.exceptions.InterfaceError as exc:
        return exc


def test_refused_login_behind_a_broken_pipe_is_still_an_auth_failure(aws, monkeypatch):
    arn = _secret(aws, RDS_SECRET)
    tried = []

    def refusing_connect(params, timeout=None):
        tried.append(params.password)
        if params.password == PASSWORD:
            raise _refused_login()
        return "connection"

    monkeypatch.setattr(credentials, "connect", refusing_connect)
    env = {"DB_SECRET_ARN": arn}
    with pytest.raises(DatabaseConnectError) as caught:
        connect_from_env(env)
    assert "(password from DB_SECRET_ARN): DatabaseError: 28P01 password authentication failed" \
        in str(caught.value)
    assert tried == [PASSWORD]  # the refetched secret was the same: no second attempt
    aws.put_secret_value(SecretId=arn, SecretString=json.dumps(RDS_SECRET | {"password": "new"}))
    tried.clear()
    assert connect_from_env(env) == "connection"
    assert tried == [PASSWORD, "new"]


def test_an_error_the_caller_is_handling_is_not_the_reason(aws, tmp_path, monkeypatch):
    """Reconnecting inside ``except DatabaseError`` must not mistake that error for ours."""
    import pg8000.exceptions

    arn = _secret(aws, RDS_SECRET | {"host": str(tmp_path)})
    fetched = []
    monkeypatch.setattr(credentials, "_fetch_secret",
                        lambda env, refresh, timeout=None: fetched.append(refresh) or RDS_SECRET
                        | {"host": str(tmp_path)})
    try:
        raise pg8000.exceptions.DatabaseError({"C": "28P01", "M": "an earlier failure"})
    except pg8000.exceptions.DatabaseError:
        with pytest.raises(DatabaseConnectError) as caught:
            connect_from_env({"DB_SECRET_ARN": arn})
    message = str(caught.value)
    assert "InterfaceError: communication error (FileNotFoundError" in message
    assert "28P01" not in message
    assert fetched == [False]  # not taken for an authentication failure: no refetch
    _assert_clean(caught.value, PASSWORD)
