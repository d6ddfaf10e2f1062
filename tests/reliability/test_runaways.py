"""Runaways and the drain's own connection (issue "Faults in the seams", items 5, 6 and 9).

- Item 5: transactional handlers that outlive their limit and their invocation must not keep
  the warm container's pool lent: the next invocations of the same loaded function run
  transactional jobs, and the pgdrain.on-failed hook job (transactional too).
- Item 6: PGDRAIN_MAX_DRAINS holds when transactional jobs time out at PGDRAIN_CONCURRENCY=1
  (they used to drop the drain's own connection, which holds its slot, and the drain went on
  claiming on a new one, holding no slot); a drain whose own connection is cut claims no more.
- Item 9: an async handler that blocks the event loop costs the other async jobs nothing: each
  is timed from its own start, and one that never started is handed back uncharged and never
  runs after the invocation returned.

The functions run as a user runs them: functions/drain/app.py's lambda_handler, loaded once
and invoked again (a warm container), or drain processes (drain_loop.py), against PostgreSQL.
"""

from __future__ import annotations

import sys
import threading
import time

import pytest

import pgdrain
from pgdrain import store
from pgdrain.db import connect
from pgdrain.drain import PostgresStore
from pgdrain.errors import DatabaseUnavailable
from pgdrain_dev.context import LambdaContext
from tests.functions import conftest as function_fixtures
from tests.support.drains import connector_to

function_env = function_fixtures.function_env
load_function = function_fixtures.load_function

RUNAWAY_JOBS = "tests.reliability.runaway_jobs"


@pytest.fixture
def runaway_jobs(function_env, monkeypatch):
    """PGDRAIN_JOBS with runaway_jobs.py; after the test its runaways are released (and waited
    for, bounded) and its types taken out of the process's REGISTRY, so nothing of it runs on
    into, or changes, the other tests."""
    monkeypatch.setenv("PGDRAIN_JOBS", f"{function_env['PGDRAIN_JOBS']},{RUNAWAY_JOBS}")
    yield lambda: sys.modules[RUNAWAY_JOBS]
    module = sys.modules.get(RUNAWAY_JOBS)
    if module is None:
        return
    module.RELEASE.set()
    deadline = time.monotonic() + 10
    while module.runaways_running() and time.monotonic() < deadline:
        time.sleep(0.01)
    running = module.runaways_running()
    module.unload()
    assert running == 0, f"{running} runaway handlers still running 10 s after the release"


def _jobs(sql, job_type: str) -> list[tuple[str, int]]:
    return [(r["status"], r["attempts"]) for r in sql(
        "SELECT status, attempts FROM jobs WHERE job_type = :t ORDER BY id", t=job_type)]


# --- item 5: a transactional runaway's pooled connection comes back ---------------------------

def test_transactional_runaways_leave_the_warm_containers_pool_usable(
        load_function, runaway_jobs, conn, sql, figures):
    sql("CREATE TABLE tx_writes (job_id bigint PRIMARY KEY)")
    app = load_function("drain", PGDRAIN_CONCURRENCY="4", PGDRAIN_POOL_SIZE="2",
                        PGDRAIN_SAFETY_MARGIN_SECONDS="0.5")
    jobs = runaway_jobs()
    pgdrain.enqueue_many(conn, [{"job_type": "runaway-tx"}] * 2)

    # Both take the pool's two connections and ignore their 0.5 s limit; recorded timed out
    # (failed: one attempt), they are still running when the invocation returns.
    first = app.lambda_handler({}, LambdaContext(timeout_seconds=5))
    assert (first["claimed"], first["failed"], first["abandoned"]) == (2, 2, 2), first
    assert jobs.runaways_running() == 2
    assert [r["error"][:14] for r in sql("SELECT last_error AS error FROM jobs")] == [
        "HandlerTimeout"] * 2

    # The same warm container, its runaways still blocked: three transactional jobs, and a job
    # whose failure enqueues its on_failed hook's job (transactional too), which then runs.
    tx = [r.id for r in pgdrain.enqueue_many(conn, [{"job_type": "tx-write"}] * 3)]
    hooked = pgdrain.enqueue(conn, "fails-hooked").id
    summaries = []
    for _ in range(4):  # until a drain finds nothing; a pool lent for good made each release
        summaries.append(app.lambda_handler({}, LambdaContext(timeout_seconds=5)))
        if summaries[-1]["claimed"] == 0:
            break
    assert jobs.runaways_running() == 2  # all this while they held on
    assert _jobs(sql, "tx-write") == [("done", 1)] * 3, summaries
    assert {r["job_id"] for r in sql("SELECT job_id FROM tx_writes")} == set(tx)
    assert _jobs(sql, "fails-hooked") == [("failed", 1)]
    assert _jobs(sql, "pgdrain.on-failed") == [("done", 1)], summaries
    assert [(hooked, "RuntimeError: failed for its hook")] == jobs.HOOKED
    assert sum(s["released"] for s in summaries) == 0, summaries
    assert [s["claimed"] for s in summaries][-1] == 0, summaries
    figures("runaway-pool", concurrency=4, pool_size=2, runaways=2,
            abandoned=first["abandoned"], later_invocations=len(summaries),
            later_jobs=sum(s["claimed"] for s in summaries),
            done=sum(s["done"] for s in summaries), failed=sum(s["failed"] for s in summaries),
            released=0, lost=0)


