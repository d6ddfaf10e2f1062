"""`migrate` creates the schema once, records it, and the table keeps the seed's contract."""

from __future__ import annotations

import uuid

import pg8000.native
import pytest

from pgdrain.db import connect
from pgdrain.migrate import migrate
from pgdrain.sql import migrations


def test_migrate_creates_and_records_the_schema_once(empty_database_url):
    conn = connect(empty_database_url)
    try:
        assert migrate(conn) == [f"{v:04d}_{n}" for v, n, _ in migrations()]
        assert migrate(conn) == []
        recorded = conn.run("SELECT version, name FROM pgdrain_migrations ORDER BY version")
        assert recorded == [[v, n] for v, n, _ in migrations()]
    finally:
        conn.close()


def test_jobs_table_keeps_the_seed_columns(sql):
    columns = {r["column_name"]: r for r in sql(
        "SELECT column_name, data_type, is_nullable, column_default "
        "FROM information_schema.columns WHERE table_name = 'jobs'")}
    seed = {"id": "bigint", "job_type": "text", "payload": "jsonb", "status": "text",
            "attempts": "integer", "max_attempts": "integer",
            "run_at": "timestamp with time zone", "created_at": "timestamp with time zone"}
    for name, data_type in seed.items():
        assert columns[name]["data_type"] == data_type
        assert columns[name]["is_nullable"] == "NO"
    assert columns["status"]["column_default"].startswith("'pending'")
    assert columns["max_attempts"]["column_default"] == "3"
    for added in ("queue", "priority", "claimed_at", "lease_expires_at", "lease_token",
                  "last_error", "errors", "dedupe_key", "finished_at", "updated_at"):
        assert added in columns


def test_status_check_rejects_unknown_words(sql):
    with pytest.raises(pg8000.native.DatabaseError, match="jobs_status_check"):
        sql("INSERT INTO jobs (job_type, status) VALUES ('x', 'finished')")
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 0


def test_indexes_exist(sql):
    indexes = {r["indexname"] for r in sql("SELECT indexname FROM pg_indexes "
                                           "WHERE tablename = 'jobs'")}
    assert {"jobs_pending_idx", "jobs_running_idx", "jobs_done_finished_idx",
            "jobs_dedupe_key_live_or_waiting_idx", "jobs_alone_idx",
            "jobs_failed_queue_idx", "jobs_tags_idx", "jobs_meta_idx"} <= indexes
    # One index for the running jobs serves the janitor and the caps (0021).
    assert not {"jobs_running_lease_idx", "jobs_running_queue_idx"} & indexes


def test_the_jobs_table_leaves_room_on_each_page_for_its_rows_updates(sql):
    """A claim and a finish rewrite the row on its own page (0021_lighter_writes)."""
    options = sql("SELECT reloptions FROM pg_class WHERE relname = 'jobs'")[0]["reloptions"]
    assert "fillfactor=70" in options


def test_a_database_at_an_earlier_version_gets_only_the_later_migrations(empty_database_url):
    conn = connect(empty_database_url)
    try:
        assert migrate(conn, to_version=2) == ["0001_create_jobs", "0002_start_records"]
        later = [f"{v:04d}_{n}" for v, n, _ in migrations() if v > 2]
        assert later and migrate(conn) == later
        assert conn.run("SELECT count(*) FROM pg_indexes WHERE indexname = 'jobs_alone_idx'") \
            == [[1]]
    finally:
        conn.close()


