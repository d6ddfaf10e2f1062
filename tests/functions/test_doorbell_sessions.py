"""The doorbell and the application's own sessions (issue "Faults in the seams", item 2).

No session's open transaction, whatever it touched of the doorbell's state, holds up a
drain's start or a ring. Against a real PostgreSQL; the Lambda invoke is a stand-in that
records the calls. The drain and enqueue functions are their real ``lambda_handler``s, fed
the files in events/.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import pgdrain
from pgdrain import store
from pgdrain.aws.doorbell import Doorbell
from pgdrain.db import Connector, Session, connect
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
