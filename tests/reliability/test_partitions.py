"""A partition holds no lock past its invocation, and stops no other drain (issue: faults in
the seams, item 1).

A network partition sends no FIN: a drain cut off inside one of its transactions (the
controlled claim's, the janitor's) gives up at its deadline and closes its socket, but the
server never hears it close, and its session stays ``idle in transaction`` holding what it
locked. Before, for hours: every healthy drain then waited for the capped queue's row, ran out
of its lock wait and stopped with ``database_error`` (55P03) having claimed nothing, even from
uncapped queues, and with the janitor's lock held no expired lease was ever reclaimed. Now
``idle_in_transaction_session_timeout`` ends such a session within the invocation's lock wait,
and the controlled claim skips a queue's row another session holds.

The partition is tests/support/proxy.py's, falling silent at an exact statement: it forwards
neither bytes nor the client's FIN. Each test checks in pg_stat_activity that the scenario it
names happened (the drain's server session idle in its transaction, the lock held), then that
other drains work meanwhile, that the session ends within its bound, and that every job ends
done, the claims the partitioned drain lost refunded unless their start was recorded.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import pgdrain
from pgdrain.sql import QUERIES
from pgdrain_dev.context import LambdaContext
from tests.functions import conftest as function_fixtures
from tests.support.proxy import SilentProxy

function_env = function_fixtures.function_env
load_function = function_fixtures.load_function

# The partitioned drain's server sessions carry this name (through the proxy's URL).
PARTITIONED = "pgdrain-partitioned"
# The rated type of partition_jobs.py, named here rather than imported: importing the module
# would register it in this process's REGISTRY for every test collected with this one.
RATED_JOBS, RATED = "tests.reliability.partition_jobs", "test-partition-rated"

# Short invocations, as the partitioned drain's: its lock wait, and so its idle bound, is then
# the least the library sets (a second), and the whole file stays within a minute.
SECONDS = 3.0
SUITE_SECONDS = 2.0
# Generous for the healthy drains: a bound they hit would be a failure of its own.
HEALTHY_SECONDS = 10.0


def _idle_bound(seconds: float) -> float:
    """How long the server may let a transaction of a ``seconds`` invocation sit idle, as
    docs/reliability.md promises (db.server_bounds): the lock wait (a tenth of the time left,
    at least a second), at most 5 s. Written out, not imported, so that the suite also runs
    against the code before the promise."""
    return min(max(1.0, seconds / 10), 5.0)


def _marker(name: str) -> bytes:
    """A fragment of the named statement that no other statement contains, and without a
    parameter (pg8000 rewrites ``:name``): it travels in the Parse message the first time a
    connection runs the statement, so the proxy can fall silent exactly there. One line if
    some line is the statement's own, else two lines running."""
    others = [text for other, text in QUERIES.items() if other != name]
    lines = QUERIES[name].splitlines()
    for width in (1, 2):
        fragments = ["\n".join(lines[i:i + width]).strip() for i in range(len(lines))]
        for fragment in sorted(fragments, key=len, reverse=True):
            if (":" not in fragment and len(fragment) >= 12
                    and not any(fragment in text for text in others)):
                return fragment.encode()
    raise LookupError(f"{name} has no fragment of its own to partition on")


@pytest.fixture
def proxy(database_url: str) -> Iterator[SilentProxy]:
    silent = SilentProxy(database_url)
    try:
        yield silent
    finally:
        silent.close()  # only now do the partitioned sessions still open see their end


@pytest.fixture
def rated_type_unloaded():
    """Take the rated type out of the process's REGISTRY (and its module out of sys.modules)
    after the test, as before it: the other tests' drains must not claim for it."""
    yield
    pgdrain.REGISTRY._handlers.pop(RATED, None)
    sys.modules.pop(RATED_JOBS, None)


def _sessions(sql) -> list[dict[str, Any]]:
    """The partitioned drain's server sessions: state, and whether its transaction wrote."""
    return sql("SELECT pid, state, backend_xid IS NOT NULL AS wrote FROM pg_stat_activity "
               "WHERE datname = current_database() AND application_name = :name",
               name=PARTITIONED)


def _the_stuck_session(sql, state: str) -> dict[str, Any]:
    """The partitioned drain's one server session, once it is in ``state`` (at once, in
    practice: the server answered the last statement the proxy let through)."""
    deadline = time.monotonic() + 0.5
    while True:
        sessions = _sessions(sql)
        if [s["state"] for s in sessions] == [state]:
            return sessions[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"expected one partitioned session {state!r}: {sessions}")
        time.sleep(0.01)


