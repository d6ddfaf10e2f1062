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


def test_tenants_with_only_later_jobs_take_no_share_of_the_claim(conn, sql):
    # The share divides the batch among the groups with a job to take now: 1,000 tenants
    # whose one job is an hour ahead once cut this claim to one job.
    sql("INSERT INTO jobs (job_type, tenant, run_at) SELECT 'export', 'later-' || i, "
        "now() + interval '1 hour' FROM generate_series(1, 1000) AS i")
    sql("INSERT INTO jobs (job_type, tenant) SELECT 'export', 'due' FROM generate_series(1, 100)")
    sql("ANALYZE jobs")
    jobs = pgdrain.claim(conn, batch_size=10, lease_seconds=60, fair=True)
    assert len(jobs) == 10
    assert {pgdrain.get_job(conn, j.id)["tenant"] for j in jobs} == {"due"}
    assert len(pgdrain.claim(conn, batch_size=100, lease_seconds=60, fair=True)) == 90
    # No group has a job to take now: nothing (the share once divided by zero groups).
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60, fair=True) == []


@pytest.mark.parametrize("held", ["paused", "capped", "rated type"])
def test_a_tenant_whose_jobs_all_wait_takes_no_share(conn, sql, held):
    # Its jobs are due but no plain claim may take them: in a paused or capped queue, or of a
    # rate-limited type (the controlled claim's).
    sql("INSERT INTO jobs (job_type, tenant, queue) SELECT :t, 'held', :q "
        "FROM generate_series(1, 50)", t="rated" if held == "rated type" else "export",
        q="held" if held != "rated type" else "default")
    if held == "paused":
        pgdrain.pause(conn, "held")
    elif held == "capped":
        pgdrain.set_queue(conn, "held", max_running=5)
    pgdrain.enqueue_many(conn, [{"job_type": "export", "tenant": "open"}] * 20)
    jobs = pgdrain.claim(conn, batch_size=10, lease_seconds=60, fair=True,
                         limited_types=["rated"])
    assert len(jobs) == 10
    assert {pgdrain.get_job(conn, j.id)["tenant"] for j in jobs} == {"open"}


def test_the_share_still_takes_each_tenants_first_before_any_second(conn, sql):
    # Three groups with work now (two tenants and the jobs without one) and three tenants
    # with only later work: a claim of 6 takes two of each of the three.
    for tenant, count in (("big", 20), ("mid", 20), (None, 20)):
        pgdrain.enqueue_many(conn, [{"job_type": "export", "tenant": tenant}] * count)
    for tenant in ("later-a", "later-b", "later-c"):
        pgdrain.enqueue(conn, "export", tenant=tenant, delay_seconds=3600)
    jobs = pgdrain.claim(conn, batch_size=6, lease_seconds=60, fair=True)
    tenants = sorted(str(pgdrain.get_job(conn, j.id)["tenant"]) for j in jobs)
    assert tenants == ["None", "None", "big", "big", "mid", "mid"]


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


@pytest.mark.parametrize("name", ["a-late", "tenant-150-late", "zz-late"])
def test_a_tenant_is_served_within_a_lap_of_the_ring_however_new_its_job(conn, sql, name):
    # 299 tenants with 5 due jobs each, then one job of another tenant, newest of all: with
    # claims of 100 it is served within ceil(300 / 100) claims, not once the others' older
    # jobs are gone (15 claims, had the oldest first jobs gone first), wherever its name
    # falls among the others' (the claims go round the tenants in the order of their names).
    sql("INSERT INTO jobs (job_type, tenant, run_at) SELECT 'export', "
        "'tenant-' || lpad((i % 299)::text, 3, '0'), now() - interval '1 hour' "
        "FROM generate_series(1, 1495) AS i")
    late = pgdrain.enqueue(conn, "export", tenant=name).id
    claimed: list[int] = []
    for _ in range(3):
        claimed += [j.id for j in pgdrain.claim(conn, batch_size=100, lease_seconds=60,
                                                 fair=True)]
    assert late in claimed
    tenants = sql("SELECT count(DISTINCT tenant) AS n FROM jobs WHERE status = 'running'")
    assert tenants == [{"n": 300}]


@pytest.mark.parametrize("types", [{}, {"rated": "100/min"}], ids=["one call", "rated types"])
@pytest.mark.parametrize("control", [{"max_running": 50}, {"rate": "50/s"},
                                     {"max_running": 50, "rate": "50/s"}])
def test_tenants_take_turns_inside_a_capped_or_rate_limited_queue(conn, sql, control, types):
    # A controlled claim took a capped queue's jobs in claim order only: a flood ahead held
    # a small tenant's job back for as many claims as the flood had batches.
    from pgdrain.claiming import claim_controlled, declare_type_rates
    from pgdrain.flow import parse_rate

    type_rates = {name: parse_rate(rate) for name, rate in types.items()}
    declare_type_rates(conn, type_rates)

    sql("INSERT INTO jobs (job_type, queue, tenant, run_at) SELECT 'export', 'partner', "
        "'flood', now() - interval '1 minute' FROM generate_series(1, 200)")
    # Tenants count only while they have a job to take now: later ones take no turn.
    sql("INSERT INTO jobs (job_type, queue, tenant, run_at) SELECT 'export', 'partner', "
        "'later-' || i, now() + interval '1 hour' FROM generate_series(1, 20) AS i")
    small = pgdrain.enqueue(conn, "export", queue="partner", tenant="small").id
    plain = pgdrain.enqueue(conn, "export", queue="partner").id
    pgdrain.set_queue(conn, "partner", **control)
    claimed = [j.id for j in claim_controlled(conn, batch_size=10, lease_seconds=60,
                                              type_rates=type_rates).jobs]
    assert len(claimed) == 10
    assert small in claimed and plain in claimed