# --- item 6: one slot, one drain ---------------------------------------------------------------

class SlotSampler(threading.Thread):
    """The most drain slots (their advisory locks, pg_locks) held at once, every 5 ms."""

    def __init__(self, database_url: str):
        super().__init__(daemon=True)
        self.conn = connect(database_url)
        self.most = 0
        self.looks = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.most = max(self.most, store.drains_running(self.conn))
            self.looks += 1
            time.sleep(0.005)

    def close(self) -> None:
        self.stop.set()
        self.join(5)
        self.conn.close()


def _cross_drain_overlaps(sql) -> list[dict]:
    """Pairs of executions in different drain processes that ran at the same time. An execution
    stopped by its time limit has no end of its own: its job's HandlerTimeout entry, written by
    its drain after the stop (and before that drain gave its slot back), bounds it."""
    return sql("""
        WITH spans AS (
            SELECT e.id, e.pid, e.job_id, e.started_at,
                   COALESCE(e.ended_at, (
                       SELECT (x->>'at')::timestamptz
                       FROM jobs j, jsonb_array_elements(j.errors) AS x
                       WHERE j.id = e.job_id AND (x->>'attempt')::int = e.attempt
                         AND x->>'error' LIKE 'HandlerTimeout%')) AS ended_by
            FROM executions e)
        SELECT a.pid AS pid, a.job_id AS job, a.started_at, a.ended_by,
               b.pid AS other_pid, b.job_id AS other_job, b.started_at AS other_started
        FROM spans a JOIN spans b ON a.pid <> b.pid AND a.id < b.id
        WHERE b.started_at < COALESCE(a.ended_by, 'infinity')
          AND a.started_at < COALESCE(b.ended_by, 'infinity')
        ORDER BY a.id LIMIT 20""")


def test_one_slot_one_drain_when_transactional_jobs_time_out(drains, database_url, conn, sql,
                                                            figures):
    # 60 quick recording jobs and 12 transactional ones that overrun their 0.3 s budget, mixed;
    # one attempt each, so the audit below is one execution per job.
    jobs = [{"job_type": "record-tx-overrun" if i % 6 == 5 else "record",
             "payload": {"seconds": 1 if i % 6 == 5 else 0.01}, "max_attempts": 1}
            for i in range(72)]
    pgdrain.enqueue_many(conn, jobs)
    sampler = SlotSampler(database_url)
    sampler.start()
    try:
        # Three warm containers racing for the one slot: while one holds it, the others'
        # invocations find it taken ("busy") and try again every 20 ms. Invocations of up to
        # 24 jobs: a drain that lost its slot to a timeout (the bug) went on claiming.
        group = drains(3, timeout=30, PGDRAIN_MAX_DRAINS="1", PGDRAIN_CONCURRENCY="1",
                       PGDRAIN_MAX_JOBS="24",
                       PGDRAIN_JOBS="tests.reliability.recording_jobs," + RUNAWAY_JOBS)
        group.wait_all(timeout=180)
    finally:
        sampler.close()
    summaries = group.summaries()
    overlaps = _cross_drain_overlaps(sql)
    assert overlaps == [], overlaps
    assert sampler.looks > 100 and sampler.most == 1
    statuses = {(r["job_type"], r["status"], r["attempts"]): r["n"] for r in sql(
        "SELECT job_type, status, attempts, count(*) AS n FROM jobs GROUP BY 1, 2, 3")}
    assert statuses == {("record", "done", 1): 60, ("record-tx-overrun", "failed", 1): 12}
    [[executions, pids]] = conn.run("SELECT count(*), count(DISTINCT pid) FROM executions")
    assert executions == 72  # each job ran once: nothing claimed twice by slot-less drains
    busy = sum(s["stopped"] == "busy" for s in summaries)
    assert busy > 10, "no drain was kept out: the race did not happen"
    assert all(s["stopped"] in ("empty", "max_jobs", "busy") for s in summaries), summaries
    figures("one-slot", drains=3, max_drains=1, concurrency=1, jobs=72,
            transactional_timeouts=12, executions=executions, drains_that_ran=pids,
            invocations=len(summaries), busy=busy,
            most_slots_held=sampler.most, overlapping_executions=len(overlaps), lost=0)


