"""Fair sharing against PostgreSQL: while pending jobs name tenants, the claim takes from each
tenant in turn, so one tenant's flood never holds another's job back more than one claim."""

from __future__ import annotations

import pytest

import pgdrain
from pgdrain.registry import Registry
from tests.support.drains import run_drain


def test_each_tenant_gets_its_turn_in_every_claim(conn):
    for tenant, count in (("big", 20), ("mid", 20), ("small", 2)):
        pgdrain.enqueue_many(conn, [{"job_type": "export", "tenant": tenant}] * count)
    jobs = pgdrain.claim(conn, batch_size=6, lease_seconds=60, fair=True)
    tenants = [pgdrain.get_job(conn, j.id)["tenant"] for j in jobs]
    assert sorted(tenants) == ["big", "big", "mid", "mid", "small", "small"]


def test_jobs_without_a_tenant_are_one_more_group(conn):
    pgdrain.enqueue_many(conn, [{"job_type": "export", "tenant": "big"}] * 30)
    plain = pgdrain.enqueue(conn, "export").id
    jobs = pgdrain.claim(conn, batch_size=2, lease_seconds=60, fair=True)
    assert plain in [j.id for j in jobs]


def test_a_small_tenant_starts_in_the_first_claim_after_a_flood_of_100_000(conn, sql):
    sql("INSERT INTO jobs (job_type, tenant, run_at) "
        "SELECT 'export', 'flood', now() - interval '1 minute' FROM generate_series(1, 100000)")
    sql("ANALYZE jobs")
    small = pgdrain.enqueue(conn, "export", tenant="small").id
    first = pgdrain.claim(conn, batch_size=10, lease_seconds=60, fair=True)
    assert small in [j.id for j in first]


def test_a_drain_claims_fairly_when_tenants_are_pending(database_url, conn, sql):
    sql("INSERT INTO jobs (job_type, tenant) "
        "SELECT 'export', 'flood' FROM generate_series(1, 5000)")
    small = pgdrain.enqueue(conn, "export", tenant="small").id
    registry = Registry()
    pgdrain.job("export", registry=registry)(lambda job: None)
    summary = run_drain(database_url, registry, 10.0, batch_size=10, max_jobs=10)
    assert summary.done == 10
    assert pgdrain.get_job(conn, small)["status"] == "done"


def test_the_plain_claim_leaves_tenants_to_the_fair_one(conn):
    pgdrain.enqueue(conn, "export", tenant="a")
    plain = pgdrain.enqueue(conn, "export").id
    assert [j.id for j in pgdrain.claim(conn, batch_size=10, lease_seconds=60)] == [plain]


@pytest.mark.parametrize("bad", ["", " ", "x" * 201, "a\x00b", 7])
def test_a_bad_tenant_is_refused(conn, sql, bad):
    with pytest.raises(pgdrain.InvalidJobError, match="tenant"):
        pgdrain.enqueue(conn, "export", tenant=bad)
    assert sql("SELECT count(*) AS n FROM jobs") == [{"n": 0}]
