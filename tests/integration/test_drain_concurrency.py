"""The concurrent drain against PostgreSQL: transactional handlers on pooled connections of
their own (exactly once), handlers that sleep, block on a socket or ignore their time limit,
and the deadline with all of them."""

from __future__ import annotations

import socket
import threading
import time

import pytest

import pgdrain
from pgdrain.db import Connector, connect
from pgdrain.drain import drain
from pgdrain.errors import HandlerTimeout
from pgdrain.registry import Registry
from tests.support.drains import KEEP_HISTORY_SECONDS


def clock(seconds: float):
    deadline = time.monotonic() + seconds
    return lambda: deadline - time.monotonic()


@pytest.fixture
def connector(database_url):
    connector = Connector(lambda timeout=None: connect(database_url, timeout=timeout))
    yield connector
    connector.discard()


def run(connector, registry, seconds=30.0, **settings):
    defaults = {"concurrency": 10, "safety_margin_seconds": 0.5,
                "retention_seconds": KEEP_HISTORY_SECONDS,
                "backoff": pgdrain.Backoff(60, 60, jitter=0)}
    return drain(connector, registry, pgdrain.Settings(**{**defaults, **settings}),
                 time_left=clock(seconds))


def test_transactional_handlers_run_at_once_on_their_own_connections(connector, conn, sql):
    sql("CREATE TABLE effects (job_id bigint PRIMARY KEY, backend int)")
    registry, backends = Registry(), set()

    @pgdrain.job("write", transactional=True, registry=registry)
    def write(job, tx):
        [[pid]] = tx.run("SELECT pg_backend_pid()")
        backends.add(pid)
        tx.run("INSERT INTO effects VALUES (:id, :pid)", id=job.id, pid=pid)
        time.sleep(0.05)
        if job.payload.get("fail"):
            raise RuntimeError("roll my insert back")

    ids = [pgdrain.enqueue(conn, "write", {"fail": i % 5 == 0}).id for i in range(20)]
    summary = run(connector, registry, pool_size=3)
    assert (summary.done, summary.retried) == (16, 4)
    # Their writes committed with their done, or rolled back with their failure.
    done = {r["id"] for r in sql("SELECT id FROM jobs WHERE status = 'done'")}
    assert {r["job_id"] for r in sql("SELECT job_id FROM effects")} == done
    assert len(done) == 16 and set(ids) >= done
    # At most the pool's three connections, none of them the drain's own.
    [[own]] = connector.session().conn.run("SELECT pg_backend_pid()")
    assert 1 < len(backends) <= 3 and own not in backends


def test_a_transactional_handler_over_its_limit_is_rolled_back_and_retried(
        connector, conn, sql):
    sql("CREATE TABLE effects (job_id bigint PRIMARY KEY)")
    registry = Registry()

    @pgdrain.job("stuck-in-sql", transactional=True, timeout=0.5, registry=registry)
    def stuck(job, tx):
        tx.run("INSERT INTO effects VALUES (:id)", id=job.id)
        tx.run("SELECT pg_sleep(30)")  # blocked in the server: its connection is closed

    ident = pgdrain.enqueue(conn, "stuck-in-sql", {}).id
    started = time.monotonic()
    summary = run(connector, registry)
    assert time.monotonic() - started < 10
    assert (summary.retried, summary.abandoned) == (1, 0)
    assert sql("SELECT count(*) AS n FROM effects")[0]["n"] == 0
    [job] = sql("SELECT status, attempts, last_error FROM jobs WHERE id = :id", id=ident)
    assert (job["status"], job["attempts"]) == ("pending", 1)
    assert job["last_error"].startswith("HandlerTimeout")


def test_blocked_and_stubborn_handlers_never_hold_the_drain_past_its_deadline(
        connector, conn, sql):
    registry, release, opened = Registry(), threading.Event(), []
    listener = socket.create_server(("127.0.0.1", 0))  # accepts, never answers

    @pgdrain.job("blocked", timeout=0.5, registry=registry)
    def blocked(job):
        s = socket.create_connection(listener.getsockname())
        opened.append(s)  # the test closes it
        s.recv(1)  # no timeout: only an answer would end this

    @pgdrain.job("stubborn", timeout=0.5, registry=registry)
    def stubborn(job):
        while not release.is_set():
            try:
                time.sleep(0.01)
            except HandlerTimeout:
                continue

    @pgdrain.job("quick", registry=registry)
    def quick(job):
        pass

    blocked_id = pgdrain.enqueue(conn, "blocked", {}).id
    stubborn_id = pgdrain.enqueue(conn, "stubborn", {}).id
    quick_ids = [pgdrain.enqueue(conn, "quick", {}).id for _ in range(20)]
    left = clock(4.0)
    try:
        summary = run(connector, registry, seconds=4.0)
        returned_with = left()
        assert returned_with > 0  # lambda_handler would return before its deadline
        assert (summary.done, summary.retried, summary.abandoned) == (20, 2, 2)
        rows = {r["id"]: r for r in sql("SELECT id, status, attempts, last_error FROM jobs")}
        for ident in (blocked_id, stubborn_id):
            assert (rows[ident]["status"], rows[ident]["attempts"]) == ("pending", 1)
            assert rows[ident]["last_error"].startswith("HandlerTimeout")
        assert all(rows[i]["status"] == "done" for i in quick_ids)
    finally:
        release.set()
        for s in opened:
            s.shutdown(socket.SHUT_RDWR)  # the runaway's recv returns
            s.close()
        listener.close()
