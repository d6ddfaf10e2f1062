"""Shared fixtures: a real PostgreSQL for every test that touches the queue.

With ``DATABASE_URL`` unset, one embedded PostgreSQL (pgserver) is started for the session;
with it set, that server is used. A template database is migrated once per session, and each
test gets its own database cloned from it (fast: a file copy) and dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import suppress

import pytest

from pgdrain.db import Session, connect, with_database
from pgdrain.settings import SETTINGS

# Settings from the developer's shell must not leak into tests; DATABASE_URL picks the server.
# (Test knobs such as PGDRAIN_FUZZ_EXAMPLES and PGDRAIN_SOAK are not settings and stay.)
for _name in [n for n in os.environ if n in {s.name for s in SETTINGS}
              and n != "DATABASE_URL"]:
    del os.environ[_name]


@pytest.fixture(scope="session")
def server_url(pgdrain_server: str) -> str:
    """An admin URL on the PostgreSQL server the tests use: the one pgdrain's own pytest
    plugin (pgdrain_pytest) gives users' suites, DATABASE_URL's or an embedded one, so that
    the suite and the tests of that plugin share one server."""
    return pgdrain_server


@pytest.fixture(scope="session")
def template_database(pgdrain_template: str) -> str:
    """The name of a migrated database that each test's database is cloned from (the
    plugin's, migrated once per session)."""
    return pgdrain_template


def _create_database(server_url: str, template: str | None) -> str:
    name = f"pgdrain_t_{uuid.uuid4().hex[:12]}"
    admin = connect(server_url)
    try:
        template_clause = f' TEMPLATE "{template}"' if template else ""
        admin.run(f'CREATE DATABASE "{name}"{template_clause}')
    finally:
        admin.close()
    return name


def _drop_database(server_url: str, name: str) -> None:
    admin = connect(server_url)
    try:
        admin.run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()


@pytest.fixture
def database_url(server_url: str, template_database: str) -> Iterator[str]:
    """A URL to a fresh, migrated database of this test's own."""
    name = _create_database(server_url, template_database)
    try:
        yield with_database(server_url, name)
    finally:
        _drop_database(server_url, name)


@pytest.fixture
def empty_database_url(server_url: str) -> Iterator[str]:
    """A URL to a fresh database with no schema at all."""
    name = _create_database(server_url, None)
    try:
        yield with_database(server_url, name)
    finally:
        _drop_database(server_url, name)


@pytest.fixture
def conn(database_url: str):
    """A pg8000 native connection (autocommit) to this test's database."""
    connection = connect(database_url)
    try:
        yield connection
    finally:
        connection.close()


@pytest.fixture
def connect_to(database_url: str):
    """Open more connections to this test's database; all are closed afterwards."""
    opened = []

    def open_connection():
        connection = connect(database_url)
        opened.append(connection)
        return connection

    yield open_connection
    for connection in opened:
        with suppress(Exception):  # a test may have closed or broken it
            connection.close()


@pytest.fixture
def sql(conn):
    """Run ad-hoc SQL in a test (setup and assertions): ``sql("SELECT ...", x=1)`` -> dict rows."""

    def run(statement: str, **params):
        rows = conn.run(statement, **params) if params else conn.run(statement)
        if not conn.columns:
            return []
        names = [c["name"] for c in conn.columns]
        return [dict(zip(names, row, strict=True)) for row in rows]

    return run


@pytest.fixture
def session(conn) -> Session:
    return Session(conn)


def pytest_collection_modifyitems(items):
    for item in items:
        if {"database_url", "empty_database_url", "server_url"} & set(item.fixturenames):
            item.add_marker(pytest.mark.db)


@pytest.fixture
def aws(monkeypatch):
    """Fake AWS credentials, a moto account, and no cached secret or client before or after.

    Secrets Manager answers twice over: in-process for boto3 (moto's mock), and on a loopback
    port for pgdrain's own signed requests (AWS_ENDPOINT_URL_SECRETS_MANAGER), from the same
    mocked account."""
    from moto import mock_aws

    from pgdrain.aws import credentials
    from tests.support.secrets_standin import secrets_standin

    for name in ("AWS_PROFILE", "AWS_REGION", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SECRETS_MANAGER"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN",
                 "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    credentials.clear_cache()
    with mock_aws():
        import boto3

        # Made before the endpoint is set: this client stays in moto's in-process mock.
        client = boto3.session.Session().client("secretsmanager")
        with secrets_standin(client) as endpoint:
            monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", endpoint)
            yield client
    credentials.clear_cache()
