"""The named-query catalogue: parsing, ordering, and that the code only names real queries."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pgdrain.sql import QUERIES, CatalogueError, migrations, parse_catalogue, to_format

PACKAGE = Path(__file__).resolve().parents[2] / "layers" / "pgdrain" / "pgdrain"


def test_parse_drops_descriptions_and_keeps_sql():
    text = "-- header\n\n-- name: a_get\n-- what it does\nSELECT 1\n\n-- name: b_set\nSELECT 2\n"
    assert parse_catalogue(text) == {"a_get": "SELECT 1", "b_set": "SELECT 2"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "defined twice"),
        ("-- name: b\nSELECT 1\n-- name: a\nSELECT 2\n", "sorted"),
        ("-- name: a\n-- only a description\n", "no SQL"),
    ],
)
def test_malformed_catalogue_is_rejected(text, message):
    with pytest.raises(CatalogueError, match=message):
        parse_catalogue(text)


def test_every_query_the_code_names_exists_and_every_query_is_used():
    source = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    named = set(re.findall(r"""(?:rows|one)\(\s*"([a-z_]+)\"""", source))
    assert named, "no query names found in the code"
    assert named - set(QUERIES) == set()
    assert set(QUERIES) - named == set()


def test_no_sql_strings_in_library_code():
    # All runtime SQL lives in queries.sql; Python refers to it by name.
    pattern = re.compile(r"""["'](SELECT|UPDATE|INSERT|DELETE|BEGIN|COMMIT)\b""")
    offenders = [p.name for p in PACKAGE.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_to_format_rewrites_parameters_but_not_casts():
    statement, names = to_format("SELECT :a::int, x % 2, :b, :a FROM t WHERE y = ANY(:c::text[])")
    assert statement == "SELECT %s::int, x %% 2, %s, %s FROM t WHERE y = ANY(%s::text[])"
    assert names == ["a", "b", "a", "c"]


def test_migrations_are_numbered_in_order():
    found = migrations()
    assert [v for v, _, _ in found] == list(range(1, len(found) + 1))
    assert found[0][1] == "create_jobs"


def test_no_statement_leaves_session_state_behind():
    # What makes a pooler (RDS Proxy, PgBouncer in transaction mode) pin a session: SET,
    # LISTEN, PREPARE, temporary tables, session-level advisory locks, holdable cursors.
    # set_config(..., true) is transaction-local (SET LOCAL): it ends with the transaction.
    local_config = re.compile(r"set_config\([^()]*(\([^()]*\)[^()]*)*,\s*true\s*\)",
                              re.IGNORECASE)
    forbidden = re.compile(r"\b(LISTEN|PREPARE|TEMP|TEMPORARY|pg_advisory_lock|"
                           r"pg_try_advisory_lock|WITH HOLD|set_config)\b", re.IGNORECASE)
    offenders = {name: m.group(0) for name, sql in QUERIES.items()
                 if (m := forbidden.search(local_config.sub("", sql)))}
    offenders |= {name: "SET" for name, sql in QUERIES.items()
                  if re.match(r"\s*(SET|RESET)\b", sql, re.IGNORECASE)}
    # The exceptions: the functions' per-invocation statement and lock timeouts, which
    # Connector.open runs only with server_bounds (off behind a pooler); and the drain's
    # slot (PGDRAIN_MAX_DRAINS), a session-level advisory lock held for the whole drain and
    # released by it, or by the server when the connection dies. Behind RDS Proxy that pins
    # the drain's connection, which a drain uses without pause anyway (docs/operations.md);
    # while it holds one, an idle bound (idle_session_timeout) that giving it back lifts.
    assert offenders == {"connection_bound": "set_config",
                         "drain_slot_take": "set_config",
                         "drain_slot_give_back": "set_config"}
    assert "pg_try_advisory_lock" in QUERIES["drain_slot_take"]