def test_a_transactional_timeout_at_concurrency_1_is_its_jobs_failure_not_the_drains(
        load_function, runaway_jobs, conn, sql):
    # At PGDRAIN_CONCURRENCY=1 the handler runs on the drain's thread, where SIGALRM stops it.
    # Its transaction is on a pooled connection: dropped with the timeout, while the drain's
    # own (which holds its slot) stays, and the jobs behind it run in the same invocation.
    sql("CREATE TABLE tx_writes (job_id bigint PRIMARY KEY)")
    app = load_function("drain", PGDRAIN_CONCURRENCY="1", PGDRAIN_MAX_DRAINS="1",
                        PGDRAIN_SAFETY_MARGIN_SECONDS="0.5")
    overrun = pgdrain.enqueue(conn, "tx-overrun", priority=-1).id
    tx = [r.id for r in pgdrain.enqueue_many(conn, [{"job_type": "tx-write"}] * 3)]
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 3)
    [[own]] = app.CONNECTOR.session().conn.run("SELECT pg_backend_pid()")

    summary = app.lambda_handler({}, LambdaContext(timeout_seconds=10))
    assert (summary["stopped"], summary["claimed"], summary["failed"], summary["done"]) == (
        "empty", 7, 1, 6), summary
    [row] = sql("SELECT status, attempts, last_error FROM jobs WHERE id = :id", id=overrun)
    assert (row["status"], row["attempts"], row["last_error"]) == (
        "failed", 1, "HandlerTimeout: tx-overrun timed out after 0.3 s")
    assert {r["job_id"] for r in sql("SELECT job_id FROM tx_writes")} == set(tx)  # rolled back
    [[after]] = app.CONNECTOR.session().conn.run("SELECT pg_backend_pid()")
    assert after == own  # the drain kept the connection that holds its slot


@pytest.mark.parametrize("cutter", ["cut-slot-holder-tx", "cut-slot-holder"])
def test_a_drain_whose_own_connection_is_cut_claims_no_more(load_function, runaway_jobs, conn,
                                                            sql, cutter):
    # The cutter is claimed alone (a drain's first claim at concurrency 1 is one job) and ends
    # the session holding the drain's slot; ten jobs wait behind it.
    app = load_function("drain", PGDRAIN_CONCURRENCY="1", PGDRAIN_MAX_DRAINS="1",
                        PGDRAIN_SAFETY_MARGIN_SECONDS="0.5")
    cut = pgdrain.enqueue(conn, cutter, priority=-1, max_attempts=1).id
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 10)
    [[own]] = app.CONNECTOR.session().conn.run("SELECT pg_backend_pid()")

    summary = app.lambda_handler({}, LambdaContext(timeout_seconds=10))
    jobs = runaway_jobs()
    assert [own] == jobs.KILLED  # it was the drain's own connection that held the slot
    # The drain stopped at its next statement, on the connection that had held the slot; it
    # neither reconnected to claim nor ran anything after the cut.
    assert (summary["stopped"], summary["claimed"], summary["done"]) == (
        "database_error", 1, 1 if cutter.endswith("-tx") else 0), summary
    # The connection is gone (the server ended it): the error says so, in pgdrain's words.
    assert summary["error"] in ("the connection to the database failed",
                                "the database ended the session (SQLSTATE 57P01)"), summary
    assert [i for i, _, _ in jobs.RAN] == [cut]
    assert _jobs(sql, "test-noop") == [("pending", 0)] * 10
    if cutter.endswith("-tx"):  # its transaction, on a pooled connection, committed
        assert _jobs(sql, cutter) == [("done", 1)]
    # The next invocation of the same container connects anew, takes the slot and drains.
    again = app.lambda_handler({}, LambdaContext(timeout_seconds=10))
    assert again["stopped"] == "empty" and _jobs(sql, "test-noop") == [("done", 1)] * 10, again


