"""Batch handlers against PostgreSQL (``@pgdrain.job(..., batch_size=N, batch_window=S)``):
one call gets a list of jobs; each item keeps its own outcome, attempts, backoff and policy;
the window holds a partial batch unclaimed until it closes; ordering keys, queue caps, type
rates, cancel and transactions keep their meaning per item."""

from __future__ import annotations

import time

import pytest

import pgdrain
from pgdrain import BatchResult, Discard, Snooze
from pgdrain.batch_store import batch_due, claim_batch_of_type
from pgdrain.db import connect
from pgdrain.registry import Registry
from tests.support.drains import run_drain


def batch_type(calls: list[list[int]], *, batch_size: int = 100, batch_window: float = 0,
               answer=None, **options):
    """A registry with one batch type, ``index-docs``, whose handler records each call's job
    ids and returns ``answer(jobs)`` (None: all done)."""
    registry = Registry()

    @pgdrain.job("index-docs", batch_size=batch_size, batch_window=batch_window,
                 registry=registry, **options)
    def index_docs(jobs):
        calls.append([job.id for job in jobs])
        return None if answer is None else answer(jobs)

    return registry


def flat(calls: list[list[int]]) -> list[int]:
    return [job_id for call in calls for job_id in call]


def enqueue(conn, n: int, **options) -> list[int]:
    return [pgdrain.enqueue(conn, "index-docs", {"n": i}, **options).id for i in range(n)]


def status(conn, job_id: int) -> dict:
    return pgdrain.get_job(conn, job_id)


def test_one_call_gets_up_to_batch_size_jobs_in_claim_order(conn, database_url):
    ids = enqueue(conn, 5)
    calls: list[list[int]] = []
    summary = run_drain(database_url, batch_type(calls, batch_size=3))
    assert calls == [ids[:3], ids[3:]]
    assert (summary.claimed, summary.done, summary.retried) == (5, 5, 0)
    assert {status(conn, i)["status"] for i in ids} == {"done"}


def test_a_mapping_gives_each_item_its_result(conn, database_url):
    ids = enqueue(conn, 3)
    calls: list[list[int]] = []
    run_drain(database_url, batch_type(
        calls, answer=lambda jobs: {job.id: {"indexed": job.payload["n"]} for job in jobs[:2]}))
    assert [status(conn, i)["result"] for i in ids] == [{"indexed": 0}, {"indexed": 1}, None]
    assert {status(conn, i)["status"] for i in ids} == {"done"}


def test_an_item_reported_failed_retries_alone(conn, database_url):
    ids = enqueue(conn, 3)
    calls: list[list[int]] = []

    def answer(jobs):
        if len(calls) == 1:
            return BatchResult(results={jobs[0].id: "ok"}, failures={jobs[1].id: "no shard"})
        return None

    summary = run_drain(database_url, batch_type(
        calls, answer=answer, backoff=lambda attempt, error: 0))
    # The failed item alone came back, in a batch of its own, on its second attempt.
    assert calls == [ids, [ids[1]]]
    assert (summary.done, summary.retried, summary.failed) == (3, 1, 0)
    retried = status(conn, ids[1])
    assert retried["attempts"] == 2 and "BatchItemFailed: no shard" in retried["errors"][0]["error"]
    assert [status(conn, i)["attempts"] for i in (ids[0], ids[2])] == [1, 1]
    assert status(conn, ids[0])["result"] == "ok"


def test_an_item_out_of_attempts_fails_with_its_own_error(conn, database_url):
    [a] = enqueue(conn, 1, max_attempts=1)
    [b] = enqueue(conn, 1, max_attempts=3)
    calls: list[list[int]] = []
    summary = run_drain(database_url, batch_type(
        calls, answer=lambda jobs: BatchResult(failures={a: ValueError("bad doc")})))
    assert calls == [[a, b]]
    assert (summary.done, summary.failed) == (1, 1)
    assert status(conn, a)["status"] == "failed"
    assert status(conn, a)["last_error"] == "ValueError: bad doc"
    assert status(conn, b)["status"] == "done"


def test_raising_fails_every_item_with_its_own_attempts(conn, database_url):
    [a] = enqueue(conn, 1, max_attempts=1)
    b, c = enqueue(conn, 2, max_attempts=5)
    calls: list[list[int]] = []

    def answer(jobs):
        raise RuntimeError("index down")

    summary = run_drain(database_url, batch_type(calls, answer=answer,
                                                 backoff=lambda attempt, error: 60))
    assert calls == [[a, b, c]]
    assert (summary.failed, summary.retried, summary.done) == (1, 2, 0)
    assert status(conn, a)["status"] == "failed"
    for job_id in (b, c):
        job = status(conn, job_id)
        assert (job["status"], job["attempts"]) == ("pending", 1)
        assert job["last_error"] == "RuntimeError: index down"


