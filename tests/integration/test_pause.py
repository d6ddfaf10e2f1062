"""Pause and resume a queue, against PostgreSQL: a paused queue keeps accepting jobs and no
drain claims from it (across 1,000 drains, and from the moment the pause commits while drains
race it), running jobs finish, fan-out and continuation do not chase its jobs, and resume lets
them run."""

from __future__ import annotations

import threading
import time

import pytest

import pgdrain
from pgdrain import Settings
from pgdrain.db import Connector, connect
from pgdrain.drain import drain
from pgdrain.registry import Registry
from tests.support.drains import KEEP_HISTORY_SECONDS, clock, run_all


def noop_registry() -> Registry:
    registry = Registry()
    pgdrain.job("noop", registry=registry)(lambda job: None)
    return registry


def test_a_paused_queue_accepts_jobs_and_no_claim_takes_them(conn, sql):
    pgdrain.enqueue(conn, "noop", queue="emails")
    state = pgdrain.pause(conn, "emails")
    assert (state["queue"], state["paused"]) == ("emails", True)
    held = pgdrain.enqueue(conn, "noop", queue="emails").id
    other = pgdrain.enqueue(conn, "noop").id
    assert [j.id for j in pgdrain.claim(conn, batch_size=10, lease_seconds=60)] == [other]
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60,
                         queues=["emails"]) == []
    assert set(pgdrain.paused_queues(conn)) == {"emails"}
    # Pausing again keeps the first pause's time.
    assert pgdrain.pause(conn, "emails")["paused_at"] == state["paused_at"]
    assert pgdrain.resume(conn, "emails")["paused"] is False
    assert pgdrain.paused_queues(conn) == {}
    claimed = {j.id for j in pgdrain.claim(conn, batch_size=10, lease_seconds=60)}
    assert held in claimed and len(claimed) == 2


def test_a_running_job_of_a_paused_queue_finishes(conn):
    ident = pgdrain.enqueue(conn, "noop", queue="emails").id
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    pgdrain.pause(conn, "emails")
    assert pgdrain.complete(conn, [job]).ids == (ident,)
    assert pgdrain.get_job(conn, ident)["status"] == "done"


def test_a_job_to_claim_alone_waits_for_its_paused_queue_too(conn, sql):
    ident = pgdrain.enqueue(conn, "noop", queue="emails").id
    sql("UPDATE jobs SET lost_claims = 1 WHERE id = :id", id=ident)
    pgdrain.pause(conn, "emails")
    from pgdrain.store import claim_alone

    assert claim_alone(conn, lease_seconds=60) is None
    pgdrain.resume(conn, "emails")
    assert claim_alone(conn, lease_seconds=60).id == ident


def test_unknown_and_invalid_queues_are_refused_and_change_nothing(conn, sql):
    with pytest.raises(pgdrain.UnknownQueue, match="no queue 'emials': no job names it"):
        pgdrain.pause(conn, "emials")
    with pytest.raises(pgdrain.UnknownQueue):
        pgdrain.resume(conn, "emials")
    for bad in ("", "   ", "x" * 201, "a\x00b", "\ud800", None, 7):
        with pytest.raises(pgdrain.InvalidJobError, match="queue"):
            pgdrain.pause(conn, bad, new=True)
    assert sql("SELECT count(*) AS n FROM pgdrain_queues") == [{"n": 0}]
    # A queue before its first job, said to be new on purpose.
    assert pgdrain.pause(conn, "launch-day", new=True)["paused"] is True
    pgdrain.enqueue(conn, "noop", queue="launch-day")
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []


class Launches:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def prepare(self) -> None:
        pass

    def launch(self, count: int, reason: str) -> int:
        self.reasons += [reason] * count
        return count


def test_a_paused_backlog_starts_no_drains(database_url, conn):
    # Counted as due, a paused backlog would make every drain continue itself for ever.
    for _ in range(50):
        pgdrain.enqueue(conn, "noop", queue="emails")
    pgdrain.pause(conn, "emails")
    launches = Launches()
    connector = Connector(lambda timeout=None: connect(database_url, timeout=timeout))
    try:
        summary = drain(connector, noop_registry(), Settings(max_drains=4, concurrency=2,
                                                          retention_seconds=KEEP_HISTORY_SECONDS),
                        time_left=clock(30), launcher=launches)
    finally:
        connector.discard()
    assert (summary.claimed, summary.stopped, launches.reasons) == (0, "empty", [])
    assert pgdrain.backlog(conn).queues_paused == 1


