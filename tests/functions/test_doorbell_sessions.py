"""The doorbell and the application's own sessions (issue "Faults in the seams", item 2).

``pgdrain.aws.ring(conn)`` on a DB-API connection, right after ``conn.commit()`` as the README
shows, leaves the connection as it found it (idle, not idle in transaction); and no session's
open transaction, whatever it touched of the doorbell's state, holds up a drain's start or a
ring. Against a real PostgreSQL; the Lambda invoke is a stand-in that records the calls. The
drain and enqueue functions are their real ``lambda_handler``s, fed the files in events/.
"""

from __future__ import annotations

import importlib
import json
import logging
import time
import uuid
from typing import Any

import pg8000.dbapi
import pytest

import pgdrain
import pgdrain.aws
from pgdrain import store
from pgdrain.aws import doorbell as doorbell_module
from pgdrain.aws.doorbell import Doorbell
from pgdrain.db import Connector, Session, connect, in_transaction, parse_database_url
from pgdrain.drain import drain
from pgdrain.registry import Registry
from pgdrain_dev.context import LambdaContext
from tests.support.functions import load_event

DRAIN = "pgdrain-drain"


class Invokes:
    """boto3's Lambda client as the doorbell calls it: records each invoke, answers 202."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def invoke(self, **call: Any) -> dict[str, int]:
        self.calls.append(call)
        return {"StatusCode": 202}


@pytest.fixture
def invokes(monkeypatch) -> Invokes:
    """The application's doorbell (``pgdrain.aws.ring``), ringing the stand-in."""
    stand_in = Invokes()
    monkeypatch.setattr(doorbell_module, "_APP_DOORBELL",
                        Doorbell(DRAIN, window_seconds=60, client_factory=lambda: stand_in))
    return stand_in


def dbapi_connect(driver: str, url: str) -> Any:
    """An application's DB-API connection (not in autocommit) through ``driver``."""
    if driver == "pg8000.dbapi":
        params = parse_database_url(url)
        return pg8000.dbapi.connect(user=params.user, password=params.password,
                                    host=params.host or "localhost", port=params.port,
                                    database=params.database, unix_sock=params.unix_sock)
    module = pytest.importorskip(driver, reason=f"{driver} is not installed in this venv")
    return module.connect(url)


DRIVERS = ["pg8000.dbapi", "psycopg", "psycopg2"]


def backend_pid(conn: Any) -> int:
    cursor = conn.cursor()
    cursor.execute("SELECT pg_backend_pid()")
    pid = int(cursor.fetchone()[0])
    cursor.close()
    conn.commit()
    return pid


def state_of(sql, pid: int) -> str:
    return sql("SELECT state FROM pg_stat_activity WHERE pid = :pid", pid=pid)[0]["state"]


def drain_now(load_function) -> dict[str, Any]:
    """The drain function's direct invoke, with every lock wait bounded to a second (its
    lock_timeout: a tenth of the time left, at least a second): a drain held up by a lock
    stops with database_error."""
    app = load_function("drain")
    summary: dict[str, Any] = app.lambda_handler(load_event("drain_direct.json"),
                                                 LambdaContext(timeout_seconds=10))
    return summary


def post_job(load_function, monkeypatch, capsys) -> tuple[int, str]:
    """POST /jobs through the enqueue function, its doorbell ringing a stand-in; the status
    and what the function printed (its log lines and metrics)."""
    app = load_function("enqueue")
    stand_in = Invokes()
    monkeypatch.setattr(app.FUNCTION, "doorbell",
                        Doorbell(DRAIN, window_seconds=60, client_factory=lambda: stand_in))
    capsys.readouterr()
    event = load_event("enqueue_single.json")
    event["body"] = json.dumps({"job_type": "test-noop"})
    response = app.lambda_handler(event, LambdaContext("pgdrain-enqueue"))
    return response["statusCode"], capsys.readouterr().out


def ring_waited(out: str) -> bool:
    """Whether the enqueue function's ring could not read or write the doorbell's state (it
    waited out its lock_timeout, and then rang blind)."""
    return "could not read its state" in out