def test_a_report_naming_a_job_not_in_the_batch_fails_the_batch(conn, database_url):
    ids = enqueue(conn, 2)
    calls: list[list[int]] = []
    summary = run_drain(database_url, batch_type(
        calls, answer=lambda jobs: BatchResult(failures={999999: "x"}),
        backoff=lambda attempt, error: 60))
    assert summary.retried == 2
    error = status(conn, ids[0])["last_error"]
    assert "BatchReportError" in error and "999999" in error and "not a job id" in error


def test_snooze_for_the_batch_or_discard_per_item(conn, database_url):
    ids = enqueue(conn, 3)
    calls: list[list[int]] = []

    def answer(jobs):
        if len(calls) == 1:
            raise Snooze(0)
        return BatchResult(failures={jobs[0].id: Discard("spam")})

    summary = run_drain(database_url, batch_type(calls, answer=answer))
    assert calls == [ids, ids]
    assert status(conn, ids[0])["status"] == "failed"
    assert [status(conn, i)["status"] for i in ids[1:]] == ["done", "done"]
    # The snooze spent no attempt.
    assert [status(conn, i)["attempts"] for i in ids] == [1, 1, 1]
    assert (summary.done, summary.failed) == (2, 1)


def test_the_call_has_the_handlers_time_limit(conn, database_url):
    ids = enqueue(conn, 2)
    calls: list[list[int]] = []

    def answer(jobs):
        time.sleep(5)

    summary = run_drain(database_url, batch_type(calls, answer=answer, timeout=0.3,
                                                 backoff=lambda attempt, error: 60))
    assert summary.retried == 2
    assert all("HandlerTimeout" in status(conn, i)["last_error"] for i in ids)


# --- the window ---


def backdate(sql, ids, seconds: float) -> None:
    """Move these jobs' clock back: enqueued and due ``seconds`` earlier."""
    sql("UPDATE jobs SET created_at = created_at - make_interval(secs => :s), "
        "run_at = run_at - make_interval(secs => :s) WHERE id = ANY (:ids)", s=seconds, ids=ids)


def test_a_partial_batch_waits_unclaimed_until_its_window_closes(conn, sql):
    ids = enqueue(conn, 2)
    held = claim_batch_of_type(conn, job_type="index-docs", batch_size=10, batch_window=60,
                               lease_seconds=30)
    assert held.jobs == [] and 0 < held.closes_in <= 60
    # Nothing is held claimed meanwhile.
    assert {status(conn, i)["status"] for i in ids} == {"pending"}
    assert batch_due(conn, {"index-docs": (10, 60)}) == 0
    backdate(sql, ids, 61)
    assert batch_due(conn, {"index-docs": (10, 60)}) == 2
    taken = claim_batch_of_type(conn, job_type="index-docs", batch_size=10, batch_window=60,
                                lease_seconds=30)
    assert [j.id for j in taken.jobs] == ids and taken.closes_in <= 0


def test_a_full_batch_goes_at_once_and_the_rest_waits(conn):
    ids = enqueue(conn, 5)
    taken = claim_batch_of_type(conn, job_type="index-docs", batch_size=3, batch_window=60,
                                lease_seconds=30)
    assert [j.id for j in taken.jobs] == ids[:3]
    rest = claim_batch_of_type(conn, job_type="index-docs", batch_size=3, batch_window=60,
                               lease_seconds=30)
    assert rest.jobs == [] and rest.closes_in > 0


def test_a_job_due_later_starts_its_window_when_it_becomes_due(conn, sql):
    [job_id] = enqueue(conn, 1)
    # Enqueued long ago, due only now: its window begins now.
    sql("UPDATE jobs SET created_at = now() - interval '1 hour' WHERE id = :id", id=job_id)
    held = claim_batch_of_type(conn, job_type="index-docs", batch_size=10, batch_window=60,
                               lease_seconds=30)
    assert held.jobs == [] and held.closes_in > 50


