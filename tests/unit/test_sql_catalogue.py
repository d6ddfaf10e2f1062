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
    named = set(re.findall(r"""(?:rows|one|values)\(\s*"([a-z_]+)\"""", source))
    assert named, "no query names found in the code"
    assert named - set(QUERIES) == set()
    assert set(QUERIES) - named == set()


def test_no_sql_strings_in_library_code():
    # All runtime SQL lives in queries.sql; Python refers to it by name. (A keyword alone in
    # its string is no statement: the HTTP method "DELETE" of a route.)
    pattern = re.compile(r"""["'](SELECT|UPDATE|INSERT|DELETE|BEGIN|COMMIT)\b(?!["'])""")
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
    # while it holds one, an idle bound (idle_session_timeout) that giving it back lifts. And
    # `pgdrain migrate`'s lock, held across an online migration's transactions by the CLI
    # or the deploy's custom resource, never by a function's pooled connection. And
    # pgdrain.wait's LISTEN, which UNLISTENs before it returns, and which a connection behind
    # a pooler does not run (wait(..., listen=False); the enqueue function: the same setting
    # as its prepared statements, PGDRAIN_PREPARED_STATEMENTS).
    assert offenders == {"connection_bound": "set_config",
                         "waiter_listen": "LISTEN",
                         "migration_lock": "pg_advisory_lock",
                         "drain_slot_take": "set_config",
                         "drain_slot_give_back": "set_config"}
    assert "pg_try_advisory_lock" in QUERIES["drain_slot_take"]


def test_fragments_are_put_in_place_with_the_row_renamed():
    text = ("-- fragment: a_due(j)\n-- a description\nj.run_at <= now() AND {{b_live(j)}}\n\n"
            "-- fragment: b_live(r)\nr.status = 'pending'\n\n"
            "-- name: c_get\nSELECT id FROM jobs AS w\nWHERE {{a_due(w)}}\n")
    assert parse_catalogue(text) == {
        "c_get": "SELECT id FROM jobs AS w\nWHERE w.run_at <= now() AND w.status = 'pending'"}


def test_a_fragment_over_lines_is_indented_as_its_use():
    text = ("-- fragment: a_x(j)\nj.a = 1\nAND j.b = 2\n\n"
            "-- name: b_get\nSELECT 1 WHERE {{a_x(t)}}\n")
    assert parse_catalogue(text)["b_get"] == ("SELECT 1 WHERE t.a = 1\n"
                                              "               AND t.b = 2")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- name: a_get\nSELECT 1 WHERE {{nowhere(j)}}\n", "unknown fragment 'nowhere'"),
        ("-- fragment: a_x(j)\nj.a = 1\n-- name: a_get\nSELECT 1\n", "no statement uses: a_x"),
        ("-- fragment: a_x(j)\n{{b_y(j)}}\n-- fragment: b_y(j)\n{{a_x(j)}}\n"
         "-- name: a_get\nSELECT 1 WHERE {{a_x(t)}}\n", "uses itself: a_get -> a_x -> b_y -> a_x"),
        ("-- fragment: a_x(j)\nj.a = 1\n-- name: a_get\nSELECT 1 WHERE {{a_x}}\n",
         "with 0 arguments, not 1"),
        ("-- fragment: b_x(j)\nj.a\n-- fragment: a_x(j)\nj.a\n-- name: a_get\n"
         "SELECT {{a_x(t)}}, {{b_x(t)}}\n", "sorted"),
        ("-- fragment: a_x(j)\nj.a\n-- fragment: a_x(j)\nj.a\n-- name: a_get\n"
         "SELECT {{a_x(t)}}\n", "fragment 'a_x' is defined twice"),
    ],
)
def test_malformed_fragments_are_rejected(text, message):
    with pytest.raises(CatalogueError, match=re.escape(message)):
        parse_catalogue(text)


def test_no_statement_keeps_a_fragment_use():
    assert {name for name, sql in QUERIES.items() if "{{" in sql or "}}" in sql} == set()


def test_every_statement_parses_on_the_server(conn):
    # The expanded text is what the server plans: Parse (without running) each one.
    for name, sql in QUERIES.items():
        try:
            conn.prepare(sql).close()
        except Exception as exc:
            pytest.fail(f"{name} does not parse: {exc}")