def _idle_transactions_end(sql, within: float) -> float | None:
    """Wait (at most ``within`` s) until no partitioned session is idle in a transaction; the
    seconds it took, or None if one still is."""
    started = time.monotonic()
    while any(s["state"] == "idle in transaction" for s in _sessions(sql)):
        if time.monotonic() - started > within:
            return None
        time.sleep(0.02)
    return time.monotonic() - started


def _ended_within(ended: float | None, bound: float, sql) -> None:
    assert ended is not None, (f"the partitioned session was still idle in transaction "
                               f"{bound + 5:g} s after the partition: {_sessions(sql)}")
    assert _sessions(sql) == [], "the server did not end the stuck session"


def _invoke(app, seconds: float = HEALTHY_SECONDS) -> dict[str, Any]:
    return app.lambda_handler({}, LambdaContext(timeout_seconds=seconds))


def _healthy(load_function, **env: str):
    """A drain function on the direct URL, warmed by one invocation (its imports, connection
    and prepared statements done), so that it drains quickly while a partition holds."""
    app = load_function("drain", **env)
    summary = _invoke(app)
    assert summary["stopped"] == "empty", summary
    return app


def _partitioned_drain(app, proxy: SilentProxy, seconds: float,
                       meanwhile: Callable[[], Any]) -> tuple[dict[str, Any], float, Any]:
    """Invoke ``app`` (through the proxy) with a ``seconds`` context; once the proxy falls
    silent, run ``meanwhile()`` on a thread while the drain is cut off. The drain runs on this
    thread (its handlers' time limits use signals). Returns its summary, the time it had left
    when it returned, and what ``meanwhile`` returned (or raises what it raised)."""
    outcome: dict[str, Any] = {}

    def watch() -> None:
        if not proxy.silent.wait(seconds):
            outcome["error"] = AssertionError("the partition never fell: no marker seen")
            return
        try:
            outcome["result"] = meanwhile()
        except BaseException as exc:  # re-raised on the test's thread
            outcome["error"] = exc

    watcher = threading.Thread(target=watch)
    watcher.start()
    context = LambdaContext(timeout_seconds=seconds)
    try:
        summary = app.lambda_handler({}, context)
        remaining = context.get_remaining_time_in_millis() / 1000
    finally:
        watcher.join(HEALTHY_SECONDS * 3)
    assert not watcher.is_alive(), "the drains run during the partition did not return"
    if "error" in outcome:
        raise outcome["error"]
    print(f"RELIABILITY partitions: {seconds:g} s context, returned with {remaining:.2f} s "
          f"left, stopped {summary['stopped']}")
    return summary, remaining, outcome.get("result")


def _finish_everything(app, sql, rounds: int = 5) -> list[dict[str, Any]]:
    """Leases run out and retries come due (as time would); healthy drains finish the rest."""
    for _ in range(rounds):
        sql("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
            "WHERE status = 'running'")
        sql("UPDATE jobs SET run_at = now() WHERE status = 'pending' AND run_at > now()")
        summary = _invoke(app)
        assert summary["stopped"] in ("empty", "max_jobs"), summary
        if not sql("SELECT 1 FROM jobs WHERE status <> 'done'"):
            return sql("SELECT id, queue, status, attempts, lost_claims, errors FROM jobs "
                       "ORDER BY id")
    raise AssertionError(f"jobs not done after {rounds} drains: "
                         f"{sql('SELECT id, status, run_at FROM jobs WHERE status <> $$done$$')}")


def _enqueue(conn, count: int, *, queue: str = "default", job_type: str = "test-noop"
             ) -> list[int]:
    return [r.id for r in pgdrain.enqueue_many(conn, [{"job_type": job_type, "queue": queue}]
                                               * count)]