def test_a_paused_queue_is_never_claimed_across_a_thousand_drains(database_url, conn, sql):
    """8 threads run 1,000 drains in all (each warm, like a Lambda container) while 2 more
    enqueue into a paused queue and an open one; not one paused job is ever claimed."""
    for _ in range(200):
        pgdrain.enqueue(conn, "noop", queue="paused")
        pgdrain.enqueue(conn, "noop", queue="open")
    pgdrain.pause(conn, "paused")
    registry, left, lock = noop_registry(), [1000], threading.Lock()

    def drains() -> None:
        connector = Connector(lambda timeout=None: connect(database_url, timeout=timeout))
        try:
            while True:
                with lock:
                    if left[0] == 0:
                        return
                    left[0] -= 1
                drain(connector, registry, Settings(batch_size=5, max_jobs=10,
                                                    retention_seconds=KEEP_HISTORY_SECONDS),
                      time_left=clock(30))
        finally:
            connector.discard()

    def enqueuer(queue: str) -> None:
        c = connect(database_url)
        try:
            while left[0] > 0:
                pgdrain.enqueue(c, "noop", queue=queue)
        finally:
            c.close()

    threads = [threading.Thread(target=drains) for _ in range(8)] + [
        threading.Thread(target=enqueuer, args=(q,)) for q in ("paused", "open")]
    run_all(threads)
    rows = sql("SELECT queue, status, count(*) AS n, max(attempts) AS tries FROM jobs "
               "GROUP BY queue, status ORDER BY queue, status")
    paused = [r for r in rows if r["queue"] == "paused"]
    assert [(r["status"], r["tries"]) for r in paused] == [("pending", 0)]
    assert paused[0]["n"] >= 200
    assert any(r["queue"] == "open" and r["status"] == "done" and r["n"] >= 200 for r in rows)


def test_no_claim_starting_after_the_pause_commits_takes_the_queue(database_url, conn, sql):
    """Drains race a pause: every job of the queue they took was claimed by a claim that began
    before the pause committed."""
    for _ in range(3000):
        pgdrain.enqueue(conn, "noop", queue="emails")
    registry, stop = noop_registry(), threading.Event()

    def drains() -> None:
        connector = Connector(lambda timeout=None: connect(database_url, timeout=timeout))
        try:
            while not stop.is_set():
                # Done rows kept: each claim's row is the evidence of when it began.
                drain(connector, registry, Settings(batch_size=5, max_jobs=5,
                                                    retention_seconds=KEEP_HISTORY_SECONDS),
                      time_left=clock(30))
        finally:
            connector.discard()

    threads = [threading.Thread(target=drains) for _ in range(6)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 60
        while sql("SELECT count(*) AS n FROM jobs WHERE status <> 'pending'")[0]["n"] < 100:
            assert time.monotonic() < deadline, "the drains claimed nothing in 60 s"
            threading.Event().wait(0.01)
        pgdrain.pause(conn, "emails")
        [after] = sql("SELECT clock_timestamp() AS t")
        threading.Event().wait(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join()
    [late] = sql("SELECT count(*) AS n FROM jobs WHERE claimed_at >= :t", t=after["t"])
    assert late["n"] == 0
    assert sql("SELECT count(*) AS n FROM jobs WHERE status = 'pending'")[0]["n"] > 0


def test_beside_a_paused_backlog_the_open_queues_are_claimed_in_claim_order(conn, sql):
    # Some queue paused, the claim reads queue by queue: the batch is still the first jobs of
    # all open queues together, in (priority, run_at, id) order, and counted as such.
    sql("INSERT INTO jobs (job_type, queue, run_at) "
        "SELECT 'noop', 'held', now() - interval '1 hour' FROM generate_series(1, 500)")
    pgdrain.pause(conn, "held")
    ids = {q: [pgdrain.enqueue(conn, "noop", queue=q, priority=p).id for p in (5, 1, 3)]
           for q in ("a", "b", "capped")}
    pgdrain.set_queue(conn, "capped", max_running=5)
    from pgdrain.store import due_count
    assert due_count(conn, limit=100) == (6, True)
    first = pgdrain.claim(conn, batch_size=4, lease_seconds=60)
    assert [j.id for j in first] == [ids["a"][1], ids["b"][1], ids["a"][2], ids["b"][2]]
    rest = pgdrain.claim(conn, batch_size=4, lease_seconds=60, queues=["b", "held"])
    assert [j.id for j in rest] == [ids["b"][0]]
    assert due_count(conn, limit=100) == (1, True)