def test_a_drain_leaves_a_window_longer_than_its_time_for_the_next(conn, sql, database_url):
    ids = enqueue(conn, 2)
    calls: list[list[int]] = []
    registry = batch_type(calls, batch_size=10, batch_window=120)
    summary = run_drain(database_url, registry, seconds=10)
    assert calls == [] and summary.claimed == 0 and summary.stopped.value == "empty"
    assert {status(conn, i)["status"] for i in ids} == {"pending"}
    assert {status(conn, i)["attempts"] for i in ids} == {0}
    backdate(sql, ids, 121)
    summary = run_drain(database_url, registry, seconds=10)
    assert calls == [ids] and summary.done == 2


def test_a_drain_waits_for_a_window_that_closes_in_its_time(conn, database_url):
    ids = enqueue(conn, 2)
    calls: list[list[int]] = []
    summary = run_drain(database_url, batch_type(calls, batch_size=10, batch_window=0.5),
                        seconds=20)
    assert calls == [ids] and summary.done == 2


def test_other_work_runs_while_a_batch_fills(conn, database_url):
    ids = enqueue(conn, 2)
    other = pgdrain.enqueue(conn, "other", {}).id
    calls: list[list[int]] = []
    registry = batch_type(calls, batch_size=10, batch_window=120)
    ran = []
    registry.register(pgdrain.Handler("other", lambda job: ran.append(job.id)))
    run_drain(database_url, registry, seconds=10)
    assert ran == [other] and calls == []
    assert {status(conn, i)["status"] for i in ids} == {"pending"}


# --- per-item controls ---


def test_a_transactional_batch_commits_its_writes_with_its_items_done(conn, database_url):
    conn.run("CREATE TABLE indexed (job_id bigint PRIMARY KEY)")
    ids = enqueue(conn, 3)
    registry = Registry()
    calls = []

    @pgdrain.job("index-docs", batch_size=10, transactional=True, registry=registry,
                 timeout=5, backoff=lambda attempt, error: 0)
    def index_docs(jobs, tx):
        calls.append([job.id for job in jobs])
        for job in jobs:
            tx.run("INSERT INTO indexed VALUES (:id) ON CONFLICT DO NOTHING", id=job.id)
        if len(calls) == 1:
            assert [r[0] for r in tx.run("SELECT count(*) FROM indexed")] == [3]
            raise RuntimeError("rolled back")
        if len(calls) == 2:
            return BatchResult(failures={jobs[2].id: "later"})
        return None

    summary = run_drain(database_url, registry)
    # The first call rolled back, writes and all, and every item retried; the second
    # committed its writes with two items' done, its third item retrying alone.
    assert calls == [ids, ids, [ids[2]]]
    assert [status(conn, i)["attempts"] for i in ids] == [2, 2, 3]
    assert {status(conn, i)["status"] for i in ids} == {"done"}
    assert sorted(r[0] for r in conn.run("SELECT job_id FROM indexed")) == ids
    assert (summary.done, summary.retried) == (3, 4)


def test_an_ordering_keys_later_job_waits_for_the_earlier_to_finish(conn, database_url):
    k1, k2, k3 = enqueue(conn, 3, ordering_key="doc-7")
    free = enqueue(conn, 2)
    calls: list[list[int]] = []
    run_drain(database_url, batch_type(calls, batch_size=10, timeout=5))
    # One job of a key a batch, in enqueue order, each after the one before it finished.
    assert calls == [[k1, *free], [k2], [k3]]


def test_a_capped_queue_runs_no_more_items_than_its_cap(conn, database_url):
    pgdrain.set_queue(conn, "search", max_running=2, new=True)
    ids = enqueue(conn, 5, queue="search")
    calls: list[list[int]] = []
    summary = run_drain(database_url, batch_type(calls, batch_size=10, timeout=5))
    assert max(len(c) for c in calls) <= 2 and sorted(flat(calls)) == ids
    assert summary.done == 5


def test_a_rate_counts_every_item_as_a_start(conn, database_url):
    ids = enqueue(conn, 5)
    calls: list[list[int]] = []
    summary = run_drain(database_url, batch_type(calls, batch_size=10, rate="3/h", timeout=5),
                        seconds=10)
    assert flat(calls) == ids[:3] and summary.done == 3
    assert [status(conn, i)["status"] for i in ids[3:]] == ["pending", "pending"]