def test_a_partition_inside_the_controlled_claim_stops_no_other_queue(
        load_function, function_env, conn, sql, proxy, rated_type_unloaded):
    healthy = _healthy(load_function)
    # A drain that declares a rated type claims capped queues in a transaction of its own
    # (flow_lock, flow_rooms, ...); without one it is a single autocommitting call, which
    # the claim paths' test below cuts.
    partitioned = load_function(
        "drain", DATABASE_URL=proxy.url(PARTITIONED),
        PGDRAIN_JOBS=function_env["PGDRAIN_JOBS"] + f",{RATED_JOBS}")
    capped = _enqueue(conn, 5, queue="capped")
    uncapped = _enqueue(conn, 20)
    pgdrain.set_queue(conn, "capped", max_running=5)
    # Silent at the statement after flow_lock: the capped queue's row is locked, the
    # transaction open, and the drain never heard the lock's answer.
    proxy.partition_on(_marker("flow_rooms"))

    def meanwhile():
        fell = time.monotonic()
        stuck = _the_stuck_session(sql, "idle in transaction")
        # Locked by the stuck session: the test's own claim of the row skips it.
        held = not sql("SELECT queue FROM pgdrain_queues WHERE queue = 'capped' "
                       "FOR UPDATE SKIP LOCKED")
        summaries = [_invoke(healthy) for _ in range(2)]
        after = _sessions(sql)
        # The server ends the stuck session by itself, while its drain still waits for an
        # answer: no FIN of the drain's could have told it.
        ended = _idle_transactions_end(sql, _idle_bound(SECONDS) + 5)
        ended = None if ended is None else time.monotonic() - fell
        return stuck, held, summaries, after, ended

    summary, remaining, (stuck, held, summaries, after, ended) = _partitioned_drain(
        partitioned, proxy, SECONDS, meanwhile)
    assert remaining > 0, summary
    assert summary["stopped"] in ("database_error", "deadline"), summary
    assert held, "the partitioned session did not hold the capped queue's row"
    # The healthy drains skipped the held queue and took every uncapped job, no error.
    assert [s["stopped"] for s in summaries] == ["empty", "empty"], summaries
    assert sum(s["done"] for s in summaries) == 20, summaries
    rows = {r["id"]: r for r in sql("SELECT id, status, attempts FROM jobs")}
    assert {(rows[i]["status"], rows[i]["attempts"]) for i in uncapped} == {("done", 1)}
    assert {rows[i]["status"] for i in capped} == {"pending"}
    # ...while the row was held: the stuck session outlived them.
    assert [(s["pid"], s["state"]) for s in after] == [(stuck["pid"], "idle in transaction")]

    _ended_within(ended, _idle_bound(SECONDS), sql)
    print(f"RELIABILITY partitions: the stuck controlled claim's session ended {ended:.2f} s "
          f"after the partition (bound {_idle_bound(SECONDS):g} s idle)")
    summary = _invoke(healthy)
    assert (summary["stopped"], summary["done"]) == ("empty", 5), summary
    rows = {r["id"]: r for r in sql("SELECT id, status, attempts FROM jobs")}
    assert {(rows[i]["status"], rows[i]["attempts"]) for i in capped} == {("done", 1)}


def test_a_partition_inside_the_janitor_never_locks_it_out(load_function, conn, sql, proxy):
    healthy = _healthy(load_function)
    partitioned = load_function("drain", DATABASE_URL=proxy.url(PARTITIONED))
    # A dead drain's claims: running, their leases run out, their starts never recorded.
    dead = _enqueue(conn, 3)
    sql("UPDATE jobs SET status = 'running', attempts = 1, claimed_at = now(), "
        "lease_expires_at = now() - interval '1 second', lease_token = gen_random_uuid()")
    # Silent at the statement after janitor_try_lock: the janitor's advisory lock is held.
    proxy.partition_on(_marker("janitor_select_expired"))

    def meanwhile():
        fell = time.monotonic()
        stuck = _the_stuck_session(sql, "idle in transaction")
        locks = sql("SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' "
                    "AND objsubid = 1 AND granted AND pid = :pid", pid=stuck["pid"])
        # A drain meanwhile finds the janitor's lock taken, and skips it without waiting.
        skipped = _invoke(healthy)
        after = _sessions(sql)
        ended = _idle_transactions_end(sql, _idle_bound(SECONDS) + 5)
        ended = None if ended is None else time.monotonic() - fell
        return stuck, locks[0]["n"], skipped, after, ended

    summary, remaining, (stuck, locks, skipped, after, ended) = _partitioned_drain(
        partitioned, proxy, SECONDS, meanwhile)
    assert remaining > 0, summary
    assert summary["stopped"] in ("database_error", "deadline"), summary
    assert locks == 1, "the partitioned session did not hold the janitor's lock"
    assert (skipped["stopped"], skipped["reclaimed"]) == ("empty", 0), skipped
    assert [(s["pid"], s["state"]) for s in after] == [(stuck["pid"], "idle in transaction")]

    _ended_within(ended, _idle_bound(SECONDS), sql)
    print(f"RELIABILITY partitions: the stuck janitor's session ended {ended:.2f} s after the "
          f"partition (bound {_idle_bound(SECONDS):g} s idle)")
    summary = _invoke(healthy)
    assert (summary["reclaimed"], summary["reclaimed_refunded"], summary["done"]) == (3, 3, 3), \
        summary
    rows = sql("SELECT id, status, attempts, lost_claims FROM jobs ORDER BY id")
    assert [(r["id"], r["status"], r["attempts"], r["lost_claims"]) for r in rows] == [
        (i, "done", 1, 1) for i in dead]


