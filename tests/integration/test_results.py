"""Results and progress against PostgreSQL: a handler's return value stored with its job
(capped, with a clear error above the cap and the job still done), progress reports written
while the handler runs, and a running handler that sees its cancel request."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import pgdrain
import pgdrain.testing as pgt
from pgdrain import Settings
from pgdrain.db import connect
from pgdrain.registry import Registry
from tests.support.drains import KEEP_HISTORY_SECONDS
from tests.support.drains import run_drain as run


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_handlers_return_value_is_the_jobs_result(database_url, conn, concurrency):
    registry = Registry()
    pgdrain.job("sum", registry=registry)(lambda job: {"total": sum(job.payload["n"]),
                                                       "note": "é\u2028\U0001f600"})
    pgdrain.job("nothing", registry=registry)(lambda job: None)
    pgdrain.job("text", registry=registry)(lambda job: "plain")

    async def fetched(job):
        await asyncio.sleep(0)
        return [1, 2.5, None, True]

    pgdrain.job("async", registry=registry)(fetched)
    ids = [pgdrain.enqueue(conn, t, p).id for t, p in (
        ("sum", {"n": [1, 2, 3]}), ("nothing", None), ("text", None), ("async", None))]
    drained = pgt.drain_all(database_url, registry=registry,
                            settings=Settings(concurrency=concurrency,
                                              retention_seconds=KEEP_HISTORY_SECONDS))
    assert drained.counts == {"done": 4} and drained.summaries[0].done == 4
    expected = [{"total": 6, "note": "é\u2028\U0001f600"}, None, "plain", [1, 2.5, None, True]]
    assert [drained.job(i).result for i in ids] == expected
    assert [pgdrain.get_job(conn, i)["result"] for i in ids] == expected


def test_a_transactional_handlers_result_commits_with_its_writes(database_url, conn, sql):
    sql("CREATE TABLE ledger (job_id bigint PRIMARY KEY)")
    registry = Registry()

    def credit(job, tx):
        tx.run("INSERT INTO ledger VALUES (:id)", id=job.id)
        return {"credited": job.id}

    pgdrain.job("credit", transactional=True, registry=registry)(credit)
    ident = pgdrain.enqueue(conn, "credit").id
    assert run(database_url, registry, concurrency=2).done == 1
    assert pgdrain.get_job(conn, ident)["result"] == {"credited": ident}
    assert sql("SELECT job_id FROM ledger") == [{"job_id": ident}]


@pytest.mark.parametrize(("value", "words"), [
    ("x" * 70_000, "result not stored: 70002 bytes of JSON, above PGDRAIN_RESULT_MAX_BYTES "
                   "(65536)"),
    ({1, 2}, "result not stored: it is not JSON"),
    (float("nan"), "result not stored: it is not JSON"),
    ("a\x00b", "result not stored: it holds a NUL character"),
])
def test_a_result_that_cannot_be_stored_leaves_the_job_done_saying_why(database_url, conn,
                                                                       value, words):
    registry = Registry()
    pgdrain.job("big", registry=registry)(lambda job: value)
    ident = pgdrain.enqueue(conn, "big").id
    summary = run(database_url, registry, concurrency=1)
    job = pgdrain.get_job(conn, ident)
    assert (summary.done, job["status"], job["result"], job["attempts"]) == (1, "done", None, 1)
    assert job["last_error"].startswith(words)


def test_progress_is_written_while_the_handler_runs(database_url, conn):
    registry, seen, release = Registry(), [], threading.Event()

    def export(job):
        job.progress(0.4, "3 of 7 files")
        release.wait(10)
        job.progress(1.0)

    pgdrain.job("export", registry=registry)(export)
    ident = pgdrain.enqueue(conn, "export").id
    drained = threading.Thread(target=run, args=(database_url, registry), daemon=True)
    drained.start()
    watcher = connect(database_url)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not seen:
            job = pgdrain.get_job(watcher, ident)
            if job["progress"] is not None:
                seen.append((job["status"], job["progress"]))
            time.sleep(0.05)
    finally:
        release.set()
        watcher.close()
        drained.join()
    assert seen == [("running", {"fraction": 0.4, "message": "3 of 7 files"})]


@pytest.mark.parametrize(("fraction", "message", "error"), [
    (1.5, None, ValueError), (-0.1, None, ValueError), (float("nan"), None, ValueError),
    ("half", None, TypeError), (True, None, TypeError), (0.5, 7, TypeError),
    (0.5, "x" * 501, ValueError), (0.5, "a\x00", ValueError),
])
def test_bad_progress_raises_in_the_handler(fraction, message, error):
    job = pgdrain.Job(1, "t", {}, 1, 3, "default", 0, *[None] * 5, "token")
    with pytest.raises(error, match="progress"):
        job.progress(fraction, message)
    assert job.control.take_progress() is None


def test_a_running_handler_sees_its_cancel_request_and_its_attempt_ends_cancelled(
        database_url, conn):
    registry, noticed = Registry(), []

    def long_sync(job):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if job.cancel_requested:
                noticed.append(job.id)
                raise RuntimeError("stopped: cancel requested")
            time.sleep(0.02)
        return "finished"

    pgdrain.job("long-sync", registry=registry)(long_sync)
    ident = pgdrain.enqueue(conn, "long-sync").id
    drained = threading.Thread(target=run, args=(database_url, registry), daemon=True)
    drained.start()
    while pgdrain.get_job(conn, ident)["status"] != "running":
        time.sleep(0.02)
    assert pgdrain.cancel(conn, [ident]) == {ident: "cancel_requested"}
    drained.join()
    job = pgdrain.get_job(conn, ident)
    assert noticed == [ident]
    assert (job["status"], job["last_error"]) == ("cancelled",
                                                  "RuntimeError: stopped: cancel requested")
