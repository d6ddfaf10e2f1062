"""Ordering keys against PostgreSQL: jobs with the same `ordering_key` run one at a time, in
enqueue order (priority aside), across every drain; other keys run in parallel. A retrying job
holds its key (like an SQS FIFO message group), through retries, lost leases and crashes."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict

import pytest

import pgdrain
from pgdrain import Backoff, Settings
from pgdrain.registry import Registry
from pgdrain.store import claim_alone
from tests.support.drains import jobs_left, run_all, run_drain


def ids(jobs) -> list[int]:
    return [j.id for j in jobs]


def test_only_the_head_of_each_key_is_claimed(conn):
    a, b, c = (pgdrain.enqueue(conn, "sync", ordering_key="customer-1").id for _ in range(3))
    d = pgdrain.enqueue(conn, "sync", ordering_key="customer-2").id
    free = pgdrain.enqueue(conn, "sync").id
    first = pgdrain.claim(conn, batch_size=10, lease_seconds=60)
    assert ids(first) == [a, d, free]
    # While a runs, its key gives out nothing more.
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []
    pgdrain.complete(conn, first)
    assert ids(pgdrain.claim(conn, batch_size=10, lease_seconds=60)) == [b]
    assert pgdrain.get_job(conn, c)["status"] == "pending"


def test_the_key_passes_on_in_enqueue_order_not_priority(conn):
    a = pgdrain.enqueue(conn, "sync", ordering_key="k", priority=5).id
    b = pgdrain.enqueue(conn, "sync", ordering_key="k", priority=-5).id
    c = pgdrain.enqueue(conn, "sync", ordering_key="k", priority=0).id
    order = []
    for _ in range(3):
        jobs = pgdrain.claim(conn, batch_size=10, lease_seconds=60)
        assert len(jobs) == 1
        order.append(jobs[0].id)
        pgdrain.complete(conn, jobs)
    assert order == [a, b, c]


def test_a_retrying_job_holds_its_key(conn):
    a, b = (pgdrain.enqueue(conn, "sync", ordering_key="k").id for _ in range(2))
    [job] = pgdrain.claim(conn, batch_size=10, lease_seconds=60)
    assert pgdrain.retry(conn, job, "boom", 0.5)
    # Its retry is not due yet, and b may not overtake it.
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []
    time.sleep(0.6)
    [again] = pgdrain.claim(conn, batch_size=10, lease_seconds=60)
    assert (again.id, again.attempts) == (a, 2)
    pgdrain.complete(conn, [again])
    assert ids(pgdrain.claim(conn, batch_size=10, lease_seconds=60)) == [b]


def test_a_failed_or_cancelled_job_gives_its_key_up(conn):
    _a, b, c = (pgdrain.enqueue(conn, "sync", ordering_key="k").id for _ in range(3))
    [job] = pgdrain.claim(conn, batch_size=10, lease_seconds=60)
    assert pgdrain.fail(conn, job, "gave up")
    pgdrain.cancel(conn, [b])
    assert ids(pgdrain.claim(conn, batch_size=10, lease_seconds=60)) == [c]


def test_a_lost_lease_holds_the_key_until_the_job_runs_again(conn, sql):
    """A drain that dies holding the head: the next job waits through the lease, the janitor
    gives the head back (claimed alone, as any lost claim), and only then does the key move."""
    a, b = (pgdrain.enqueue(conn, "sync", ordering_key="k").id for _ in range(2))
    [_job] = pgdrain.claim(conn, batch_size=10, lease_seconds=0.2)
    time.sleep(0.3)                                   # the drain died; its lease ran out
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []
    assert pgdrain.run_janitor(conn, Settings()).reclaimed == 1
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []
    again = claim_alone(conn, lease_seconds=60)
    assert again is not None and again.id == a
    pgdrain.complete(conn, [again])
    assert ids(pgdrain.claim(conn, batch_size=10, lease_seconds=60)) == [b]


def test_a_job_committed_after_a_later_one_waits_for_it(conn, database_url):
    """Ids are taken at insert, order is what commits: a transaction that took an earlier id
    and commits after a later job started still never runs beside it."""
    other = pgdrain.db.connect(database_url)
    try:
        other.run("BEGIN")
        early = pgdrain.enqueue(other, "sync", ordering_key="k").id
        late = pgdrain.enqueue(conn, "sync", ordering_key="k").id
        assert ids(pgdrain.claim(conn, batch_size=10, lease_seconds=60)) == [late]
        other.run("COMMIT")
    finally:
        other.close()
    assert early < late
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []


@pytest.mark.parametrize("bad", ["", " ", "x" * 501, "a\x00b", 7])
def test_a_bad_ordering_key_is_refused(conn, sql, bad):
    with pytest.raises(pgdrain.InvalidJobError, match="ordering_key"):
        pgdrain.enqueue(conn, "sync", ordering_key=bad)
    assert sql("SELECT count(*) AS n FROM jobs") == [{"n": 0}]


def test_racing_drains_keep_each_key_in_order_through_retries(database_url, conn, sql):
    """8 drains with concurrency 5 over 20 keys of 10 jobs, a third of which fail their first
    attempt: per key, no two runs overlap and the runs go in enqueue order."""
    registry, runs, lock = Registry(), defaultdict(list), threading.Lock()

    @pgdrain.job("sync", registry=registry)
    def sync(job) -> None:
        began = time.monotonic()
        time.sleep(0.002)
        with lock:
            runs[job.payload["key"]].append((job.payload["n"], job.attempts, began,
                                             time.monotonic()))
        if job.payload["n"] % 3 == 0 and job.attempts == 1:
            raise RuntimeError("first attempt fails")

    pgdrain.enqueue_many(conn, [{"job_type": "sync", "payload": {"key": k, "n": n},
                                 "ordering_key": f"key-{k}"}
                                for n in range(10) for k in range(20)])
    settings = {"concurrency": 5, "max_drains": 16, "backoff": Backoff(0, 0, 0)}

    def one() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and jobs_left(database_url):
            run_drain(database_url, registry, 10.0, **settings)

    run_all([threading.Thread(target=one) for _ in range(8)], timeout=90)
    assert sql("SELECT status, count(*) AS n FROM jobs GROUP BY 1") == [
        {"status": "done", "n": 200}]
    for key, seen in runs.items():
        seen.sort(key=lambda r: r[2])
        assert [n for n, _, _, _ in seen] == sorted(n for n, _, _, _ in seen), key
        for earlier, later in itertools.pairwise(seen):
            assert earlier[3] <= later[2], (key, earlier, later)   # never two at once
        assert len(seen) == 10 + len([n for n in range(10) if n % 3 == 0])



def test_a_batch_stores_each_jobs_key_and_tenant_in_its_own_row(conn, sql):
    results = pgdrain.enqueue_many(conn, [
        {"job_type": "sync", "ordering_key": "a"}, {"job_type": "sync"},
        {"job_type": "sync", "tenant": "t"}, {"job_type": "sync", "ordering_key": "b"}])
    pgdrain.enqueue_many(conn, [{"job_type": "plain"}] * 2)
    rows = sql("SELECT id, ordering_key, tenant FROM jobs ORDER BY id")
    assert [(r["ordering_key"], r["tenant"]) for r in rows] == [
        ("a", None), (None, None), (None, "t"), ("b", None), (None, None), (None, None)]
    assert [r["id"] for r in rows[:4]] == [r.id for r in results]
