"""`migrate` creates the schema once, records it, and the table keeps the seed's contract."""

from __future__ import annotations

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
    assert {"jobs_pending_idx", "jobs_running_lease_idx", "jobs_done_finished_idx",
            "jobs_dedupe_key_live_idx", "jobs_alone_idx"} <= indexes


def test_a_database_at_an_earlier_version_gets_only_the_later_migrations(empty_database_url):
    conn = connect(empty_database_url)
    try:
        first_two = [m for m in migrations() if m[0] <= 2]
        conn.run("CREATE TABLE pgdrain_migrations (version int PRIMARY KEY, name text NOT NULL, "
                 "applied_at timestamptz NOT NULL DEFAULT now())")
        for version, name, sql in first_two:
            conn.run(sql)
            conn.run("INSERT INTO pgdrain_migrations (version, name) VALUES (:v, :n)",
                     v=version, n=name)
        later = [f"{v:04d}_{n}" for v, n, _ in migrations() if v > 2]
        assert later and migrate(conn) == later
        assert conn.run("SELECT count(*) FROM pg_indexes WHERE indexname = 'jobs_alone_idx'") \
            == [[1]]
    finally:
        conn.close()
