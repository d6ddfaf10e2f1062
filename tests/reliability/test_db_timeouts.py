"""No database wait outlives the invocation's time left (issue: faults, item 4).

Before, a drain with a 6 s context whose network fell silent mid-batch was still blocked at
46 s; a row lock held by another transaction made the done write wait 21 s; ``LOCK TABLE jobs``
held it 20 s. In Lambda that is an invocation killed at its timeout. Now every connection has
socket timeouts and, per invocation, ``statement_timeout`` and ``lock_timeout`` from the time
left: the drain returns before its deadline with a summary that says what happened, and the
enqueue function answers 503 before its own. What the drain did not record comes back when the
leases expire, and is not charged.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest

import pgdrain
from pgdrain.db import Session, connect
from pgdrain.errors import DatabaseTimeout
from pgdrain_dev.context import LambdaContext
from tests.functions import conftest as function_fixtures
from tests.support import jobs as test_jobs
from tests.support.functions import load_event
from tests.support.proxy import SilentProxy

function_env = function_fixtures.function_env
load_function = function_fixtures.load_function


@pytest.fixture
def proxy(database_url: str) -> Iterator[SilentProxy]:
    silent = SilentProxy(database_url)
    try:
        yield silent
    finally:
        silent.close()


@pytest.fixture
def other_session(connect_to):
    """A second session that holds locks in an open transaction, rolled back at the end."""
    session = connect_to()
    yield session
    session.run("ROLLBACK")


def _timed(app, event, timeout: float) -> tuple[dict, float]:
    context = LambdaContext(timeout_seconds=timeout)
    result = app.lambda_handler(event, context)
    remaining = context.get_remaining_time_in_millis() / 1000
    print(f"RELIABILITY timeouts: {timeout:g} s context, returned with {remaining:.2f} s left")
    return result, remaining


def _waiting_on_locks(sql) -> list[dict]:
    return sql("SELECT pid, query FROM pg_stat_activity WHERE datname = current_database() "
               "AND wait_event_type = 'Lock'")


def _finish_everything(load_function, sql) -> list[dict]:
    """Leases run out (as time would); a drain with a healthy connection finishes the rest."""
    sql("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
        "WHERE status = 'running'")
    summary = load_function("drain").lambda_handler({}, LambdaContext())
    assert summary["stopped"] == "empty", summary
    return sql("SELECT status, attempts, lost_claims FROM jobs ORDER BY id")


def test_a_partition_mid_batch_ends_the_drain_before_its_deadline(
        load_function, conn, sql, proxy):
    pgdrain.enqueue_many(conn, [{"job_type": "test-quick", "payload": {"seconds": 0.2}}] * 20)
    app = load_function("drain", DATABASE_URL=proxy.url(), PGDRAIN_BATCH_SIZE="5")

    def partition_once_jobs_ran() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if sql("SELECT count(*) AS n FROM jobs WHERE status = 'done'")[0]["n"] >= 3:
                break
            time.sleep(0.02)
        proxy.partition()

    watcher = threading.Thread(target=partition_once_jobs_ran)
    watcher.start()
    started = time.monotonic()
    summary, remaining = _timed(app, {}, 4)
    watcher.join()
    assert remaining > 0, f"returned {time.monotonic() - started:.2f} s into a 4 s context"
    assert (summary["stopped"], summary["error"]) == (
        "database_error", "the database did not answer within the time left"), summary

    proxy.heal()
    rows = _finish_everything(load_function, sql)
    # Everything done, nothing charged for the lost claim: each ran on its first attempt.
    assert {(r["status"], r["attempts"]) for r in rows} == {("done", 1)}


def test_a_silent_database_fails_a_cold_connect_within_the_time_left(load_function, proxy):
    proxy.partition()  # it accepts TCP and never answers
    app = load_function("drain", DATABASE_URL=proxy.url())
    summary, remaining = _timed(app, {}, 3)
    assert remaining > 0
    assert (summary["stopped"], summary["error"]) == (
        "database_error", "could not connect to the database")


@contextmanager
def _deadline_session(url: str, seconds: float) -> Iterator[Session]:
    conn = connect(url)
    try:
        session = Session(conn, prepare=True)
        session.deadline = time.monotonic() + seconds
        yield session
    finally:
        with suppress(Exception):
            conn.close()


def test_a_statement_of_two_exchanges_gives_up_at_its_deadline_not_one_timeout_later(proxy):
    # A prepared statement's first run is two exchanges (Parse, then Bind/Execute), each
    # answered 0.6 s late: 1.2 s in all. A timeout of "the time left" set once before the
    # statement let the second read wait a whole second again, and the answer came back
    # 0.2 s past the deadline as if in time.
    with _deadline_session(proxy.url(), 1.0) as session:
        proxy.slow_answers(0.6)
        began = time.monotonic()
        with pytest.raises(DatabaseTimeout):
            session.rows("connection_ping")
    gave_up = time.monotonic() - began
    print(f"RELIABILITY timeouts: a 1 s statement answered in 1.2 s gave up after {gave_up:.3f} s")
    assert gave_up < 1.0 + 0.3


def test_an_answer_that_trickles_in_cannot_hold_a_statement_past_its_deadline(proxy):
    # One byte every 50 ms: each read gets something, so no read ever waits a whole timeout;
    # the ping's answer (about 80 bytes) would take 4 s.
    with _deadline_session(proxy.url(), 1.0) as session:
        proxy.slow_answers(0.05, piece=1)
        began = time.monotonic()
        with pytest.raises(DatabaseTimeout):
            session.rows("connection_ping")
        gave_up = time.monotonic() - began
    assert gave_up < 1.0 + 0.3


def test_a_database_that_trickles_its_answers_cannot_hold_the_drain(load_function, conn,
                                                                    proxy):
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 5)
    app = load_function("drain", DATABASE_URL=proxy.url())
    _timed(app, {}, 5)  # warm: its connection goes through the proxy
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 5)
    proxy.slow_answers(0.05, piece=1)
    summary, remaining = _timed(app, {}, 3)
    assert remaining > 0, summary
    assert (summary["stopped"], summary["error"]) == (
        "database_error", "the database did not answer within the time left"), summary


def test_a_row_lock_held_elsewhere_cannot_hold_the_done_write(load_function, conn, sql):
    locker = pgdrain.enqueue(conn, "test-lock-own-row").id
    pgdrain.enqueue(conn, "test-noop")
    app = load_function("drain")
    try:
        summary, remaining = _timed(app, {}, 8)
        assert remaining > 5  # the lock wait gave up after a tenth of the time left
        assert summary["stopped"] == "database_error", summary
        assert summary["error"].startswith("a lock wait ran out of the time left"), summary
        assert _waiting_on_locks(sql) == []  # and the server stopped waiting too
    finally:
        for held in test_jobs.HELD:
            held.close()
        test_jobs.HELD.clear()
    rows = _finish_everything(load_function, sql)
    by_id = {r: row for r, row in zip(sorted([locker, locker + 1]), rows, strict=True)}
    assert by_id[locker]["status"] == "done" and by_id[locker]["attempts"] == 1


def test_lock_table_jobs_cannot_hold_the_drain(load_function, conn, sql, other_session):
    pgdrain.enqueue(conn, "test-noop")
    other_session.run("BEGIN")
    other_session.run("LOCK TABLE jobs")
    app = load_function("drain")
    summary, remaining = _timed(app, load_event("drain_api.json"), 8)
    assert remaining > 5
    assert summary["statusCode"] == 503
    body = json.loads(summary["body"])
    assert body["error"].startswith("the drain stopped: a lock wait ran out"), body
    assert body["summary"]["claimed"] == 0
    assert _waiting_on_locks(sql) == []


def test_without_server_bounds_the_client_still_returns_in_time(
        load_function, conn, sql, other_session):
    # Behind a pooler (prepared statements off) no session setting is made: the socket
    # timeout alone must return the drain before its deadline.
    pgdrain.enqueue(conn, "test-noop")
    other_session.run("BEGIN")
    other_session.run("LOCK TABLE jobs")
    app = load_function("drain", PGDRAIN_PREPARED_STATEMENTS="false")
    summary, remaining = _timed(app, {}, 3)
    assert remaining > 0
    assert (summary["stopped"], summary["error"]) == (
        "database_error", "the database did not answer within the time left"), summary


def test_the_enqueue_function_answers_503_before_its_deadline(load_function, conn, sql,
                                                              other_session):
    other_session.run("BEGIN")
    other_session.run("LOCK TABLE jobs")
    app = load_function("enqueue")
    response, remaining = _timed(app, load_event("enqueue_single.json"), 3)
    assert remaining > 0
    assert response["statusCode"] == 503
    body = json.loads(response["body"])
    assert set(body) == {"error", "request_id"}, body
    assert response["multiValueHeaders"]["Retry-After"] == ["1"]
    other_session.run("ROLLBACK")
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 0


def test_the_enqueue_function_survives_a_partition(load_function, proxy):
    app = load_function("enqueue", DATABASE_URL=proxy.url())
    response, _ = _timed(app, load_event("enqueue_single.json"), 5)
    assert response["statusCode"] == 201  # warm: its connection goes through the proxy
    proxy.partition()
    response, remaining = _timed(app, load_event("enqueue_single.json"), 3)
    assert remaining > 0
    assert response["statusCode"] == 503


def test_a_connection_dropped_mid_invocation_comes_back_bounded(load_function, conn, sql):
    # A transactional handler overruns: the drain drops its connection (the server rolls the
    # handler back), and reconnects to record the timeout. That write meets a row lock held
    # elsewhere: the new connection must be bounded like the first, or the drain waits for
    # the lock past its deadline.
    pgdrain.enqueue(conn, "test-lock-then-hang")
    app = load_function("drain")
    try:
        summary, remaining = _timed(app, {}, 8)
    finally:
        for held in test_jobs.HELD:
            held.close()
        test_jobs.HELD.clear()
    assert remaining > 4, summary  # 1 s handler limit, then a lock wait of at most ~1 s
    assert (summary["stopped"], summary["error"]) == (
        "database_error", "a lock wait ran out of the time left (SQLSTATE 55P03)"), summary


def test_a_secret_endpoint_that_never_answers_cannot_hold_the_drain(load_function, monkeypatch):
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept())
            except OSError:
                return

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    from pgdrain.aws import credentials

    credentials.clear_cache()
    for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
                        "AWS_DEFAULT_REGION": "eu-west-1",
                        "AWS_ENDPOINT_URL_SECRETS_MANAGER":
                            f"http://127.0.0.1:{listener.getsockname()[1]}"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("DATABASE_URL")
    try:
        app = load_function("drain", DB_SECRET_ARN="arn:aws:secretsmanager:eu-west-1:0:secret:x")
        summary, remaining = _timed(app, {}, 3)
    finally:
        with suppress(OSError):  # wakes the accept (a close alone leaves it blocked)
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        acceptor.join(5)
        for sock, _ in accepted:  # the drain gave up on them: closed here, not by the GC
            sock.close()
        credentials.clear_cache()
    assert remaining > 0
    assert (summary["stopped"], summary["error"]) == (
        "database_error", "could not connect to the database")