@pytest.mark.parametrize("driver", DRIVERS)
def test_ring_after_commit_leaves_a_dbapi_connection_idle(driver, database_url, sql, invokes,
                                                          load_function, monkeypatch, capsys):
    app_conn = dbapi_connect(driver, database_url)
    try:
        pid = backend_pid(app_conn)
        pgdrain.enqueue(app_conn, "test-noop")
        app_conn.commit()
        assert pgdrain.aws.ring(app_conn) == "rung"  # as the README shows
        assert len(invokes.calls) == 1
        assert in_transaction(app_conn) is False
        assert state_of(sql, pid) == "idle"
        # The drain the ring started takes its slot and drains, without waiting on the app.
        summary = drain_now(load_function)
        assert summary["stopped"] != "database_error", summary
        assert (summary["claimed"], summary["done"]) == (1, 1), summary
        status, out = post_job(load_function, monkeypatch, capsys)
        assert status == 201
        assert not ring_waited(out), out
        assert '"DoorbellRung"' in out  # the drain answered the app's ring: ring again
        # A second ring on the app's connection, the drain answered: asks, rings, idle again.
        pgdrain.enqueue(app_conn, "test-noop")
        app_conn.commit()
        assert pgdrain.aws.ring(app_conn) == "skipped"  # the enqueue function's ring is young
        assert state_of(sql, pid) == "idle"
        # In autocommit no transaction opens, and none is ended.
        app_conn.autocommit = True
        pgdrain.enqueue(app_conn, "test-noop")
        assert pgdrain.aws.ring(app_conn) == "skipped"
        assert state_of(sql, pid) == "idle"
    finally:
        app_conn.close()


@pytest.mark.parametrize("driver", DRIVERS)
def test_ring_before_the_commit_leaves_the_transaction_alone_and_warns_once(
        driver, database_url, sql, invokes, caplog):
    app_conn = dbapi_connect(driver, database_url)
    try:
        pid = backend_pid(app_conn)
        job = pgdrain.enqueue(app_conn, "test-noop")
        with caplog.at_level(logging.WARNING, logger="pgdrain.aws.doorbell"):
            assert pgdrain.aws.ring(app_conn) == "rung"  # blind: once per window
            assert pgdrain.aws.ring(app_conn) == "skipped"
        warnings = [r for r in caplog.records if "belongs after the commit" in r.getMessage()]
        assert len(warnings) == 1
        # The caller's transaction is still theirs, open, and the ring asked nothing of the
        # database in it: no lock but the transaction's own, no stamp.
        assert state_of(sql, pid) == "idle in transaction"
        locks = sql("SELECT l.locktype, c.relname FROM pg_locks AS l "
                    "LEFT JOIN pg_class AS c ON c.oid = l.relation "
                    "WHERE l.pid = :pid AND l.locktype = 'relation'", pid=pid)
        assert all(not (r["relname"] or "").startswith("pgdrain") for r in locks), locks
        assert sql("SELECT last_value FROM pgdrain_doorbell_ring")[0]["last_value"] == 0
        app_conn.commit()
        assert sql("SELECT status FROM jobs WHERE id = :id", id=job.id) == [
            {"status": "pending"}]
    finally:
        app_conn.close()


def test_a_failed_ring_statement_is_rolled_back_too(database_url, sql, invokes):
    """The ring's statement refused (no privilege on the doorbell's state): it rings anyway,
    and the aborted transaction its statement opened is ended, not left for the app."""
    role = f"pgdrain_noring_{uuid.uuid4().hex[:8]}"
    sql(f"CREATE ROLE {role} LOGIN")
    sql(f"GRANT SELECT, INSERT, UPDATE ON jobs TO {role}")
    try:
        params = parse_database_url(database_url)
        app_conn = pg8000.dbapi.connect(user=role, host=params.host or "localhost",
                                        port=params.port, database=params.database,
                                        unix_sock=params.unix_sock)
        try:
            pid = backend_pid(app_conn)
            assert pgdrain.aws.ring(app_conn) == "rung"
            assert state_of(sql, pid) == "idle"
        finally:
            app_conn.close()
    finally:
        sql(f"DROP OWNED BY {role}")
        sql(f"DROP ROLE {role}")


