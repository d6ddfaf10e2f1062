"""Per-queue concurrency caps against PostgreSQL: never more jobs of a capped queue running than
its cap, across every drain at once and under races; jobs over the cap stay pending and
uncharged; bad caps change nothing."""

from __future__ import annotations

import threading
import time

import pytest

import pgdrain
from pgdrain import Settings
from pgdrain.claiming import claim_controlled
from pgdrain.db import Connector, connect
from pgdrain.drain import drain
from pgdrain.registry import Registry
from tests.support.drains import KEEP_HISTORY_SECONDS, clock, jobs_left, run_all, run_drain


def test_a_capped_queue_gives_out_only_its_room(conn, sql):
    ids = [pgdrain.enqueue(conn, "call-api", queue="partner").id for _ in range(5)]
    other = pgdrain.enqueue(conn, "send-email").id
    state = pgdrain.set_queue(conn, "partner", max_running=2)
    assert (state["max_running"], state["paused"]) == (2, False)
    # The plain claim leaves the capped queue alone.
    assert [j.id for j in pgdrain.claim(conn, batch_size=10, lease_seconds=60)] == [other]
    first = claim_controlled(conn, batch_size=10, lease_seconds=60).jobs
    assert [j.id for j in first] == ids[:2]
    assert claim_controlled(conn, batch_size=10, lease_seconds=60).jobs == []
    pgdrain.complete(conn, first[:1])
    assert [j.id for j in claim_controlled(conn, batch_size=10, lease_seconds=60).jobs] == [ids[2]]
    # Over the cap: still pending, no attempt spent.
    rows = sql("SELECT status, attempts FROM jobs WHERE id = ANY(:ids) ORDER BY id",
               ids=ids[3:])
    assert rows == [{"status": "pending", "attempts": 0}] * 2
    # Lifting the cap hands the queue back to the plain claim.
    pgdrain.set_queue(conn, "partner", max_running=None)
    assert {j.id for j in pgdrain.claim(conn, batch_size=10, lease_seconds=60)} == set(ids[3:])


def test_a_paused_capped_queue_is_not_claimed(conn):
    pgdrain.enqueue(conn, "call-api", queue="partner")
    pgdrain.set_queue(conn, "partner", max_running=5)
    pgdrain.pause(conn, "partner")
    assert claim_controlled(conn, batch_size=10, lease_seconds=60).jobs == []
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []


@pytest.mark.parametrize("bad", [0, -1, 2.5, "3", True, 2**31])
def test_a_bad_cap_is_refused_and_changes_nothing(conn, sql, bad):
    pgdrain.enqueue(conn, "call-api", queue="partner")
    with pytest.raises(pgdrain.InvalidJobError, match="max_running: must be a whole number"):
        pgdrain.set_queue(conn, "partner", max_running=bad)
    with pytest.raises(pgdrain.UnknownQueue):
        pgdrain.set_queue(conn, "partnr", max_running=3)
    assert sql("SELECT count(*) AS n FROM pgdrain_queues") == [{"n": 0}]


def test_sixteen_drains_never_run_more_than_the_cap(database_url, conn, sql):
    """16 drains with concurrency 10 against a cap of 3, sampled every 10 ms: never above 3,
    and every job done."""
    registry = Registry()
    pgdrain.job("call-api", registry=registry)(lambda job: time.sleep(0.03))
    pgdrain.job("send-email", registry=registry)(lambda job: None)
    for _ in range(150):
        pgdrain.enqueue(conn, "call-api", queue="partner")
    for _ in range(100):
        pgdrain.enqueue(conn, "send-email")
    pgdrain.set_queue(conn, "partner", max_running=3)
    seen, stop = [], threading.Event()

    def sample() -> None:
        watcher = connect(database_url)
        try:
            while not stop.is_set():
                seen.append(watcher.run("SELECT count(*) FROM jobs WHERE queue = 'partner' "
                                        "AND status = 'running'")[0][0])
                time.sleep(0.01)
        finally:
            watcher.close()

    def one() -> None:
        connector = Connector(lambda timeout=None: connect(database_url, timeout=timeout))
        try:
            while jobs_left(database_url) and not stop.is_set():
                drain(connector, registry, Settings(concurrency=10, max_drains=32,
                                                    retention_seconds=KEEP_HISTORY_SECONDS),
                      time_left=clock(30))
        finally:
            connector.discard()

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        run_all([threading.Thread(target=one) for _ in range(16)], timeout=60)
    finally:
        stop.set()
    sampler.join()
    assert max(seen) == 3, max(seen)
    assert len(seen) > 20
    assert sql("SELECT status, count(*) AS n, max(attempts) AS tries FROM jobs "
               "GROUP BY status") == [{"status": "done", "n": 250, "tries": 1}]