def test_an_upgrade_grants_the_new_tables_to_the_roles_that_used_jobs(empty_database_url):
    """A functions' role granted jobs alone (before pause and schedules existed) can still
    claim after the upgrade: migrations 0008, 0009, 0013, 0015, 0019, 0022, 0023, 0026 and
    0029 grant their tables to it (and 0030 the schedules whole: who enqueues may schedule)."""
    role = f"pgdrain_upgrade_{uuid.uuid4().hex[:8]}"
    conn = connect(empty_database_url)
    try:
        migrate(conn, to_version=7)
        conn.run(f"CREATE ROLE {role}")
        conn.run(f"GRANT SELECT, INSERT, UPDATE, DELETE ON jobs TO {role}")
        migrate(conn)
        granted = conn.run(
            "SELECT table_name, string_agg(privilege_type, ',' ORDER BY privilege_type) "
            "FROM information_schema.role_table_grants WHERE grantee = :r "
            "AND table_name LIKE 'pgdrain%' GROUP BY 1 ORDER BY 1", r=role)
        assert granted == [["pgdrain_done_counts", "DELETE,INSERT,SELECT,UPDATE"],
                           ["pgdrain_drain_launches", "SELECT,UPDATE"],
                           ["pgdrain_hooked_types", "INSERT,SELECT"],
                           ["pgdrain_queues", "INSERT,SELECT,UPDATE"],
                           ["pgdrain_schedule_declarations", "DELETE,INSERT,SELECT,UPDATE"],
                           ["pgdrain_schedules", "DELETE,INSERT,SELECT,UPDATE"],
                           ["pgdrain_signals", "DELETE,INSERT,SELECT,UPDATE"],
                           ["pgdrain_type_rates", "INSERT,SELECT,UPDATE"],
                           ["pgdrain_waiters", "DELETE,INSERT,SELECT"]]
    finally:
        if conn.run("SELECT 1 FROM pg_roles WHERE rolname = :r", r=role):
            conn.run(f"DROP OWNED BY {role}")
            conn.run(f"DROP ROLE {role}")
        conn.close()


def test_an_upgrade_grants_the_doorbell_sequence_to_the_roles_that_used_its_table(
        empty_database_url):
    """A role that rang and stamped through pgdrain_doorbell (0004's table) may read and
    setval the sequence that holds the state from 0014 on; a role granted jobs alone is
    granted nothing new on it."""
    ringer, other = (f"pgdrain_upgrade_{uuid.uuid4().hex[:8]}" for _ in range(2))
    conn = connect(empty_database_url)
    try:
        migrate(conn, to_version=13)
        for role in (ringer, other):
            conn.run(f"CREATE ROLE {role}")
            conn.run(f"GRANT SELECT, INSERT, UPDATE, DELETE ON jobs TO {role}")
        conn.run(f"GRANT SELECT, UPDATE ON pgdrain_doorbell TO {ringer}")
        assert migrate(conn)[0] == "0014_doorbell_sequence"
        privileges = "SELECT has_sequence_privilege(:r, 'pgdrain_doorbell_ring', :p)"
        assert conn.run(privileges, r=ringer, p="SELECT") == [[True]]
        assert conn.run(privileges, r=ringer, p="UPDATE") == [[True]]
        assert conn.run(privileges, r=other, p="UPDATE") == [[False]]
        conn.run(f"SET ROLE {ringer}")
        conn.run("SELECT setval('pgdrain_doorbell_ring', 0), last_value "
                 "FROM pgdrain_doorbell_ring")
        conn.run("RESET ROLE")
    finally:
        conn.run("RESET ROLE")
        for role in (ringer, other):
            if conn.run("SELECT 1 FROM pg_roles WHERE rolname = :r", r=role):
                conn.run(f"DROP OWNED BY {role}")
                conn.run(f"DROP ROLE {role}")
        conn.close()


def test_the_tags_and_meta_indexes_hold_only_jobs_that_have_them(sql):
    # Partial: a job enqueued without tags or meta has no entry in them (its insert writes
    # neither), and GIN, for containment (tags @> ..., meta @> ...).
    found = {r["indexname"]: r["indexdef"] for r in sql(
        "SELECT indexname, indexdef FROM pg_indexes "
        "WHERE indexname IN ('jobs_tags_idx', 'jobs_meta_idx')")}
    assert "USING gin (tags)" in found["jobs_tags_idx"]
    assert found["jobs_tags_idx"].endswith("WHERE (tags IS NOT NULL)")
    assert "USING gin (meta jsonb_path_ops)" in found["jobs_meta_idx"]
    assert found["jobs_meta_idx"].endswith("WHERE (meta IS NOT NULL)")
