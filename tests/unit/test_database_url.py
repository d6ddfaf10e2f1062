"""DATABASE_URL parsing, TLS modes and redaction."""

from __future__ import annotations

import ssl

import pytest

from pgdrain.db import parse_database_url, ssl_context_for
from pgdrain.errors import ConfigError


def test_tcp_url():
    params = parse_database_url("postgresql://app:p%40ss@db.example.com:6543/jobs")
    assert (params.user, params.password, params.host, params.port, params.database) == (
        "app", "p@ss", "db.example.com", 6543, "jobs")
    assert params.unix_sock is None
    assert params.sslmode == "verify-full"  # a remote host is verified unless told otherwise


def test_unix_socket_url():
    params = parse_database_url("postgresql://postgres:@/postgres?host=/tmp/pgdata")
    assert params.unix_sock == "/tmp/pgdata/.s.PGSQL.5432"
    assert params.host is None
    assert params.sslmode == "disable"
    assert params.password is None


def test_socket_port_and_query_overrides():
    params = parse_database_url("postgres:///app?host=/run/pg&port=5433&user=worker")
    assert params.unix_sock == "/run/pg/.s.PGSQL.5433"
    assert params.user == "worker"
    assert params.database == "app"


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]"])
def test_local_hosts_default_to_opportunistic_tls(host):
    assert parse_database_url(f"postgresql://postgres@{host}:5432/test").sslmode == "prefer"


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("disable", False), ("allow", None), ("prefer", None), ("require", True)],
)
def test_sslmode_maps_to_pg8000(mode, expected):
    params = parse_database_url(f"postgresql://u@db.example.com/x?sslmode={mode}")
    assert ssl_context_for(params) is expected


@pytest.mark.parametrize(("mode", "check_hostname"), [("verify-ca", False), ("verify-full", True)])
def test_verifying_modes_build_a_verifying_context(mode, check_hostname):
    context = ssl_context_for(parse_database_url(f"postgresql://u@db.example.com/x?sslmode={mode}"))
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is check_hostname


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u:pw@h/db", "must start with postgresql://"),
        ("postgresql://u:pw@h:notaport/db", "port is not a number"),
        ("postgresql://u:pw/x@h:5432/db", "port is not a number"),
        ("postgresql://u:pw@h/db?sslmode=sometimes", "sslmode must be one of"),
        ("postgresql://u:pw@h/db?target_session_attrs=any", "unsupported parameters"),
        ("postgresql://u:pw@h/db?options=-csearch_path%3Dq",
         r"unsupported parameters: options \(for a schema of pgdrain's own, set PGDRAIN_SCHEMA\)"),
        ("postgresql://u:pw@h/db?connect_timeout=soon", "connect_timeout must be a number"),
    ],
)
def test_bad_urls_say_what_is_wrong_without_the_password(url, message):
    with pytest.raises(ConfigError, match=message) as raised:
        parse_database_url(url)
    assert "pw" not in str(raised.value)


def test_repr_hides_the_password():
    url = "postgresql://app:hunter2@db.example.com/jobs?password=hunter3"
    assert "hunter" not in repr(parse_database_url(url))
    assert "hunter" not in parse_database_url(url).where
