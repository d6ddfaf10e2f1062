"""Awaiting a result against PostgreSQL: ``pgdrain.wait(conn, job_id, timeout=)`` returns the
job once a concurrent drain (or a failure, a cancel) finishes it, woken by the notification
its finishing statement sent because someone waits for it; it times out with the job as it
stands; it keeps waiting through a job's waits; a finish it does not wait for neither wakes it
nor costs a notification; it leaves nothing behind, and the janitor forgets what a dead
waiter left. What a waiter costs is counted statement by statement."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import pytest

import pgdrain
from pgdrain import waiting
from pgdrain.db import Session, connect
from pgdrain.models import Finish
from pgdrain.registry import Registry
from tests.support.drains import run_drain

LONG = 120.0  # a timeout no test reaches: each returns when the job finishes


class CountingSession(Session):
    """A session that counts the statements it sends, by name."""

    def __init__(self, conn: Any):
        super().__init__(conn)
        self.sent: list[str] = []

    def _execute(self, query: str, params: dict[str, Any]) -> Any:
        self.sent.append(query)
        return super()._execute(query, params)


def _waiters(sql) -> list[dict]:
    return sql("SELECT job_id, pid FROM pgdrain_waiters ORDER BY job_id")


def _when_waited_for(database_url: str, ident: int, then: Callable[[Any], None]
                     ) -> threading.Thread:
    """A thread that, on a connection of its own, waits until someone waits for job
    ``ident`` (its row in pgdrain_waiters), then calls ``then(conn)``."""

    def run() -> None:
        conn = connect(database_url)
        try:
            for _ in range(6000):  # a minute at most
                if conn.run("SELECT 1 FROM pgdrain_waiters WHERE job_id = :id", id=ident):
                    break
                threading.Event().wait(0.01)
            then(conn)
        finally:
            conn.close()

    return threading.Thread(target=run)


def _claimed(conn, ident: int) -> pgdrain.Job:
    jobs = pgdrain.claim(conn, batch_size=10, lease_seconds=60)
    return next(j for j in jobs if j.id == ident)


def _wait_beside(thread: threading.Thread, conn, ident: int, **kwargs) -> dict:
    thread.start()
    try:
        return pgdrain.wait(conn, ident, **kwargs)
    finally:
        thread.join(60)


def test_wait_returns_the_result_once_a_concurrent_drain_finishes_the_job(
        database_url, conn, sql):
    registry = Registry()

    @pgdrain.job("add", registry=registry)
    def add(job: pgdrain.Job) -> int:
        return int(job.payload["a"] + job.payload["b"])

    job = pgdrain.enqueue(conn, "add", {"a": 1, "b": 2})
    before = waiting.counts.copy()
    drain = _when_waited_for(database_url, job.id, lambda _: run_drain(database_url, registry))
    found = _wait_beside(drain, conn, job.id, timeout=LONG)
    assert (found["id"], found["status"], found["result"]) == (job.id, "done", 3)
    # Woken by the notification the drain's finish sent, not found by the backstop's read.
    assert waiting.counts["notified"] - before["notified"] == 1
    # Nothing left behind: no waiter row, no channel listened to.
    assert _waiters(sql) == []
    assert conn.run("SELECT count(*) FROM pg_listening_channels()") == [[0]]


def test_wait_returns_a_failed_job_with_its_error(database_url, conn, connect_to):
    job = pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"}, max_attempts=1)
    worker = connect_to()
    claimed = _claimed(worker, job.id)
    before = waiting.counts.copy()
    failer = _when_waited_for(database_url, job.id,
                              lambda c: pgdrain.fail(c, claimed, "the mail server said no"))
    found = _wait_beside(failer, conn, job.id, timeout=LONG)
    assert (found["status"], found["last_error"]) == ("failed", "the mail server said no")
    assert waiting.counts["notified"] - before["notified"] == 1


def test_wait_returns_a_cancelled_job(database_url, conn):
    job = pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"})
    before = waiting.counts.copy()
    canceller = _when_waited_for(database_url, job.id, lambda c: pgdrain.cancel(c, [job.id]))
    found = _wait_beside(canceller, conn, job.id, timeout=LONG)
    assert found["status"] == "cancelled"
    assert waiting.counts["notified"] - before["notified"] == 1


def test_a_retry_is_not_a_finish_the_wait_goes_on_to_the_end(database_url, conn):
    job = pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"}, max_attempts=2)

    def retry_then_finish(c) -> None:
        pgdrain.retry(c, _claimed(c, job.id), "try again", 0)
        pgdrain.complete(c, [_claimed(c, job.id)])

    found = _wait_beside(_when_waited_for(database_url, job.id, retry_then_finish), conn,
                         job.id, timeout=LONG)
    assert (found["status"], found["attempts"], found["last_error"]) == ("done", 2, "try again")


def test_a_job_already_finished_is_returned_at_once(conn, connect_to):
    job = pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"})
    pgdrain.cancel(conn, [job.id])
    counted = CountingSession(conn)
    assert pgdrain.wait(counted, job.id, timeout=0)["status"] == "cancelled"
    assert counted.sent == ["waiter_listen", "waiter_register", "job_get",
                            "waiter_unregister", "waiter_unlisten"]


def test_the_timeout_raises_wait_timeout_with_the_job_as_it_stands(conn, sql):
    job = pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"})
    with pytest.raises(pgdrain.WaitTimeout) as raised:
        pgdrain.wait(conn, job.id, timeout=0.2)
    assert isinstance(raised.value, TimeoutError) and isinstance(raised.value, pgdrain.PgdrainError)
    assert (raised.value.job["id"], raised.value.job["status"]) == (job.id, "pending")
    assert str(raised.value) == f"job {job.id} is still pending"
    assert _waiters(sql) == []


def test_a_child_waiting_for_its_parent_is_not_finished(conn):
    parent = pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"})
    child = pgdrain.enqueue(conn, "send-email", {"to": "b@example.com"},
                            depends_on=[parent.id])
    with pytest.raises(pgdrain.WaitTimeout) as raised:
        pgdrain.wait(conn, child.id, timeout=0.1)
    assert raised.value.job["status"] == "waiting"


def test_a_finish_nobody_waits_for_sends_no_notification_and_another_jobs_does_not_wake_it(
        database_url, conn, connect_to, sql):
    mine, other, unwaited = (pgdrain.enqueue(conn, "send-email", {"n": n}) for n in range(3))
    worker = connect_to()
    jobs = {j.id: j for j in pgdrain.claim(worker, batch_size=10, lease_seconds=60)}
    listener = connect_to()
    listener.run("LISTEN pgdrain_wait")

    def finish_others_then_mine(c) -> None:
        # Someone else waits for `other` (a row of a backend that is not this waiter's).
        c.run("INSERT INTO pgdrain_waiters (job_id, pid) VALUES (:id, 0)", id=other.id)
        pgdrain.complete(c, [jobs[unwaited.id]])
        pgdrain.complete(c, [jobs[other.id]])
        pgdrain.complete(c, [jobs[mine.id]])

    before = waiting.counts.copy()
    found = _wait_beside(_when_waited_for(database_url, mine.id, finish_others_then_mine),
                         conn, mine.id, timeout=LONG)
    assert found["status"] == "done"
    assert waiting.counts["notified"] - before["notified"] == 1
    # What was sent: one notification per waited job's finish, none for the unwaited one.
    listener.run("SELECT 1")
    sent = sorted(int(n[2]) for n in listener.notifications if n[1] == "pgdrain_wait")
    assert sent == sorted([other.id, mine.id])
    assert _waiters(sql) == [{"job_id": other.id, "pid": 0}]


def test_done_rows_not_kept_are_kept_for_their_waiter(database_url, conn, connect_to):
    job = pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"})
    worker = connect_to()
    claimed = _claimed(worker, job.id)
    forgetter = _when_waited_for(
        database_url, job.id, lambda c: pgdrain.finish_many(c, [Finish.done(claimed, forget=True)]))
    assert _wait_beside(forgetter, conn, job.id, timeout=LONG)["status"] == "done"


def test_a_waiter_reads_the_job_at_most_once_a_second(conn):
    """The cost rule: between notifications a waiter runs no statement but the backstop's
    status read, at most one a second (counted as sent, whatever the machine's speed)."""
    job = pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"})
    counted = CountingSession(conn)
    with pytest.raises(pgdrain.WaitTimeout):
        pgdrain.wait(counted, job.id, timeout=2.5)
    reads = counted.sent.count("waiter_status")
    assert reads <= math.ceil(2.5 / waiting.RECHECK_SECONDS)
    assert len(counted.sent) == reads + 5  # listen, register, the last read, unregister, unlisten


def test_a_connection_in_a_transaction_polls_and_still_sees_the_finish(
        database_url, conn, connect_to):
    """In a transaction no notification arrives (and a registration would not be seen): the
    wait reads the status by itself, each statement seeing what committed before it."""
    job = pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"})
    before = waiting.counts.copy()
    other = connect_to()
    canceller = threading.Thread(target=pgdrain.cancel, args=(other, [job.id]))
    conn.run("BEGIN")
    try:
        canceller.start()
        assert pgdrain.wait(conn, job.id, timeout=LONG)["status"] == "cancelled"
    finally:
        canceller.join(60)
        conn.run("ROLLBACK")
    assert waiting.counts["polled"] - before["polled"] == 1


def test_an_unknown_id_and_bad_timeouts_are_refused(conn, sql):
    with pytest.raises(pgdrain.InvalidJobId, match="no job 999999"):
        pgdrain.wait(conn, 999999, timeout=1)
    with pytest.raises(pgdrain.InvalidJobId):
        pgdrain.wait(conn, -1)
    job = pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"})
    for bad in (-1, math.nan, math.inf, 901, True, "5", None):
        with pytest.raises(ValueError, match="timeout must be a number of seconds from 0 to 900"):
            pgdrain.wait(conn, job.id, timeout=bad)
    assert _waiters(sql) == []


def test_the_janitor_forgets_waiters_whose_backend_is_gone(conn, sql):
    job = pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"})
    sql("INSERT INTO pgdrain_waiters (job_id, pid) VALUES (:id, 0)", id=job.id)
    alive = sql("SELECT pg_backend_pid() AS pid")[0]["pid"]
    sql("INSERT INTO pgdrain_waiters (job_id, pid) VALUES (:id, :pid)", id=job.id, pid=alive)
    assert pgdrain.run_janitor(conn, pgdrain.Settings()).ran
    assert _waiters(sql) == [{"job_id": job.id, "pid": alive}]


def test_listen_false_polls_for_a_pooler(conn, sql):
    """Behind a pooler in transaction mode a LISTEN reaches another client's backend:
    ``listen=False`` listens to nothing and reads the status by itself (registered, so that a
    done job is kept for it)."""
    job = pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"})
    pgdrain.cancel(conn, [job.id])
    counted = CountingSession(conn)
    assert pgdrain.wait(counted, job.id, timeout=1, listen=False)["status"] == "cancelled"
    assert counted.sent == ["waiter_register", "job_get", "waiter_unregister"]
    assert _waiters(sql) == []


def test_a_polling_waiter_gets_its_done_job_though_done_rows_are_not_kept(
        database_url, conn, connect_to, sql):
    """At PGDRAIN_RETENTION_SECONDS=0 a done job's row goes at its finish, and the janitor
    purges any done row left: neither takes one a polling waiter (listen=False) waits for."""
    job = pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"})
    worker = connect_to()
    claimed = _claimed(worker, job.id)

    def finish_then_purge(other) -> None:
        pgdrain.finish_many(other, [Finish.done(claimed, forget=True)])
        assert pgdrain.run_janitor(other, pgdrain.Settings(retention_seconds=0)).ran

    purger = _when_waited_for(database_url, job.id, finish_then_purge)
    found = _wait_beside(purger, conn, job.id, timeout=LONG, listen=False)
    assert (found["id"], found["status"]) == (job.id, "done")
    assert _waiters(sql) == []
