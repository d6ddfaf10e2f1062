"""Signals (durable waits) against PostgreSQL: a handler raises ``pgdrain.WaitFor(name,
timeout=...)`` and its job waits holding no drain and no attempt; ``pgdrain.signal(conn, name,
payload)`` in the app's transaction makes it due with the payload; a signal sent before the
wait is kept and ends the wait at once; a timeout resumes the job with no payload; a signal
sent while a job enters its wait is never lost; cancelled, purged and rolled-back signals
behave as documented."""

from __future__ import annotations

import threading
import time

import pytest

import pgdrain
import pgdrain.testing as pgt
from pgdrain.db import connect
from pgdrain.registry import Registry
from tests.support.drains import run_all, run_drain


class Confirmations:
    """A job type ``order`` that waits for ``confirm:<order>`` (its timeout from the payload,
    60 s by default), then returns what it got; each run is recorded."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.runs: list[tuple[int, object]] = []
        self.lock = threading.Lock()

        @pgdrain.job("order", resumable=True, registry=self.registry)
        def order(job: pgdrain.Job) -> object:
            with self.lock:
                self.runs.append((job.id, job.signal))
            if job.signal is None:
                job.checkpoint({"reserved": job.payload["order"]})
                raise pgdrain.WaitFor(f"confirm:{job.payload['order']}",
                                      timeout=job.payload.get("timeout", 60))
            if job.payload.get("fail_after_wait") and job.attempts == 1:
                raise RuntimeError("the step after the wait failed")
            return {"state": job.state, "received": job.signal.received,
                    "payload": job.signal.payload, "timed_out": job.signal.timed_out}


def _row(sql, ident: int) -> dict:
    return sql("SELECT status, attempts, wait_signal, wait_result, result, state "
               "FROM jobs WHERE id = :id", id=ident)[0]


def test_a_job_waits_for_its_signal_then_resumes_with_the_payload(database_url, conn, sql):
    orders = Confirmations()
    job = pgdrain.enqueue(conn, "order", {"order": 42})
    summary = run_drain(database_url, orders.registry)
    assert (summary.claimed, summary.snoozed, summary.done) == (1, 1, 0)
    waiting = _row(sql, job.id)
    # Waiting: no drain, no attempt held; its state kept.
    assert (waiting["status"], waiting["attempts"], waiting["wait_signal"]) == \
        ("waiting", 0, "confirm:42")
    assert waiting["state"] == {"reserved": 42}
    # Another drain finds nothing to do: the waiting job is not claimable.
    assert run_drain(database_url, orders.registry).claimed == 0

    conn.run("BEGIN")
    sent = pgdrain.signal(conn, "confirm:42", {"by": "sarah", "note": "ok ✓"})
    conn.run("COMMIT")
    assert sent.woken == (job.id,)
    run_drain(database_url, orders.registry)
    row = _row(sql, job.id)
    assert row["status"] == "done" and row["attempts"] == 1
    assert row["result"] == {"state": {"reserved": 42}, "received": True,
                             "payload": {"by": "sarah", "note": "ok ✓"}, "timed_out": False}
    assert row["wait_signal"] is None and row["wait_result"]["name"] == "confirm:42"
    signal = orders.runs[-1][1]
    assert isinstance(signal, pgdrain.Signal) and signal.at is not None


def test_a_signal_sent_before_the_wait_is_kept_and_ends_it_at_once(database_url, conn, sql):
    orders = Confirmations()
    sent = pgdrain.signal(conn, "confirm:7", [1, 2, 3])
    assert sent.woken == ()
    job = pgdrain.enqueue(conn, "order", {"order": 7})
    summary = run_drain(database_url, orders.registry)
    # Waited and was due at once: both runs in one drain.
    assert (summary.snoozed, summary.done) == (1, 1)
    assert _row(sql, job.id)["result"]["payload"] == [1, 2, 3]
    # The signal is kept for later waits (a week by default), not consumed.
    kept = sql("SELECT payload, expires_at - sent_at AS keep FROM pgdrain_signals "
               "WHERE name = 'confirm:7'")[0]
    assert kept["payload"] == [1, 2, 3] and kept["keep"].days == 7


def test_a_timeout_resumes_the_job_with_no_payload(database_url, conn, sql):
    orders = Confirmations()
    job = pgdrain.enqueue(conn, "order", {"order": 9, "timeout": 0.2})
    run_drain(database_url, orders.registry)
    assert _row(sql, job.id)["status"] == "waiting"
    time.sleep(0.3)
    # The janitor (at the top of the next drain) makes it due; the drain runs it.
    summary = run_drain(database_url, orders.registry)
    assert summary.done == 1
    row = _row(sql, job.id)
    assert row["result"] == {"state": {"reserved": 9}, "received": False, "payload": None,
                             "timed_out": True}
    assert row["attempts"] == 1
    # A signal sent after the timeout wakes nothing (and is kept for a later wait).
    assert pgdrain.signal(conn, "confirm:9", "late").woken == ()


def test_a_rolled_back_signal_was_never_sent(database_url, conn, sql):
    orders = Confirmations()
    job = pgdrain.enqueue(conn, "order", {"order": 5})
    run_drain(database_url, orders.registry)
    conn.run("BEGIN")
    assert pgdrain.signal(conn, "confirm:5", "yes").woken == (job.id,)
    conn.run("ROLLBACK")
    assert _row(sql, job.id)["status"] == "waiting"
    assert sql("SELECT sent_at FROM pgdrain_signals WHERE name = 'confirm:5'")[0] == \
        {"sent_at": None}  # the wait's own row: nothing sent


def test_every_job_waiting_for_a_name_resumes_and_each_keeps_its_own_payload(
        database_url, conn, sql):
    orders = Confirmations()
    jobs = [pgdrain.enqueue(conn, "order", {"order": 1}).id for _ in range(3)]
    run_drain(database_url, orders.registry)
    assert pgdrain.signal(conn, "confirm:1", "first").woken == tuple(jobs)
    # Sent again: the payload is replaced for later waits; the woken keep what they got.
    pgdrain.signal(conn, "confirm:1", "second")
    later = pgdrain.enqueue(conn, "order", {"order": 1}).id
    run_drain(database_url, orders.registry)
    payloads = {r["id"]: r["result"]["payload"] for r in
                sql("SELECT id, result FROM jobs WHERE status = 'done'")}
    assert payloads == {**dict.fromkeys(jobs, "first"), later: "second"}


def test_a_retry_after_the_wait_still_sees_the_signal(database_url, conn, sql):
    orders = Confirmations()
    job = pgdrain.enqueue(conn, "order", {"order": 3, "fail_after_wait": True})
    waited = pgt.drain_all(database_url, registry=orders.registry)
    assert [(r.id, r.outcome, r.status) for r in waited] == [(job.id, "waiting", "waiting")]
    pgdrain.signal(conn, "confirm:3", {"go": True})
    retried = pgt.drain_all(database_url, registry=orders.registry)
    assert [(r.outcome, r.attempt) for r in retried] == [("retried", 1)]
    assert pgt.drain_all(database_url, registry=orders.registry).jobs == []  # its backoff
    pgt.advance(conn, 60)  # past the backoff's longest first delay
    [done] = pgt.drain_all(database_url, registry=orders.registry)
    assert (done.outcome, done.attempt) == ("done", 2)
    row = _row(sql, job.id)
    assert row["status"] == "done" and row["attempts"] == 2
    assert row["result"]["payload"] == {"go": True}


def test_cancelling_a_waiting_job_ends_it_and_a_later_signal_leaves_it(database_url, conn,
                                                                        sql):
    orders = Confirmations()
    job = pgdrain.enqueue(conn, "order", {"order": 11})
    run_drain(database_url, orders.registry)
    assert pgdrain.cancel(conn, [job.id]) == {job.id: "cancelled"}
    assert pgdrain.signal(conn, "confirm:11", "too late").woken == ()
    assert _row(sql, job.id)["status"] == "cancelled"
    assert run_drain(database_url, orders.registry).claimed == 0


def test_expired_signals_and_waits_are_forgotten_by_the_janitor(database_url, conn, sql):
    pgdrain.signal(conn, "short", None, keep_seconds=0)
    pgdrain.signal(conn, "long", None)
    run_drain(database_url, Registry())
    assert [r["name"] for r in sql("SELECT name FROM pgdrain_signals")] == ["long"]
    # Expired, it is no longer there to end a wait at once.
    orders = Confirmations()
    pgdrain.signal(conn, "confirm:8", "gone", keep_seconds=0)
    job = pgdrain.enqueue(conn, "order", {"order": 8})
    run_drain(database_url, orders.registry)
    run_drain(database_url, orders.registry)
    assert _row(sql, job.id)["status"] == "waiting"


@pytest.mark.parametrize(("args", "field"), [
    (("", None), "name"), (("a\x00b", None), "name"), (("x" * 501, None), "name"),
    ((42, None), "name"), (("ok", {"bad": float("nan")}), "payload"),
    (("ok", "\x00"), "payload"), (("ok", {1, 2}), "payload"),
])
def test_a_signal_that_cannot_be_sent_is_refused_and_writes_nothing(conn, sql, args, field):
    with pytest.raises(pgdrain.InvalidSignal) as refused:
        pgdrain.signal(conn, *args)
    assert refused.value.field == field and str(refused.value).startswith(f"{field}: ")
    assert sql("SELECT count(*) AS n FROM pgdrain_signals")[0]["n"] == 0


@pytest.mark.parametrize("keep", [-1, float("inf"), float("nan"), True, "7d", 11 * 365 * 86400])
def test_a_retention_out_of_range_is_refused(conn, sql, keep):
    with pytest.raises(pgdrain.InvalidSignal, match="keep_seconds"):
        pgdrain.signal(conn, "ok", None, keep_seconds=keep)
    assert sql("SELECT count(*) AS n FROM pgdrain_signals")[0]["n"] == 0


def test_every_text_round_trips_in_a_name_and_a_payload(database_url, conn, sql):
    orders = Confirmations()
    name = "\u202eevil\u200b \"'\\ \U0001f600 é"
    registry = Registry()

    @pgdrain.job("wait-for-name", registry=registry)
    def wait_for_name(job: pgdrain.Job) -> object:
        if job.signal is None:
            raise pgdrain.WaitFor(job.payload["name"], timeout=60)
        return [job.signal.name, job.signal.payload]

    job = pgdrain.enqueue(conn, "wait-for-name", {"name": name})
    run_drain(database_url, registry)
    assert pgdrain.signal(conn, name, {"text": name}).woken == (job.id,)
    run_drain(database_url, registry)
    assert _row(sql, job.id)["result"] == [name, {"text": name}]
    del orders


def test_a_handler_that_builds_an_invalid_wait_spends_its_attempt(database_url, conn, sql):
    registry = Registry()

    @pgdrain.job("bad-wait", registry=registry)
    def bad_wait(job: pgdrain.Job) -> None:
        raise pgdrain.WaitFor("ok", timeout=job.payload["timeout"])

    job = pgdrain.enqueue(conn, "bad-wait", {"timeout": -1}, max_attempts=1)
    run_drain(database_url, registry)
    row = sql("SELECT status, last_error FROM jobs WHERE id = :id", id=job.id)[0]
    assert row["status"] == "failed" and "WaitFor timeout" in row["last_error"]


def test_a_signal_sent_while_the_job_enters_its_wait_is_not_lost(database_url, conn,
                                                                  connect_to, sql):
    """The send's transaction holds the signal's row while the drain writes the wait: the wait
    waits for the commit and ends at once with the payload."""
    orders = Confirmations()
    job = pgdrain.enqueue(conn, "order", {"order": 21})
    app = connect_to()
    app.run("BEGIN")
    assert pgdrain.signal(app, "confirm:21", "racing").woken == ()
    drained = {}
    drain = threading.Thread(target=lambda: drained.update(
        summary=run_drain(database_url, orders.registry)))
    drain.start()
    time.sleep(1.0)  # the drain ran the handler and waits for the signal's row
    assert sql("SELECT status FROM jobs WHERE id = :id", id=job.id)[0]["status"] == "running"
    app.run("COMMIT")
    drain.join(30)
    assert not drain.is_alive()
    row = _row(sql, job.id)
    assert row["status"] == "done" and row["result"]["payload"] == "racing"


def test_waits_and_sends_racing_across_drains_never_lose_a_signal(database_url, conn, sql):
    orders = Confirmations()
    count = 60
    ids = [r.id for r in pgdrain.enqueue_many(
        conn, [{"job_type": "order", "payload": {"order": n}} for n in range(count)])]

    def send() -> None:
        app = connect(database_url)
        try:
            for n in range(count):
                app.run("BEGIN")
                pgdrain.signal(app, f"confirm:{n}", n)
                app.run("COMMIT")
                time.sleep(0.002)
        finally:
            app.close()

    def drains() -> None:
        for _ in range(8):
            run_drain(database_url, orders.registry, seconds=10, concurrency=2)

    run_all([threading.Thread(target=send), threading.Thread(target=drains),
             threading.Thread(target=drains)])
    for _ in range(5):  # what the racing drains left due
        if not run_drain(database_url, orders.registry).claimed:
            break
    rows = sql("SELECT id, status, result FROM jobs ORDER BY id")
    assert [r["status"] for r in rows] == ["done"] * count, rows
    assert [r["result"]["payload"] for r in rows] == list(range(count))
    assert [r["id"] for r in rows] == ids


def test_a_child_waiting_for_a_signal_is_left_alone_when_its_parent_is_requeued(
        database_url, conn, sql):
    orders = Confirmations()

    @pgdrain.job("parent", max_attempts=1, registry=orders.registry)
    def parent(job: pgdrain.Job) -> str:
        if job.payload.get("fail"):
            raise RuntimeError("no")
        return "ok"

    first = pgdrain.enqueue(conn, "parent", {}).id
    child = pgdrain.enqueue(conn, "order", {"order": 31}, depends_on=[first],
                            after="finished").id
    run_drain(database_url, orders.registry)
    assert _row(sql, child)["status"] == "waiting"  # for its signal now
    # The parent is run again (plain SQL requeue of a done job) and ends again.
    sql("UPDATE jobs SET status = 'pending', run_at = now(), finished_at = NULL "
        "WHERE id = :id", id=first)
    run_drain(database_url, orders.registry)
    assert _row(sql, child)["status"] == "waiting"
    assert sql("SELECT parents_left FROM jobs WHERE id = :id", id=child)[0] == \
        {"parents_left": 0}
    pgdrain.signal(conn, "confirm:31", "go")
    run_drain(database_url, orders.registry)
    assert _row(sql, child)["status"] == "done"


def test_the_readmes_signal_example_runs_as_written(database_url, conn, sql, monkeypatch):
    import re
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    example = re.search(r"<!-- signal-example -->\n```python\n(.*?)```", readme, re.DOTALL)[1]
    registry = Registry()
    released: list[object] = []
    # As written, but registered in a registry of the test's own (the one change).
    monkeypatch.setattr(pgdrain, "job", lambda *a, **k: pgdrain.registry.job(
        *a, **k, registry=registry))
    names: dict = {"reserve_stock": lambda order: f"r-{order}",
                   "release_stock": released.append}
    exec(example, names)
    monkeypatch.setattr(sys.modules["pgdrain.enqueue"], "REGISTRY", registry)
    confirmed = pgdrain.enqueue(conn, "ship-order", {"order": 1}).id
    forgotten = pgdrain.enqueue(conn, "ship-order", {"order": 2}).id
    run_drain(database_url, registry)
    conn.run("BEGIN")
    names["confirm"](conn, 1, "sarah")
    conn.run("COMMIT")
    # Two days pass for the other: its timeout.
    sql("UPDATE jobs SET run_at = now() - interval '1 second' WHERE id = :id", id=forgotten)
    run_drain(database_url, registry)
    results = {r["id"]: r["result"] for r in sql("SELECT id, result FROM jobs")}
    assert results == {confirmed: {"shipped": True, "by": "sarah"},
                       forgotten: {"shipped": False}}
    assert released == ["r-2"]


def test_stats_count_the_jobs_waiting_for_parents_or_signals(database_url, conn, sql):
    orders = Confirmations()
    parent = pgdrain.enqueue(conn, "other", queue="q").id
    pgdrain.enqueue(conn, "child", queue="q", depends_on=[parent])
    pgdrain.enqueue(conn, "order", {"order": 1})
    run_drain(database_url, orders.registry, queues=["default"])
    rows = {(r["queue"], r["job_type"]): r["waiting"] for r in pgdrain.store.overview(conn)}
    assert rows == {("q", "other"): 0, ("q", "child"): 1, ("default", "order"): 1}


def test_a_send_in_autocommit_is_one_transaction(database_url, conn, sql, monkeypatch):
    """On a connection in autocommit the signal's two statements are one transaction: a send
    whose second statement fails keeps no signal that woke nobody."""
    from pgdrain.db import Session

    orders = Confirmations()
    job = pgdrain.enqueue(conn, "order", {"order": 4})
    run_drain(database_url, orders.registry)
    real = Session.values

    def failing(self, query, /, **params):
        if query == "signal_wake":
            raise RuntimeError("the connection broke")
        return real(self, query, **params)

    monkeypatch.setattr(Session, "values", failing)
    with pytest.raises(RuntimeError):
        pgdrain.signal(conn, "confirm:4", "lost?")
    monkeypatch.undo()
    assert sql("SELECT count(*) AS n FROM pgdrain_signals WHERE sent_at IS NOT NULL")[0] == \
        {"n": 0}
    assert _row(sql, job.id)["status"] == "waiting"
    assert pgdrain.signal(conn, "confirm:4", "again").woken == (job.id,)


def test_a_wait_keeps_its_signals_row_until_it_ends(database_url, conn, sql):
    """While a job waits, its signal has a row (the janitor looks for waits to time out only
    when some row exists): a row past its expiry is kept while a job still waits for it."""
    from pgdrain import Settings

    orders = Confirmations()
    job = pgdrain.enqueue(conn, "order", {"order": 12})
    run_drain(database_url, orders.registry)
    sql("UPDATE pgdrain_signals SET expires_at = now() - interval '1 second'")
    pgdrain.run_janitor(conn, Settings(), orders.registry)
    assert [r["name"] for r in sql("SELECT name FROM pgdrain_signals")] == ["confirm:12"]
    sql("UPDATE jobs SET run_at = now() - interval '1 second' WHERE id = :id", id=job.id)
    assert pgdrain.run_janitor(conn, Settings(), orders.registry).timed_out == 1
    assert _row(sql, job.id)["status"] == "pending"
    pgdrain.run_janitor(conn, Settings(), orders.registry)
    assert sql("SELECT name FROM pgdrain_signals") == []
    assert pgdrain.run_janitor(conn, Settings(), orders.registry).timed_out == 0
