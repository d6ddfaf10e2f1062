"""PGDRAIN_SCHEMA against PostgreSQL: pgdrain's objects in a schema of their own, beside an app
whose own ``jobs`` table stays where it was and untouched; every statement, the migrations,
the claim's function, the CLI and the grants name the schema, whatever the connection's
search_path."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid

import pytest

import pgdrain
from pgdrain import sql as catalogue
from pgdrain.claiming import claim_controlled
from pgdrain.db import connect, with_database
from pgdrain.migrate import migrate
from pgdrain.operator_store import grant, grants_needed
from pgdrain.registry import Registry
from tests.conftest import _create_database, _drop_database
from tests.integration.test_cli import _env
from tests.support.catalog import fingerprint
from tests.support.drains import run_drain

SCHEMA = "pgq"
APP_JOBS = "CREATE TABLE jobs (id serial PRIMARY KEY, note text NOT NULL)"


@pytest.fixture
def in_schema():
    """pgdrain's statements and migrations written for SCHEMA, as PGDRAIN_SCHEMA=pgq does."""
    catalogue.use_schema(SCHEMA)
    try:
        yield SCHEMA
    finally:
        catalogue.use_schema(None)


@pytest.fixture
def app_database(empty_database_url):
    """A database whose app has a ``jobs`` table of its own in public, with a row."""
    conn = connect(empty_database_url)
    try:
        conn.run(APP_JOBS)
        conn.run("INSERT INTO jobs (note) VALUES ('the app''s own row')")
    finally:
        conn.close()
    return empty_database_url


