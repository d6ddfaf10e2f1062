"""Credentials from AWS against the real database: a Secrets Manager secret (moto) in the RDS
format, a password rotated under a cached secret, and an RDS IAM token sent as the password.

The rotation and IAM-rejection tests need password authentication, which the embedded server
(trust auth) gets from a line prepended to its pg_hba.conf for one test role; they are skipped
when DATABASE_URL names a server whose configuration is not ours to change.
"""

from __future__ import annotations

import json
import os
import time
import traceback
import uuid
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass

import pg8000.exceptions
import pytest

from pgdrain.aws import credentials
from pgdrain.aws.credentials import connect_from_env, connect_params_from_env
from pgdrain.db import ConnectParams, connect, parse_database_url
from pgdrain.errors import DatabaseConnectError


@pytest.fixture
def attempts(monkeypatch) -> list[ConnectParams]:
    """Every ConnectParams that connect_from_env tries, in order (the real connect runs)."""
    seen: list[ConnectParams] = []

    def recording_connect(params, timeout=None):
        seen.append(params)
        return connect(params, timeout=timeout)

    monkeypatch.setattr(credentials, "connect", recording_connect)
    return seen


@dataclass
class Coordinates:
    """The test database as the RDS secret and DB_* variables describe it."""

    host: str  # a socket directory for the embedded server
    port: int
    user: str
    password: str | None
    dbname: str
    sslmode: str

    def secret(self, **changes) -> str:
        return json.dumps({
            "engine": "postgres", "host": self.host, "port": str(self.port),
            "username": self.user, "password": self.password or "unused-with-trust-auth",
            "dbname": self.dbname, "dbInstanceIdentifier": "pgdrain-test",
        } | changes)

    def env(self, **extra: str) -> dict[str, str]:
        """TLS as the test server offers it: none on a socket, optional on 127.0.0.1."""
        return {"DB_SSLMODE": self.sslmode} | extra


def _coordinates(url: str) -> Coordinates:
    params = parse_database_url(url)
    host = params.unix_sock.rsplit("/", 1)[0] if params.unix_sock else params.host
    sslmode = "disable" if params.unix_sock else "prefer"
    return Coordinates(host, params.port, params.user, params.password, params.database, sslmode)


@pytest.fixture
def db(database_url: str) -> Coordinates:
    return _coordinates(database_url)


def _assert_clean(exc: BaseException, *secrets: str) -> None:
    """Neither the message nor a logged traceback carries a secret."""
    assert exc.__cause__ is None
    assert exc.__context__ is None or exc.__suppress_context__
    text = "".join(traceback.format_exception(exc))
    for secret in secrets:
        assert secret not in str(exc)
        assert secret not in text


# --- secret mode ------------------------------------------------------------------------------


def test_connect_with_a_secret(aws, db, sql):
    arn = aws.create_secret(Name="pgdrain/db", SecretString=db.secret())["ARN"]
    conn = connect_from_env(db.env(DB_SECRET_ARN=arn))
    try:
        assert conn.run("SELECT current_database(), current_user") == [[db.dbname, db.user]]
        assert conn.run("SELECT count(*) FROM jobs") == [[0]]  # the test's migrated database
    finally:
        conn.close()


def test_secret_with_overrides_from_env(aws, db):
    """An RDS-managed secret holds only username and password; DB_* says where."""
    secret = json.dumps({"username": db.user, "password": db.password or "unused"})
    arn = aws.create_secret(Name="pgdrain/managed", SecretString=secret)["ARN"]
    env = db.env(DB_SECRET_ARN=arn, DB_HOST=db.host, DB_PORT=str(db.port), DB_NAME=db.dbname)
    conn = connect_from_env(env)
    try:
        assert conn.run("SELECT current_database()") == [[db.dbname]]
    finally:
        conn.close()


def test_wrong_host_in_the_secret_says_where(aws, db, attempts):
    arn = aws.create_secret(
        Name="pgdrain/db", SecretString=db.secret(host="/nonexistent/socket/dir"))["ARN"]
    with pytest.raises(DatabaseConnectError) as caught:
        connect_from_env(db.env(DB_SECRET_ARN=arn, DB_SSLMODE="disable"))
    assert str(caught.value).startswith(
        f"could not connect to /nonexistent/socket/dir/.s.PGSQL.{db.port}/{db.dbname} "
        f"as {db.user} (password from DB_SECRET_ARN): InterfaceError: communication error")
    assert len(attempts) == 1  # not an authentication failure: no refetch, no retry


# --- password authentication on the embedded server -------------------------------------------


@dataclass
class PasswordRole:
    """A login role that must give its password (scram-sha-256) on the embedded server."""

    name: str
    admin: pg8000.native.Connection

    def set_password(self, password: str) -> None:
        self.admin.run(f"ALTER ROLE {self.name} PASSWORD '{password}'")


def _wait_for_password_auth(coordinates: Coordinates, role: str) -> None:
    """pg_reload_conf() only signals the postmaster: wait until the role's login needs a
    password (a wrong one is refused)."""
    url = (f"postgresql://{role}:not-the-password@/{coordinates.dbname}"
           f"?host={coordinates.host}&port={coordinates.port}")
    deadline = time.monotonic() + 10
    while True:
        try:
            connect_from_env({"DATABASE_URL": url}).close()
        except DatabaseConnectError as exc:
            if "28P01" in str(exc):
                return
            raise
        if time.monotonic() > deadline:
            raise AssertionError("pg_hba.conf change did not take effect")
        time.sleep(0.05)