@dataclass(frozen=True)
class ClaimPath:
    """How a drain claims the queue's ten jobs: the statement that claims them, what makes
    the drain take that path (``arrange(conn, sql, ids)``, after they are inserted), their
    type, and whether the claim runs in a transaction of its own (the controlled claim: its
    rows are locked first, flow_lock, then its room read, flow_rooms)."""

    claim: str
    arrange: Callable[..., object]
    job_type: str = "test-noop"
    transaction: bool = False


def _nothing(conn, sql, ids):
    pass


def _lost_a_claim(conn, sql, ids):
    # A drain died holding it, its start unknown: the next drain claims it alone.
    sql("UPDATE jobs SET lost_claims = 1 WHERE id = :id", id=ids[0])


def _tenants(conn, sql, ids):
    sql("UPDATE jobs SET tenant = 'tenant-' || (id % 3) WHERE queue = 'default'")


def _ordering_keys(conn, sql, ids):
    sql("UPDATE jobs SET ordering_key = 'key-' || (id % 3) WHERE queue = 'default'")


PATHS = {
    "plain": ClaimPath("job_claim_batch", _nothing),
    "lone": ClaimPath("job_claim_alone", _lost_a_claim),
    "fair": ClaimPath("job_claim_fair", _tenants),
    # One call that commits at once (migration 0018): its locks end with the statement.
    "capped queue": ClaimPath("job_claim_controlled", lambda conn, *_: pgdrain.set_queue(
        conn, "default", max_running=100)),
    "queue rate": ClaimPath("job_claim_controlled", lambda conn, *_: pgdrain.set_queue(
        conn, "default", rate="1000/s")),
    "rated type": ClaimPath("job_claim_ids", _nothing, job_type=RATED, transaction=True),
    "ordered": ClaimPath("job_claim_batch", _ordering_keys),
}


@dataclass(frozen=True)
class Cut:
    """Where the partition falls: at ``statement`` (its first run's Parse), with the proxy's
    ``forward`` and ``answer`` (see SilentProxy.partition_on)."""

    statement: str | None  # None: the path's claim
    forward: int
    answer: bool
    transaction: bool  # for the controlled paths; else for the autocommitting ones


CUTS = {
    # The controlled claim, its transaction open: after its rows are locked...
    "locked": Cut("flow_rooms", forward=0, answer=False, transaction=True),
    # ...and after its claim statement answered, before the commit.
    "claimed in its transaction": Cut(None, forward=2, answer=True, transaction=True),
    # An autocommitting claim sent: the server runs and commits it, the client never hears.
    "claim sent": Cut(None, forward=2, answer=False, transaction=False),
    # An autocommitting claim answered: what the drain sends next is lost (its jobs ran).
    "claim answered": Cut(None, forward=2, answer=True, transaction=False),
}
CASES = [pytest.param(path, cut, id=f"{path}-{cut}") for path in PATHS for cut in CUTS
         if PATHS[path].transaction == CUTS[cut].transaction]