def _public_relations(conn) -> list[str]:
    return [r[0] for r in conn.run(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' ORDER BY 1")]


def test_without_a_schema_the_apps_jobs_table_is_refused_and_nothing_is_created(app_database):
    conn = connect(app_database)
    try:
        before = _public_relations(conn)
        with pytest.raises(pgdrain.MigrationError,
                           match=r"^schema public already has jobs, not created by pgdrain .*"
                                 r"nothing was created\. .*PGDRAIN_SCHEMA=pgdrain"):
            migrate(conn)
        assert _public_relations(conn) == before
        assert conn.run("SELECT note FROM jobs") == [["the app's own row"]]
    finally:
        conn.close()


def test_a_schema_of_its_own_holds_what_a_default_install_holds(app_database, server_url,
                                                                 in_schema):
    conn = connect(app_database)
    try:
        before = _public_relations(conn)
        applied = migrate(conn)
        assert applied == [f"{v:04d}_{n}" for v, n, _ in catalogue.migrations()]
        assert _public_relations(conn) == before
        assert conn.run("SELECT note FROM jobs") == [["the app's own row"]]
        assert migrate(conn) == []
        ours = fingerprint(conn, SCHEMA)
    finally:
        conn.close()
    # The same tables, columns, indexes, constraints and functions as an install in public.
    catalogue.use_schema(None)
    name = _create_database(server_url, None)
    plain = connect(with_database(server_url, name))
    try:
        migrate(plain)
        assert fingerprint(plain, "public") == ours
    finally:
        plain.close()
        _drop_database(server_url, name)


def test_every_statement_names_the_schema(app_database, in_schema):
    """With a search_path that finds none of pgdrain's objects, every catalogue statement
    still parses: each name in it is the schema's."""
    conn = connect(app_database)
    try:
        migrate(conn)
        conn.run("SET search_path TO ''")
        with pytest.raises(Exception, match="does not exist"):
            conn.prepare("SELECT count(*) FROM jobs")  # what a bare name meets here
        unresolved = {}
        for name, text in catalogue.QUERIES.items():
            try:
                conn.prepare(text).close()
            except Exception as exc:
                unresolved[name] = str(exc)
        assert unresolved == {}
    finally:
        conn.close()


def test_jobs_go_through_the_schema_with_the_apps_table_first_on_the_search_path(
        app_database, in_schema):
    """Every connection here finds public's ``jobs`` (the app's) by its search_path: a
    statement that did not name the schema would reach the app's table and fail or, worse,
    write to it."""
    conn = connect(app_database)
    try:
        migrate(conn)
        plain = [pgdrain.enqueue(conn, "noop", {"n": i}).id for i in range(3)]
        capped = [pgdrain.enqueue(conn, "noop", {"n": i}, queue="partner").id for i in range(2)]
        pgdrain.set_queue(conn, "partner", max_running=1)
        # The controlled claim is a function in the schema (pgdrain_claim_controlled).
        claimed = claim_controlled(conn, batch_size=10, lease_seconds=60).jobs
        assert [j.id for j in claimed] == capped[:1]
        pgdrain.complete(conn, claimed)
        registry = Registry()
        pgdrain.job("noop", registry=registry)(lambda job: {"seen": job.payload["n"]})
        summary = run_drain(app_database, registry)
        assert summary.done == len(plain) + 1
        done = conn.run(f"SELECT id FROM {SCHEMA}.jobs WHERE status = 'done' ORDER BY id")
        assert [r[0] for r in done] == sorted([*plain, *capped])
        assert conn.run("SELECT id, note FROM public.jobs") == [[1, "the app's own row"]]
    finally:
        conn.close()


def test_the_cli_says_which_schema_and_works_in_it(app_database):
    env = {**_env(app_database), "PGDRAIN_SCHEMA": SCHEMA}
    run = [sys.executable, "-m", "pgdrain"]
    migrated = subprocess.run([*run, "migrate"], env=env, capture_output=True, text=True,
                              timeout=120, check=False)
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.startswith("applied: 0001_create_jobs")
    assert f", schema {SCHEMA} (PGDRAIN_SCHEMA))" in migrated.stderr
    enqueued = subprocess.run([*run, "enqueue", "noop", "--payload", '{"a": 1}'], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
    assert enqueued.returncode == 0, enqueued.stderr
    stats = subprocess.run([*run, "stats", "--json"], env=env, capture_output=True, text=True,
                           timeout=60, check=False)
    assert stats.returncode == 0, stats.stderr
    assert '"due": 1' in stats.stdout
    # The app's table is no queue: without the setting, the CLI does not read it as one.
    bare = {k: v for k, v in env.items() if k != "PGDRAIN_SCHEMA"}
    refused = subprocess.run([*run, "stats"], env=bare, capture_output=True, text=True,
                             timeout=60, check=False)
    assert refused.returncode == 1


def test_a_bad_schema_name_is_refused_by_the_first_statement_with_what_is_wrong(app_database):
    env = {**_env(app_database), "PGDRAIN_SCHEMA": "Queue-1"}
    result = subprocess.run([sys.executable, "-m", "pgdrain", "migrate"], env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "pgdrain migrate: PGDRAIN_SCHEMA must be a lowercase name of letters, digits and _ "
        "(not starting with a digit, at most 63), got 'Queue-1'")
    conn = connect(app_database)
    try:
        assert _public_relations(conn) == ["jobs", "jobs_id_seq", "jobs_pkey"]
    finally:
        conn.close()


def test_the_grants_reach_the_schema(app_database, in_schema):
    role = f"pgdrain_schema_{uuid.uuid4().hex[:8]}"
    conn = connect(app_database)
    try:
        migrate(conn)
        statements = grants_needed(conn, role, "app")
        assert statements[0] == f"GRANT USAGE ON SCHEMA {SCHEMA} TO {role};"
        assert all(re.search(rf'"{SCHEMA}"\.', s) for s in statements[1:])
        conn.run(f"CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}'")
        grant(conn, statements)
        conn.run(f"SET ROLE {role}")
        job = pgdrain.enqueue(conn, "noop", {})
        assert [j.id for j in pgdrain.claim(conn, batch_size=5, lease_seconds=60)] == [job.id]
    finally:
        conn.run("RESET ROLE")
        if conn.run("SELECT 1 FROM pg_roles WHERE rolname = :r", r=role):
            conn.run(f"DROP OWNED BY {role}")
            conn.run(f"DROP ROLE {role}")
        conn.close()