@pytest.fixture
def password_role(server_url: str, db: Coordinates) -> Iterator[PasswordRole]:
    if os.environ.get("DATABASE_URL"):
        pytest.skip("changes pg_hba.conf: only on the embedded server")
    admin = connect(server_url)
    hba_file = admin.run("SHOW hba_file")[0][0]
    if not os.access(hba_file, os.W_OK):
        admin.close()
        pytest.skip(f"{hba_file} is not writable")
    name = f"pgdrain_pw_{uuid.uuid4().hex[:8]}"
    admin.run(f"CREATE ROLE {name} LOGIN PASSWORD 'initial-{uuid.uuid4().hex}'")
    with open(hba_file) as f:
        original = f.read()
    try:
        with open(hba_file, "w") as f:
            f.write(f"local all {name} scram-sha-256\n{original}")
        admin.run("SELECT pg_reload_conf()")
        _wait_for_password_auth(db, name)
        yield PasswordRole(name, admin)
    finally:
        with open(hba_file, "w") as f:
            f.write(original)
        admin.run("SELECT pg_reload_conf()")
        with suppress(Exception):
            admin.run(f"DROP ROLE IF EXISTS {name}")
        admin.close()


def test_rotated_password_is_refetched(aws, db, password_role, attempts):
    old, new = f"old-{uuid.uuid4().hex}", f"new-{uuid.uuid4().hex}"
    password_role.set_password(old)
    arn = aws.create_secret(
        Name="pgdrain/rotating", SecretString=db.secret(username=password_role.name,
                                                        password=old))["ARN"]
    env = db.env(DB_SECRET_ARN=arn)
    conn = connect_from_env(env)  # fetches and caches the secret
    assert conn.run("SELECT current_user") == [[password_role.name]]
    conn.close()

    # Rotation: the database and the secret change; the Lambda still caches the old password.
    password_role.set_password(new)
    aws.put_secret_value(SecretId=arn, SecretString=db.secret(username=password_role.name,
                                                              password=new))
    assert connect_params_from_env(env).password == old
    attempts.clear()
    conn = connect_from_env(env)
    try:
        assert conn.run("SELECT current_user") == [[password_role.name]]
    finally:
        conn.close()
    assert [p.password for p in attempts] == [old, new]  # refused, refetched, retried once
    assert connect_params_from_env(env).password == new  # and the cache holds the new one


def test_wrong_password_everywhere_is_a_clean_error(aws, db, password_role, attempts):
    password_role.set_password(f"actual-{uuid.uuid4().hex}")
    wrong = f"wrong-{uuid.uuid4().hex}"
    arn = aws.create_secret(
        Name="pgdrain/wrong", SecretString=db.secret(username=password_role.name,
                                                     password=wrong))["ARN"]
    with pytest.raises(DatabaseConnectError) as caught:
        connect_from_env(db.env(DB_SECRET_ARN=arn))
    message = str(caught.value)
    assert message.startswith(
        f"could not connect to {db.host}/.s.PGSQL.{db.port}/{db.dbname} as {password_role.name} "
        "(password from DB_SECRET_ARN): DatabaseError: 28P01 password authentication failed")
    _assert_clean(caught.value, wrong)
    # The refetched secret was the same, so there was nothing new to try.
    assert [p.password for p in attempts] == [wrong]


def test_wrong_password_after_rotation_reports_the_retry(aws, db, password_role, attempts):
    password_role.set_password(f"actual-{uuid.uuid4().hex}")
    first, second = f"first-{uuid.uuid4().hex}", f"second-{uuid.uuid4().hex}"
    arn = aws.create_secret(
        Name="pgdrain/twice", SecretString=db.secret(username=password_role.name,
                                                     password=first))["ARN"]
    env = db.env(DB_SECRET_ARN=arn)
    assert connect_params_from_env(env).password == first  # cached
    aws.put_secret_value(SecretId=arn, SecretString=db.secret(username=password_role.name,
                                                              password=second))
    with pytest.raises(DatabaseConnectError, match="failed again with the secret fetched anew"
                       ) as caught:
        connect_from_env(env)
    assert [p.password for p in attempts] == [first, second]
    _assert_clean(caught.value, first, second)


# --- IAM mode ---------------------------------------------------------------------------------


def test_iam_token_is_sent_as_the_password(aws, db, password_role, attempts):
    """A token the server cannot accept proves it was sent: the login is refused with 28P01,
    and neither the message nor the traceback shows the token."""
    env = db.env(DB_IAM_AUTH="true", DB_HOST=db.host, DB_PORT=str(db.port),
                 DB_USER=password_role.name, DB_NAME=db.dbname)
    with pytest.raises(DatabaseConnectError) as caught:
        connect_from_env(env)
    [params] = attempts
    token = params.password
    # Signed for localhost: a socket directory is no host name (RDS is never on a socket).
    assert token.startswith(f"localhost:{db.port}/?Action=connect&DBUser={password_role.name}&")
    message = str(caught.value)
    assert message.startswith(
        f"could not connect to {db.host}/.s.PGSQL.{db.port}/{db.dbname} as {password_role.name} "
        "(RDS IAM token): DatabaseError: 28P01 password authentication failed")
    assert "GRANT rds_iam" in message
    signature = token.rsplit("X-Amz-Signature=", 1)[1]
    _assert_clean(caught.value, token, signature)


def test_iam_mode_connects(aws, db, attempts):
    """With trust auth the token is not checked: the IAM parameters reach the database."""
    env = db.env(DB_IAM_AUTH="1", DB_HOST=db.host, DB_PORT=str(db.port), DB_USER=db.user,
                 DB_NAME=db.dbname)
    conn = connect_from_env(env)
    try:
        assert conn.run("SELECT current_database(), current_user") == [[db.dbname, db.user]]
    finally:
        conn.close()
    [params] = attempts
    assert "X-Amz-Signature=" in params.password