def test_a_drain_on_a_replaced_connection_holds_no_slot_and_may_not_claim(database_url, conn,
                                                                         sql):
    # What a drain that reconnected mid-drain (to write outcomes) would do next: its slot died
    # with the old connection, so another drain can take it, and this one must not claim.
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 3)
    connector = connector_to(database_url)
    drain_store = PostgresStore(connector)
    other = PostgresStore(connector_to(database_url))
    try:
        drain_store.open(time.monotonic() + 10)
        assert drain_store.take_slot(1) == 0
        [[pid]] = connector.session().conn.run("SELECT pg_backend_pid()")
        sql("SELECT pg_terminate_backend(:pid, 5000)", pid=pid)
        drain_store.discard()
        drain_store.open(time.monotonic() + 10)  # reconnected: the slot is not held by it
        other.open(time.monotonic() + 10)
        assert other.take_slot(1) == 0  # the slot is free for another drain
        with pytest.raises(DatabaseUnavailable, match="slot"):
            drain_store.claim(batch_size=3, lease_seconds=60, queues=None)
        with pytest.raises(DatabaseUnavailable, match="slot"):
            drain_store.claim_alone(lease_seconds=60, queues=None)
        assert _jobs(sql, "test-noop") == [("pending", 0)] * 3
        drain_store.give_back_slot(0)  # not its own any more: the other drain keeps it
        assert store.drains_running(conn) == 1
    finally:
        connector.discard()
        other.discard()


# --- item 9: a handler that blocks the event loop ----------------------------------------------

def _blocked_loop(load_function, runaway_jobs, conn, seconds_left: float):
    """The blocker (first in claim order: it begins first and holds the loop for 6 s, under a
    2 s limit) and four small async jobs, at PGDRAIN_CONCURRENCY=5, in an invocation with
    ``seconds_left``."""
    app = load_function("drain", PGDRAIN_CONCURRENCY="5", PGDRAIN_SAFETY_MARGIN_SECONDS="0.5")
    blocker = pgdrain.enqueue(conn, "async-blocker", {"seconds": 6}, priority=-1).id
    small = [r.id for r in pgdrain.enqueue_many(conn, [{"job_type": "async-small"}] * 4)]
    summary = app.lambda_handler({}, LambdaContext(timeout_seconds=seconds_left))
    return summary, time.monotonic(), blocker, small, runaway_jobs()


def _wait_for_blocker(jobs, blocker: int) -> None:
    """Until the blocker's 6 s sleep is over and the loop had time to run what was queued on
    it (bounded)."""
    began = next(t for i, _, t in jobs.RAN if i == blocker)
    time.sleep(max(0.0, began + 6 + 1.5 - time.monotonic()))


def test_a_blocked_loop_delays_the_other_async_jobs_but_never_charges_them(
        load_function, runaway_jobs, conn, sql, figures):
    summary, _, blocker, small, jobs = _blocked_loop(load_function, runaway_jobs, conn, 10)
    # They began once the loop was free (after 6 s), each then timed from its own start.
    assert _jobs(sql, "async-small") == [("done", 1)] * 4, summary
    assert sql("SELECT errors FROM jobs WHERE job_type = 'async-small'") == [{"errors": []}] * 4
    assert [(r["status"], r["attempts"], r["last_error"][:14]) for r in sql(
        "SELECT status, attempts, last_error FROM jobs WHERE id = :id", id=blocker)] == [
        ("failed", 1, "HandlerTimeout")]  # charged once: its own time ran out
    assert (summary["done"], summary["failed"], summary["released"], summary["abandoned"]) == (
        4, 1, 0, 0), summary
    assert sorted(i for i, _, _ in jobs.RAN) == sorted([blocker, *small])
    figures("blocked-loop-10s", concurrency=5, blocker_sleep=6, blocker_limit=2, small=4,
            small_done_on_attempt_1=4, blocker_charged=1, released=0, lost=0)


def test_async_jobs_the_blocked_loop_never_began_go_back_uncharged_and_never_run(
        load_function, runaway_jobs, conn, sql, figures):
    # 4 s: the loop is still held when the invocation must end.
    summary, returned, blocker, _, jobs = _blocked_loop(load_function, runaway_jobs, conn, 4)
    assert (summary["released"], summary["failed"], summary["done"], summary["abandoned"]) == (
        4, 1, 0, 1), summary
    _wait_for_blocker(jobs, blocker)  # the loop is free again: whatever was queued on it ran
    assert _jobs(sql, "async-small") == [("pending", 0)] * 4
    assert sql("SELECT errors FROM jobs WHERE job_type = 'async-small'") == [{"errors": []}] * 4
    # None of them began, before the return or after it.
    assert [i for i, _, _ in jobs.RAN] == [blocker]
    assert not [t for _, _, t in jobs.RAN if t > returned]
    figures("blocked-loop-4s", concurrency=5, blocker_sleep=6, blocker_limit=2, small=4,
            released_uncharged=summary["released"], ran_after_return=0,
            abandoned=summary["abandoned"], lost=0)
