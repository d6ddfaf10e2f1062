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