def test_a_lost_claim_in_a_capped_queue_is_claimed_within_the_cap_its_start_recorded(conn,
                                                                                     sql):
    """The lone claim leaves controlled queues alone: the controlled claim takes a job whose
    claim was lost before, records its start, and says so (the drain runs it alone)."""
    ident = pgdrain.enqueue(conn, "call-api", queue="partner").id
    sql("UPDATE jobs SET lost_claims = 1 WHERE id = :id", id=ident)
    pgdrain.set_queue(conn, "partner", max_running=1)
    assert pgdrain.store.claim_alone(conn, lease_seconds=60) is None
    [job] = claim_controlled(conn, batch_size=10, lease_seconds=60).jobs
    assert (job.id, job.lost_claims) == (ident, 1)
    assert sql("SELECT started_at IS NOT NULL AS started FROM jobs WHERE id = :id",
               id=ident) == [{"started": True}]


@pytest.mark.parametrize("path", ["one call", "with rated types"])
def test_both_controlled_claims_leave_out_what_the_plain_claim_leaves_out(conn, sql, path):
    # The one-call claim (migration 0018) writes the catalogue's job_due and
    # job_ordering_head out again: it must take exactly what the statements using them take.
    from pgdrain.claiming import declare_type_rates
    from pgdrain.flow import parse_rate

    types = {"rated": parse_rate("100/min")} if path == "with rated types" else {}
    declare_type_rates(conn, types)
    rows = sql("INSERT INTO jobs (job_type, queue, run_at, expires_at, cancel_requested_at, "
               "ordering_key) VALUES "
               "('export', 'partner', now(), NULL, NULL, NULL), "
               "('export', 'partner', now(), now() - interval '1 s', NULL, NULL), "
               "('export', 'partner', now(), NULL, now(), NULL), "
               "('export', 'partner', now() + interval '1 h', NULL, NULL, NULL), "
               "('export', 'partner', now(), NULL, NULL, 'k'), "
               "('export', 'partner', now(), NULL, NULL, 'k'), "
               "('export', 'elsewhere', now(), NULL, NULL, NULL) RETURNING id")
    ids = [r["id"] for r in rows]
    pgdrain.set_queue(conn, "partner", max_running=50)
    pgdrain.set_queue(conn, "elsewhere", max_running=50)
    claimed = claim_controlled(conn, batch_size=10, lease_seconds=60, queues=["partner"],
                               type_rates=types).jobs
    assert [j.id for j in claimed] == [ids[0], ids[4]]


def test_a_job_claimed_in_a_capped_queue_has_every_field_the_other_claims_give(
        database_url, conn, monkeypatch):
    # The controlled claim (a function, migration 0018) returned the columns of its day: its
    # jobs ran without their tenant, parents' results, tags, meta and trace (0032 adds them).
    xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    seen: dict[int, tuple] = {}
    registry = Registry()

    @pgdrain.job("capped-work", registry=registry)
    def work(job: pgdrain.Job) -> str:
        seen[job.id] = (job.tenant, job.tags, job.meta, job.trace_context is not None,
                        job.parent_results)
        return f"result {job.id}"

    pgdrain.set_queue(conn, "partner", max_running=5, new=True)
    parent = pgdrain.enqueue(conn, "capped-work", {}, queue="partner").id
    monkeypatch.setenv("_X_AMZN_TRACE_ID", xray)
    child = pgdrain.enqueue(conn, "capped-work", {}, queue="partner", tenant="acme",
                            tags=["customer:42"], meta={"plan": "pro"},
                            depends_on=[parent]).id
    monkeypatch.delenv("_X_AMZN_TRACE_ID")
    for _ in range(3):
        run_drain(database_url, registry)
        if child in seen:
            break
    assert seen[child] == ("acme", ["customer:42"], {"plan": "pro"}, True,
                           {parent: f"result {parent}"})