@pytest.fixture
def holder(connect_to):
    """An application session with a transaction open, whatever it did in it."""
    conn = connect_to()
    yield conn
    conn.run("ROLLBACK")


@pytest.mark.parametrize("held", ["the doorbell's state, through pgdrain's statements",
                                  "pgdrain_doorbell FOR UPDATE"])
def test_no_open_transaction_holds_up_a_drain_or_a_ring(held, holder, conn, load_function,
                                                        monkeypatch, capsys):
    holder.run("BEGIN")
    if held == "pgdrain_doorbell FOR UPDATE":
        holder.run("SELECT * FROM pgdrain_doorbell FOR UPDATE")
    else:
        # What a ring and a drain's start run, inside a transaction left open.
        session = Session(holder)
        store.doorbell_state(session, window_seconds=1)
        store.doorbell_rung(session)
        store.drain_started(session)
        store.doorbell_rung(session)
    pgdrain.enqueue(conn, "test-noop")
    summary = drain_now(load_function)
    assert summary["stopped"] != "database_error", summary
    assert summary["done"] == 1, summary
    status, out = post_job(load_function, monkeypatch, capsys)
    assert status == 201
    assert not ring_waited(out), out
    # A ring and a drain's start under a lock_timeout far shorter than any wait.
    conn.run("SET lock_timeout = '50ms'")
    assert store.doorbell_state(conn, window_seconds=1)[0] == 0
    store.doorbell_rung(conn)
    store.drain_started(conn)


def test_a_drain_that_finds_every_slot_taken_answers_the_ring(database_url, conn, connect_to):
    """A ring is written, its drain finds the only slot taken (by a drain that took it before
    the ring) and returns busy; that drain then finishes. A job committed now must ring:
    nothing is on its way any more. (Answering only after taking a slot left such a ring
    looking unanswered, and the next ring was skipped for a whole window.)"""
    registry = Registry()

    @pgdrain.job("test-noop", registry=registry)
    def noop(job):
        pass

    settings = pgdrain.Settings(max_drains=1)
    running = connect_to()
    slot = store.take_drain_slot(running, 1)  # a drain, running since before the ring
    assert slot == 0
    store.doorbell_rung(conn)  # a ring, about to invoke the drain
    connector = Connector(lambda timeout=None: connect(database_url, timeout=timeout))
    try:
        deadline = time.monotonic() + 30
        summary = drain(connector, registry, settings,
                        time_left=lambda: deadline - time.monotonic())
    finally:
        connector.discard()
    assert summary.stopped == "busy"
    store.give_back_drain_slot(running, slot)  # the running drain's last look: nothing due
    pgdrain.enqueue(conn, "test-noop")
    stand_in = Invokes()
    bell = Doorbell(DRAIN, window_seconds=60, client_factory=lambda: stand_in)
    assert bell.ring(conn) == "rung"
    assert len(stand_in.calls) == 1


def test_the_drivers_say_whether_a_transaction_is_open(database_url):
    """``in_transaction`` for each driver installed: idle, in a transaction, aborted."""
    for driver in DRIVERS:
        try:
            if driver != "pg8000.dbapi":
                importlib.import_module(driver)
        except ImportError:
            continue
        app_conn = dbapi_connect(driver, database_url)
        try:
            assert in_transaction(app_conn) is False, driver
            cursor = app_conn.cursor()
            cursor.execute("SELECT 1")
            assert in_transaction(app_conn) is True, driver
            with pytest.raises(Exception):  # noqa: B017 - each driver raises its own
                cursor.execute("SELECT 1/0")
            assert in_transaction(app_conn) is True, driver  # aborted, not ended
            app_conn.rollback()
            assert in_transaction(app_conn) is False, driver
        finally:
            app_conn.close()
        in_transaction(app_conn)  # closed: whatever it says, it does not raise
    native = connect(database_url)
    try:
        assert in_transaction(native) is False
        native.run("BEGIN")
        assert in_transaction(native) is True
        native.run("ROLLBACK")
    finally:
        native.close()
    assert in_transaction(object()) is None