@pytest.mark.parametrize(("path", "cut"), CASES)
def test_a_partition_on_every_claim_path_holds_nothing_past_its_bound(
        load_function, function_env, conn, sql, proxy, rated_type_unloaded, path, cut):
    how, where = PATHS[path], CUTS[cut]
    modules = function_env["PGDRAIN_JOBS"] + (f",{RATED_JOBS}" if how.job_type == RATED else "")
    # Settings are read at a function's cold start: PGDRAIN_QUEUES="" is "every queue" again.
    env = {"PGDRAIN_JOBS": modules, "PGDRAIN_BATCH_SIZE": "10", "PGDRAIN_QUEUES": ""}
    others = _healthy(load_function, **{**env, "PGDRAIN_QUEUES": "other"})
    # The partitioned drain takes the path's queue only: what it claims is the path's claim.
    partitioned = load_function("drain", **{**env, "DATABASE_URL": proxy.url(PARTITIONED),
                                            "PGDRAIN_QUEUES": "default"})
    ids = _enqueue(conn, 10, job_type=how.job_type)
    how.arrange(conn, sql, ids)
    other_ids = _enqueue(conn, 5, queue="other")
    proxy.partition_on(_marker(where.statement or how.claim), forward=where.forward,
                       answer=where.answer)

    def meanwhile():
        fell = time.monotonic()
        # In its transaction, or (autocommit) idle with the claim committed.
        stuck = _the_stuck_session(sql, "idle in transaction" if how.transaction else "idle")
        summary = _invoke(others)
        after = _sessions(sql)
        ended = _idle_transactions_end(sql, _idle_bound(SUITE_SECONDS) + 5)
        return stuck, summary, after, None if ended is None else time.monotonic() - fell

    summary, remaining, (stuck, healthy, after, ended) = _partitioned_drain(
        partitioned, proxy, SUITE_SECONDS, meanwhile)
    assert remaining > 0, summary
    assert summary["stopped"] in ("database_error", "deadline"), summary
    # Another queue drained meanwhile, no error, the partitioned session still as it was.
    assert (healthy["stopped"], healthy["done"]) == ("empty", 5), healthy
    assert [(s["pid"], s["state"]) for s in after] == [(stuck["pid"], stuck["state"])]

    if how.transaction:
        _ended_within(ended, _idle_bound(SUITE_SECONDS), sql)
    lost = {r["id"]: r["started"] for r in sql(
        "SELECT id, started_at IS NOT NULL AS started FROM jobs WHERE status = 'running'")}
    if how.transaction:
        assert lost == {}, "the stuck transaction's claim was not rolled back"
    else:
        assert lost and set(lost) <= set(ids), lost  # the claim committed, unheard of

    finisher = load_function("drain", DATABASE_URL=function_env["DATABASE_URL"], **env)
    rows = {r["id"]: r for r in _finish_everything(finisher, sql)}
    lease_expired = {i: [e for e in r["errors"] if e["error"].startswith("lease expired")]
                     for i, r in rows.items()}
    for job_id in ids + other_ids:
        row, started = rows[job_id], lost.get(job_id)
        # A lost claim whose start was recorded (a job claimed alone) is charged, once;
        # any other is refunded: the job ran on its first attempt.
        assert (row["status"], row["attempts"], len(lease_expired[job_id])) == (
            ("done", 2, 1) if started else ("done", 1, 0)), row
        if started is False:
            assert row["lost_claims"] >= 1, row  # refunded
    print(f"RELIABILITY partitions: {path}, {cut}: {len(lost)} claims lost "
          f"({sum(lost.values())} charged), {len(ids) + len(other_ids)} jobs done"
          + (f", the stuck session ended {ended:.2f} s after the partition" if how.transaction
             else f", the session left {stuck['state']}"))


def test_a_partitioned_drain_gives_its_slot_back(load_function, conn, sql, proxy):
    # One drain at a time: the partitioned drain's slot is the only one.
    healthy = _healthy(load_function, PGDRAIN_MAX_DRAINS="1")
    partitioned = load_function("drain", DATABASE_URL=proxy.url(PARTITIONED),
                                PGDRAIN_MAX_DRAINS="1")
    _enqueue(conn, 10)
    other = _enqueue(conn, 5, queue="other")
    # The claim sent: the server commits it and the drain never hears (autocommitting, so
    # no transaction stays open).
    proxy.partition_on(_marker("job_claim_batch"), forward=2)
    summary, remaining, _ = _partitioned_drain(partitioned, proxy, SUITE_SECONDS,
                                               lambda: None)
    assert remaining > 0 and summary["stopped"] == "database_error", summary
    # The invocation is over: within its bound (as a transaction's would), its slot is free.
    deadline = time.monotonic() + _idle_bound(SUITE_SECONDS) + 5
    while _sessions(sql) and time.monotonic() < deadline:
        time.sleep(0.05)
    summary = _invoke(healthy)
    assert summary["stopped"] != "busy", (summary, _sessions(sql))
    assert {r["status"] for r in sql("SELECT status FROM jobs WHERE id = ANY(:ids)",
                                     ids=other)} == {"done"}