def test_a_cancelled_job_is_not_run_and_one_cancelled_while_running_ends_cancelled(
        conn, database_url):
    a, b, c = enqueue(conn, 3)
    pgdrain.cancel(conn, [a])
    calls: list[list[int]] = []
    other = connect(database_url)

    def answer(jobs):
        pgdrain.cancel(other, [b])   # asked while the batch runs: reported, it ends cancelled
        return BatchResult(failures={b: "cancelled"})

    try:
        run_drain(database_url, batch_type(calls, answer=answer, timeout=5))
    finally:
        other.close()
    assert calls == [[b, c]]
    assert [status(conn, i)["status"] for i in (a, b, c)] == ["cancelled", "cancelled", "done"]


@pytest.mark.parametrize("concurrency", [1, 4])
def test_batches_on_worker_threads_and_async_handlers(conn, database_url, concurrency):
    ids = enqueue(conn, 7)
    registry = Registry()
    calls: list[list[int]] = []

    @pgdrain.job("index-docs", batch_size=3, registry=registry, timeout=5)
    async def index_docs(jobs):
        calls.append([job.id for job in jobs])
        return {job.id: job.payload["n"] * 10 for job in jobs}

    summary = run_drain(database_url, registry, concurrency=concurrency)
    assert sorted(flat(calls)) == ids and max(len(c) for c in calls) <= 3
    assert [status(conn, i)["result"] for i in ids] == [n * 10 for n in range(7)]
    assert summary.done == 7


def test_every_item_gets_its_parents_results(conn, database_url):
    registry = Registry()
    seen = {}

    @pgdrain.job("parent", registry=registry, timeout=5)
    def parent(job):
        return job.payload["n"]

    @pgdrain.job("index-docs", batch_size=10, registry=registry, timeout=5)
    def index_docs(jobs):
        seen.update({job.id: job.parent_results for job in jobs})

    parents = [pgdrain.enqueue(conn, "parent", {"n": n}).id for n in (1, 2)]
    children = [pgdrain.enqueue(conn, "index-docs", {}, depends_on=[p]).id for p in parents]
    run_drain(database_url, registry)
    assert seen == {children[0]: {parents[0]: 1}, children[1]: {parents[1]: 2}}


def test_the_due_count_counts_a_ready_batch_not_one_filling(conn, sql, database_url):
    from pgdrain.drain import PostgresStore
    from tests.support.drains import connector_to

    ids = enqueue(conn, 2)
    connector = connector_to(database_url)
    try:
        connector.open(time.monotonic() + 30)
        store = PostgresStore(connector)
        assert store.due(limit=10, queues=None) == 2   # a store that knows no batch type
        store.use_batches({"index-docs": (10, 60.0)})
        assert store.due(limit=10, queues=None) == 0   # filling: no drain is started for it
        backdate(sql, ids, 61)
        assert store.due(limit=10, queues=None) == 2
        assert store.due(limit=1, queues=None) == 1
    finally:
        connector.discard()


def test_a_claim_takes_several_full_batches_but_no_partial_one_while_it_fills(conn, sql):
    ids = enqueue(conn, 7)
    taken = claim_batch_of_type(conn, job_type="index-docs", batch_size=3, batch_window=60,
                                lease_seconds=30, take=100)
    assert [j.id for j in taken.jobs] == ids[:6]
    backdate(sql, ids[6:], 61)
    rest = claim_batch_of_type(conn, job_type="index-docs", batch_size=3, batch_window=60,
                               lease_seconds=30, take=100)
    assert [j.id for j in rest.jobs] == ids[6:]


def test_batches_of_one_are_claimed_many_at_a_time(conn, database_url):
    ids = enqueue(conn, 6)
    calls: list[list[int]] = []
    summary = run_drain(database_url, batch_type(calls, batch_size=1, timeout=5),
                        concurrency=1)
    assert calls == [[i] for i in ids] and summary.done == 6


def test_a_batch_whose_drain_died_comes_back_one_job_a_call(conn, database_url):
    """Its items were claimed together and never known to start: each is refunded, and runs
    in a batch of its own (one of them may be what killed the drain)."""
    ids = enqueue(conn, 3)
    taken = claim_batch_of_type(conn, job_type="index-docs", batch_size=10, batch_window=0,
                                lease_seconds=0.2)
    assert len(taken.jobs) == 3
    time.sleep(0.3)                                          # the drain died; leases ran out
    assert pgdrain.run_janitor(conn, pgdrain.Settings()).reclaimed == 3
    calls: list[list[int]] = []
    summary = run_drain(database_url, batch_type(calls, batch_size=10, timeout=5))
    assert sorted(calls) == [[i] for i in ids] and summary.done == 3
    assert [status(conn, i)["attempts"] for i in ids] == [1, 1, 1]
