"""An upgrade of a 1,000,000-row jobs table while the app writes to it: the migrations since
0002 build their indexes concurrently and check their constraints after adding them NOT
VALID, so writes go on throughout, and the schema comes out the same as a fresh install's.
(The writer's longest stall, online against in one transaction: bench/online_upgrade.py.)"""

from __future__ import annotations

import pg8000.native
import pytest

import pgdrain
from pgdrain.db import connect, with_database
from pgdrain.migrate import migrate
from pgdrain.sql import migrations
from pgdrain_dev.online_upgrade import prepare, upgrade_under_load
from tests.conftest import _create_database, _drop_database
from tests.support.catalog import fingerprint

ROWS = 1_000_000


def test_a_million_row_table_is_upgraded_while_writes_go_on(empty_database_url, server_url):
    prepare(empty_database_url, rows=ROWS, from_version=2)
    run = upgrade_under_load(empty_database_url)
    assert run.errors == []
    assert run.applied == [f"{v:04d}_{n}" for v, n, _ in migrations() if v > 2]
    # Indexes were being built while the watcher looked, and the writer's jobs committed
    # meanwhile: no build held the table's writes back.
    assert run.builds_seen > 0
    assert run.writes_during_builds > 0

    conn = connect(empty_database_url)
    fresh = _create_database(server_url, None)
    other = connect(with_database(server_url, fresh))
    try:
        migrate(other)
        # Every index valid, every constraint validated: as a fresh install has them.
        assert fingerprint(conn, "public") == fingerprint(other, "public")
        assert conn.run("SELECT count(*) FROM jobs")[0][0] == ROWS + run.writes
        # And the queue works on the upgraded table.
        job = pgdrain.enqueue(conn, "after-upgrade", {})
        assert [j.id for j in pgdrain.claim(conn, batch_size=1, lease_seconds=60)] != []
        assert pgdrain.get_job(conn, job.id) is not None
    finally:
        other.close()
        conn.close()
        _drop_database(server_url, fresh)


def test_an_online_upgrade_cut_short_resumes_and_drops_a_half_built_index(empty_database_url):
    """A concurrent build that fails leaves an invalid index behind; the next run drops it,
    builds it again, and records the migration once."""
    prepare(empty_database_url, rows=20_000, from_version=2)
    conn = connect(empty_database_url)
    try:
        # 0003's index, half built: a concurrent build that failed (here, dividing by zero)
        # leaves it in the catalogue, invalid.
        with pytest.raises(pg8000.native.DatabaseError, match="division by zero"):
            conn.run("CREATE INDEX CONCURRENTLY jobs_alone_idx ON jobs ((1 / lost_claims))")
        assert conn.run("SELECT indisvalid FROM pg_index "
                        "WHERE indexrelid = 'jobs_alone_idx'::regclass") == [[False]]
        applied = migrate(conn, online_above_rows=1)
        assert applied[0] == "0003_alone_index"
        assert conn.run("SELECT indisvalid, pg_get_indexdef(indexrelid) FROM pg_index "
                        "WHERE indexrelid = 'jobs_alone_idx'::regclass") == [[
                            True, "CREATE INDEX jobs_alone_idx ON public.jobs USING btree "
                                  "(priority, run_at, id) WHERE ((status = 'pending'::text) "
                                  "AND (lost_claims > 0))"]]
        assert conn.run("SELECT count(*) FROM pgdrain_migrations WHERE version = 3") == [[1]]
    finally:
        conn.close()
