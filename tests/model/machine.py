"""A stateful model of the whole queue, driven at random by hypothesis against real PostgreSQL.

Steps (rules) interleave enqueues with any mix of options, queue controls (cap, rate, pause,
resume), several drains at once on threads (``pgdrain.drain`` with ``Settings``, concurrency 1
or 3, ``max_drains`` 1 to 3), handlers that succeed, fail, snooze, discard, overrun their time
limit or run in the drain's transaction (model_jobs.py), a drain that dies holding its claim,
cancels, the janitor, and the passing of time. Every drain step runs to its end before the next
step, so the database is quiescent between steps, except for the jobs a dead drain holds.

The passing of time: the queue reads time from the database's ``now()``; ``pass_time`` moves
every job's timestamps (run_at, created_at, expires_at, leases, claim and start times) that
many seconds into the past, which is what the queue sees when that much time passes. Rate
windows are not moved: they are checked against the handlers' real start times.

The model is the set of jobs enqueued (what the enqueues answered), what was cancelled when,
which claims a dead drain holds, and the caps and rates in force when; the invariants are
checked after every step against the jobs table and the handlers' executions (RECORDER).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import pgdrain
from pgdrain import Settings
from pgdrain.db import connect
from pgdrain.drain import PostgresStore
from pgdrain.flow import parse_rate
from pgdrain.models import Finish
from pgdrain.policy import Backoff
from pgdrain.store import DRAIN_SLOT_LOCK_KEY
from tests.model import checks
from tests.model.model_jobs import (
    RECORDER,
    REGISTRY,
    SIGNALS,
    STEPS,
    TYPE_RATE,
    Execution,
)
from tests.support.drains import connector_to, run_drain

QUEUES = ("default", "a", "b")
TERMINAL = ("done", "failed", "cancelled")
DRAIN_SECONDS = 2.5
DEAD_LEASE_SECONDS = 60
STATEMENT_SECONDS = 60
"""The longest any statement or lock wait of the test's own connections may take."""
TIME_STEPS = (30, 90, 700, 4000)
"""Seconds ``pass_time`` moves: past a retry's backoff (30 s), a snooze or a delay (60 s), a
dead drain's lease (60 s), a ttl (120 s), a unique window (600 s)."""
# Which plain claim claim_round runs first: each in turn (see claim_round).
_BY_QUEUE_FIRST = itertools.cycle((False, True))

STATS: Counter[str] = Counter()
"""What the runs drove, printed by the test (see it with -s): steps by rule, drains by how
they stopped, handler executions by outcome."""

def settings_given(retention_seconds: int, **overrides: Any) -> dict[str, Any]:
    """The drains' and the janitor's settings: retries due after 30 s (time passes in steps),
    done jobs kept ``retention_seconds`` (0, as shipped: deleted as they finish, see
    DELETED_DDL), failed and cancelled ones never purged."""
    return {"backoff": Backoff(base_seconds=30, cap_seconds=60, jitter=0),
            "retention_seconds": retention_seconds, "failed_retention_seconds": 10**9,
            **overrides}


DELETED_DDL = """
CREATE TABLE IF NOT EXISTS model_deleted (
    id bigint PRIMARY KEY, status text NOT NULL, attempts int NOT NULL, job_type text NOT NULL,
    queue text NOT NULL, ordering_key text, had_result boolean NOT NULL
);
CREATE OR REPLACE FUNCTION model_record_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO model_deleted VALUES (OLD.id, OLD.status, OLD.attempts, OLD.job_type,
                                      OLD.queue, OLD.ordering_key, OLD.result IS NOT NULL);
    RETURN OLD;
END $$;
CREATE OR REPLACE TRIGGER model_record_delete AFTER DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION model_record_delete();
"""
"""Every row deleted, as it was: the model's witness of a done job that leaves no row (a
finish at retention 0 deletes it from running; the janitor's purge from done)."""


@dataclass
class Cancel:
    outcome: str
    at: float


@dataclass
class Model:
    jobs: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Every job enqueued: its options, as given."""
    final: dict[int, str] = field(default_factory=dict)
    """Jobs seen in a final status: they stay in it."""
    cancels: dict[int, Cancel] = field(default_factory=dict)
    dead_claims: dict[int, str] = field(default_factory=dict)
    """Jobs a dead drain claimed, with its lease token."""
    caps: dict[str, int | None] = field(default_factory=dict)
    rates: dict[str, list[tuple[float, str | None]]] = field(
        default_factory=lambda: defaultdict(list))
    """Per queue: (since when, by the monotonic clock, the rate in force)."""
    paused: set[str] = field(default_factory=set)
    sent: dict[str, list[tuple[float, int]]] = field(default_factory=lambda: defaultdict(list))
    """Per signal: (when its send began, by the monotonic clock, its payload)."""


CANCELS = st.one_of(st.none(), st.none(), st.integers(0, 10**6))
SENDS = st.one_of(st.none(), st.none(), st.sampled_from(SIGNALS))
"""A drain step's signal sent while its drains run: mostly none."""
_PAYLOADS = itertools.count(1)
"""A drain step's cancel: mostly none, else which known job (cyclically) to cancel."""

job_specs = st.fixed_dictionaries({
    "job_type": st.sampled_from(["work", "work", "work-tx", "work-rated", "work-resumable",
                                 "work-batch"]),
    "do": st.sampled_from(["ok", "ok", "ok", "fail", "snooze", "discard", "timeout", "steps",
                           "wait"]),
    "signal": st.sampled_from(SIGNALS),
    "queue": st.sampled_from(QUEUES),
    "priority": st.sampled_from([0, 0, -1, 3]),
    "delay": st.sampled_from([None, None, None, 60]),
    "dedupe": st.sampled_from([None, None, "plain", "unique_for", "debounce"]),
    "key": st.sampled_from(["d1", "d2"]),
    "ordering_key": st.sampled_from([None, None, None, None, "k1", "k2"]),
    "tenant": st.sampled_from([None, None, "t1", "t2"]),
    "ttl": st.sampled_from([None, None, None, 120]),
    "max_attempts": st.integers(1, 3),
})


def enqueue_options(spec: dict[str, Any]) -> dict[str, Any]:
    payload = {"do": spec["do"], **({"signal": spec["signal"]} if spec["do"] == "wait" else {})}
    options: dict[str, Any] = {"job_type": spec["job_type"], "payload": payload,
                               "queue": spec["queue"], "priority": spec["priority"],
                               "max_attempts": spec["max_attempts"]}
    for name in ("ordering_key", "tenant"):
        if spec[name] is not None:
            options[name] = spec[name]
    if spec["ttl"] is not None:
        options["ttl_seconds"] = spec["ttl"]
    if spec["dedupe"] is not None:
        options["dedupe_key"] = spec["key"]
    if spec["dedupe"] == "unique_for":
        options["unique_for"] = 600
    if spec["dedupe"] == "debounce":
        options["debounce"] = 45
    elif spec["delay"] is not None:
        options["delay_seconds"] = spec["delay"]
    return options


class SlotSampler(threading.Thread):
    """Counts the drain slots (PGDRAIN_MAX_DRAINS' advisory locks) held at once, sampled
    while a step's drains run."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.conn = connect(url, timeout=STATEMENT_SECONDS)
        self.stop = threading.Event()
        self.most = 0

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                held = self.conn.run("""
                    SELECT count(*) FROM pg_locks
                    WHERE locktype = 'advisory' AND classid = :key::int::oid AND objsubid = 2
                      AND granted AND database = (SELECT oid FROM pg_database
                                                  WHERE datname = current_database())""",
                                     key=DRAIN_SLOT_LOCK_KEY)[0][0]
                self.most = max(self.most, int(held))
                time.sleep(0.003)
        finally:
            self.conn.close()


class QueueModel(RuleBasedStateMachine):
    url: str = ""
    """The test's database, set by the test before the run."""
    retention_seconds: int = 0
    """PGDRAIN_RETENTION_SECONDS of every drain and janitor run (set by the test)."""

    def __init__(self) -> None:
        super().__init__()
        STATS["examples"] += 1
        self.conn = connect(self.url, timeout=STATEMENT_SECONDS)
        # Every wait of the test's own connection is bounded: a drain left holding a lock
        # (one that ran past its bound) fails the step that meets it, not the whole run.
        self.conn.run(f"SET lock_timeout = '{STATEMENT_SECONDS}s'")
        self.conn.run(f"SET statement_timeout = '{STATEMENT_SECONDS}s'")
        self.conn.run("TRUNCATE jobs, job_edges, pgdrain_queues, pgdrain_type_rates, "
                      "model_tx_writes, model_deleted, pgdrain_done_counts, pgdrain_signals "
                      "RESTART IDENTITY")
        RECORDER.clear()
        self.model = Model()
        self.findings: list[str] = []

    def teardown(self) -> None:
        self.conn.close()

    def rows(self, statement: str, **params: Any) -> list[dict[str, Any]]:
        rows = self.conn.run(statement, **params)
        names = [c["name"] for c in self.conn.columns or []]
        return [dict(zip(names, row, strict=True)) for row in rows]

    # --- rules -----------------------------------------------------------------------------

    @initialize(specs=st.lists(job_specs, min_size=2, max_size=8))
    def backlog(self, specs: list[dict[str, Any]]) -> None:
        self.enqueue(specs)

    @rule(specs=st.lists(job_specs, min_size=1, max_size=4))
    def enqueue(self, specs: list[dict[str, Any]]) -> None:
        STATS["step enqueue"] += 1
        options = [enqueue_options(spec) for spec in specs]
        results = pgdrain.enqueue_many(self.conn, options)
        for result, given in zip(results, options, strict=True):
            if result.created:
                STATS["jobs enqueued"] += 1
                assert result.id not in self.model.jobs, f"id {result.id} given twice"
                self.model.jobs[result.id] = given
        for index, (result, given) in enumerate(zip(results, options, strict=True)):
            if result.created:
                continue
            # A duplicate answers an existing job of its key: one enqueued before, or the
            # first of its key earlier in this batch (as if enqueued one by one).
            known = self.model.jobs.get(result.id)
            assert known is not None, f"a duplicate of {given} answered unknown id {result.id}"
            assert known.get("dedupe_key") == given["dedupe_key"], (given, known)
            earlier = [r.id for r, o in zip(results[:index], options, strict=False)
                       if r.created and o.get("dedupe_key") == given["dedupe_key"]]
            assert earlier in ([], [result.id]), (
                f"job {index} of the batch answered {result.id}, not the earlier job of its "
                f"key {earlier}")

    @rule(parents=st.lists(job_specs, min_size=1, max_size=3), child=job_specs,
          after=st.sampled_from(["done", "finished"]), succeed=st.booleans(),
          earlier=st.one_of(st.none(), st.integers(0, 10**6)))
    def enqueue_graph(self, parents: list[dict[str, Any]], child: dict[str, Any], after: str,
                      succeed: bool, earlier: int | None) -> None:
        """Parents and a child that depends on them (``after``), in one batch; with
        ``succeed``, parents that do their work (else as drawn: many fail, snooze or time
        out); with ``earlier``, the child also depends on a job enqueued before (cyclically
        chosen among those still in the table)."""
        STATS["step enqueue_graph"] += 1
        batch = [enqueue_options({**spec, "dedupe": None, "delay": None,
                                  **({"do": "ok"} if succeed else {})}) for spec in parents]
        kid = enqueue_options({**child, "dedupe": None})
        kid["depends_on"] = [{"index": i} for i in range(len(batch))]
        kid["after"] = after
        present = [r["id"] for r in self.rows("SELECT id FROM jobs ORDER BY id")]
        if earlier is not None and present:
            kid["depends_on"].append(present[earlier % len(present)])
        results = pgdrain.enqueue_many(self.conn, [*batch, kid])
        for result, given in zip(results, [*batch, kid], strict=True):
            assert result.created and result.id not in self.model.jobs, result
            STATS["jobs enqueued"] += 1
            self.model.jobs[result.id] = given
        STATS[f"children after {after}"] += 1

    @rule(queue=st.sampled_from(QUEUES), cap=st.sampled_from([None, 1, 2, 5]),
          rate=st.sampled_from([None, None, "2/s", "5/s"]),
          pause=st.sampled_from([None, None, True, False]))
    def set_queue(self, queue: str, cap: int | None, rate: str | None,
                  pause: bool | None) -> None:
        """A queue's cap and rate set (None lifts them), and it paused or resumed."""
        STATS["step set_queue"] += 1
        pgdrain.set_queue(self.conn, queue, max_running=cap, rate=rate, new=True)
        self.model.caps[queue] = cap
        self.model.rates[queue].append((time.monotonic(), rate))
        if pause:
            pgdrain.pause(self.conn, queue, new=True)
            self.model.paused.add(queue)
        elif pause is False:
            pgdrain.resume(self.conn, queue)
            self.model.paused.discard(queue)

    @rule(seconds=st.sampled_from(TIME_STEPS), janitor=st.booleans())
    def pass_time(self, seconds: int, janitor: bool) -> None:
        """Time passes; then, with ``janitor``, the janitor runs on its own."""
        STATS["step pass_time"] += 1
        self.conn.run("""
            UPDATE jobs SET run_at = run_at - make_interval(secs => :s),
                            created_at = created_at - make_interval(secs => :s),
                            expires_at = expires_at - make_interval(secs => :s),
                            lease_expires_at = lease_expires_at - make_interval(secs => :s),
                            claimed_at = claimed_at - make_interval(secs => :s),
                            started_at = started_at - make_interval(secs => :s),
                            finished_at = finished_at - make_interval(secs => :s)""",
                      s=float(seconds))
        self.conn.run("""
            UPDATE pgdrain_signals SET sent_at = sent_at - make_interval(secs => :s),
                                       expires_at = expires_at - make_interval(secs => :s)""",
                      s=float(seconds))
        if janitor:
            STATS["step janitor"] += 1
            pgdrain.run_janitor(self.conn, Settings(**settings_given(self.retention_seconds)),
                                REGISTRY)

    @rule(name=st.sampled_from(SIGNALS))
    def send_signal(self, name: str) -> None:
        """The app sends a signal (a fresh payload each time)."""
        STATS["step send_signal"] += 1
        self.send_now(name)

    @precondition(lambda self: len(self.model.dead_claims) < 3)
    @rule(batch=st.integers(1, 3), fair=st.booleans())
    def drain_dies(self, batch: int, fair: bool) -> None:
        """A drain claims and dies before it starts a job (killed, out of memory): its
        claims stay running until their lease expires."""
        STATS["step drain_dies"] += 1
        store = self.store()
        try:
            jobs = store.claim(batch_size=batch, lease_seconds=DEAD_LEASE_SECONDS, queues=None,
                               fair=fair)
        finally:
            store.discard()
        for job in jobs:
            self.model.dead_claims[job.id] = job.lease_token

    @rule(drains=st.integers(1, 3), concurrency=st.sampled_from([1, 3]),
          max_drains=st.integers(1, 3), max_jobs=st.sampled_from([3, 100]),
          batch_size=st.sampled_from([1, 10]), cancel=CANCELS, send=SENDS)
    def drain(self, drains: int, concurrency: int, max_drains: int, max_jobs: int,
              batch_size: int, cancel: int | None, send: str | None) -> None:
        """Drains at once; with ``cancel``, a job (the cancel-th known, cyclically) is
        cancelled while they run; with ``send``, that signal is sent while they run."""
        STATS["step drain"] += 1
        self.drain_step(drains, concurrency, max_drains, max_jobs, batch_size, cancel, send)

    @rule(drains=st.integers(1, 3), concurrency=st.sampled_from([1, 3]),
          max_drains=st.integers(1, 3), max_jobs=st.sampled_from([3, 100]),
          batch_size=st.sampled_from([1, 10]), cancel=CANCELS, send=SENDS)
    def drain_again(self, drains: int, concurrency: int, max_drains: int, max_jobs: int,
                    batch_size: int, cancel: int | None, send: str | None) -> None:
        """The same as ``drain``: a second rule makes drains a larger share of the steps."""
        STATS["step drain"] += 1
        self.drain_step(drains, concurrency, max_drains, max_jobs, batch_size, cancel, send)

    def drain_step(self, drains: int, concurrency: int, max_drains: int, max_jobs: int,
                   batch_size: int, cancel: int | None, send: str | None = None) -> None:
        claimable = self.claim_everything()
        held = self.held_by_dead_drains()
        began = time.monotonic()
        victim = None
        if cancel is not None and self.model.jobs:
            ids = sorted(self.model.jobs)
            victim = ids[cancel % len(ids)]
        summaries, errors = self.run_drains(drains, victim, send, concurrency=concurrency,
                                            max_drains=max_drains, max_jobs=max_jobs,
                                            batch_size=batch_size)
        assert not errors, errors
        step = [e for e in RECORDER.snapshot() if e.started >= began]
        STATS.update(f"drain stopped {s.stopped}" for s in summaries)
        STATS.update(f"handler {e.outcome}" for e in step)
        running_on = [e for e in step if e.ended is None]
        assert not running_on, f"handlers still running after their drains returned: " \
                               f"{running_on}"
        self.check_caps(step, held)
        self.out_of_time(summaries)
        if victim is None:
            # A cancel during the drains locks its job (and, for a parent, its children)
            # for its statement: a claim then skips them (SKIP LOCKED) and may find nothing
            # else, and the drain stops empty with them due; the next drain takes them.
            self.check_bounded_wait(claimable, summaries, began)

    # --- the steps' own checks ---------------------------------------------------------------

    def store(self) -> PostgresStore:
        connector = connector_to(self.url)
        connector.open(time.monotonic() + 30)
        return PostgresStore(connector, 0, (), REGISTRY.type_rates())

    def claim_everything(self) -> list[pgdrain.Job]:
        """The due count checked against what the drain's claims take, on the quiescent
        database: claim until nothing comes, count, and hand everything back unstarted (its
        attempts refunded). Returns what was taken."""
        store = self.store()
        try:
            due = store.due(limit=10_000, queues=None)
            # The count read queue by queue (a drain beside a paused or controlled queue's)
            # is the same count.
            by_queue = store.due(limit=10_000, queues=None, by_queue=True)
            assert by_queue == due, f"due count {due}, read queue by queue {by_queue}"
            taken: list[pgdrain.Job] = []
            while True:
                got = self.claim_round(store)
                if not got:
                    break
                taken += got
            if taken:
                written = store.finish_many([Finish.release(job) for job in taken])
                assert sorted(written.ids) == sorted(j.id for j in taken), written
        finally:
            store.discard()
        # A rate's window slides with real time between the count and the claims, so a
        # rated job may come free in between: exact for all others.
        rated_queues = {q for q, history in self.model.rates.items()
                        if history and history[-1][1]}
        unrated = [j for j in taken
                   if j.job_type != "work-rated" and j.queue not in rated_queues]
        assert len(unrated) <= due <= len(taken), (
            f"due count {due}, but the claims took {len(taken)} ({len(unrated)} not under a "
            f"rate): {sorted((j.id, j.queue, j.job_type) for j in taken)}")
        return taken

    @staticmethod
    def claim_round(store: PostgresStore) -> list[pgdrain.Job]:
        lease = float(DEAD_LEASE_SECONDS)
        got: list[pgdrain.Job] = []
        alone = store.claim_alone(lease_seconds=lease, queues=None)
        if alone is not None:
            got.append(alone)
        # Both plain claims, each first in turn: either must take what the other would.
        first = next(_BY_QUEUE_FIRST)
        for by_queue in (first, not first):
            got += store.claim(batch_size=100, lease_seconds=lease, queues=None,
                               by_queue=by_queue)
        got += store.claim(batch_size=100, lease_seconds=lease, queues=None, fair=True)
        got += store.claim_controlled(batch_size=100, lease_seconds=lease, queues=None).jobs
        return got

    def held_by_dead_drains(self) -> dict[str, int]:
        """Per queue, the dead drains' claims that stay running through a drain step (their
        leases outlast it): they take room under a cap."""
        rows = self.rows("""
            SELECT queue, count(*) AS n FROM jobs
            WHERE status = 'running' AND lease_expires_at > now() + interval '20 seconds'
            GROUP BY queue""")
        return {r["queue"]: int(r["n"]) for r in rows}

    def cancel_now(self, job_id: int) -> None:
        outcome = pgdrain.cancel(self.conn, [job_id])[job_id]
        if outcome in ("cancelled", "cancel_requested"):
            self.model.cancels.setdefault(job_id, Cancel(outcome, time.monotonic()))

    def send_now(self, name: str) -> None:
        payload = next(_PAYLOADS)
        self.model.sent[name].append((time.monotonic(), payload))
        pgdrain.signal(self.conn, name, payload)

    def run_drains(self, count: int, victim: int | None, send: str | None, **settings: Any
                   ) -> tuple[list[Any], list[str]]:
        summaries: list[Any] = []
        errors: list[str] = []
        sampler = SlotSampler(self.url)

        def one() -> None:
            try:
                summaries.append(run_drain(self.url, REGISTRY, DRAIN_SECONDS,
                                           **settings_given(self.retention_seconds,
                                                            **settings)))
            except BaseException as exc:  # reported by the step
                errors.append(repr(exc))

        threads = [threading.Thread(target=one) for _ in range(count)]
        sampler.start()
        for thread in threads:
            thread.start()
        if victim is not None:
            time.sleep(0.05)
            self.cancel_now(victim)
        if send is not None:
            time.sleep(0.05)
            STATS["signals sent while drains ran"] += 1
            self.send_now(send)
        for thread in threads:
            thread.join(60)
        sampler.stop.set()
        sampler.join(10)
        assert not any(t.is_alive() for t in threads), "a drain ran past its bound"
        assert sampler.most <= settings["max_drains"], (
            f"{sampler.most} drain slots held at once, PGDRAIN_MAX_DRAINS="
            f"{settings['max_drains']}")
        return summaries, errors

    def out_of_time(self, summaries: list[Any]) -> None:
        """A drain that ran out of time before it could write outcomes (a loaded machine)
        leaves its jobs running, as a dead one does: they come back when their leases
        expire."""
        if not {s.stopped for s in summaries} & {"deadline", "database_error"}:
            return
        for row in self.rows("SELECT id, lease_token::text AS token FROM jobs "
                             "WHERE status = 'running'"):
            if self.model.dead_claims.get(row["id"]) != row["token"]:
                STATS["jobs left running by a drain out of time"] += 1
                self.model.dead_claims[row["id"]] = row["token"]

    def check_caps(self, step: list[Execution], held: dict[str, int]) -> None:
        for queue, cap in self.model.caps.items():
            if cap is None:
                continue
            mine = [e for e in step if e.queue == queue]
            most = checks.most_at_once(mine)
            assert most + held.get(queue, 0) <= max(cap, held.get(queue, 0)), (
                f"queue {queue} capped at {cap}: {most} handlers at once "
                f"(+{held.get(queue, 0)} held by dead drains)")

    def check_bounded_wait(self, claimable: list[pgdrain.Job], summaries: list[Any],
                           began: float) -> None:
        """Drains that all stopped because nothing was left ran every job that was
        claimable when they began (no job waits past one drain to empty), except those of a
        rate limit, which may wait for their window."""
        stops = {s.stopped for s in summaries}
        if not stops <= {"empty", "busy"} or "empty" not in stops:
            return
        rated = {q for q, history in self.model.rates.items() if history and history[-1][1]}
        started = {e.job_id for e in RECORDER.snapshot() if e.started >= began}
        waiting = [j.id for j in claimable
                   if j.queue not in rated and j.job_type != "work-rated"
                   and j.id not in started]
        if not waiting:
            return
        rows = self.rows("SELECT id, status FROM jobs WHERE id = ANY(:ids)", ids=waiting)
        still = [r for r in rows if r["status"] == "pending"]
        assert not still, (f"claimable jobs {still} not started by drains that stopped "
                           f"{sorted(stops)}")

    # --- invariants, after every step ----------------------------------------------------

    @invariant()
    def queue_matches_the_model(self) -> None:
        STATS["checks"] += 1
        rows = {r["id"]: r for r in self.rows(
            "SELECT id, job_type, queue, status, attempts, lease_token::text AS lease_token, "
            "ordering_key, state, payload->>'do' AS do, payload->>'signal' AS signal, "
            "after_parents FROM jobs")}
        executions = RECORDER.snapshot()
        rows.update(self.deleted_as_done(rows, executions))
        self.check_jobs(rows)
        self.check_cancels(rows, executions)
        self.check_charges(rows, executions)
        self.check_ordering(rows, executions)
        self.check_rates(executions)
        self.check_transactions(rows)
        self.check_checkpoints(rows, executions)
        self.check_dependencies(rows, executions)
        self.check_signals(rows, executions)

    def deleted_as_done(self, rows: dict[int, dict[str, Any]],
                        executions: list[Execution]) -> dict[int, dict[str, Any]]:
        """The rows deleted so far, each as the done job it must have been: deleted by its
        finish (from running, retention 0, nothing to keep) for an attempt whose handler
        returned, or purged after it was done. Any other delete is a job lost."""
        returned = {(e.job_id, e.attempt) for e in executions if e.outcome == "returned"}
        found = {}
        for row in self.rows("SELECT * FROM model_deleted"):
            job_id = row["id"]
            assert job_id not in rows, f"job {job_id} deleted, and still there: {row}"
            if row["status"] == "running":
                assert self.retention_seconds == 0 and not row["had_result"], (
                    f"job {job_id} deleted from running at retention "
                    f"{self.retention_seconds}: {row}")
                assert (job_id, row["attempts"]) in returned, (
                    f"job {job_id} deleted by a finish of attempt {row['attempts']}, whose "
                    f"handler never returned: {row}")
            else:
                assert row["status"] == "done", f"job {job_id} deleted while {row['status']}"
            found[job_id] = {"id": job_id, "job_type": row["job_type"], "queue": row["queue"],
                             "status": "done", "attempts": row["attempts"],
                             "lease_token": None, "ordering_key": row["ordering_key"]}
        STATS["done rows deleted, seen by a check"] += len(found)
        return found

    def check_jobs(self, rows: dict[int, dict[str, Any]]) -> None:
        lost = sorted(set(self.model.jobs) - set(rows))
        assert not lost, f"jobs lost: {lost}"
        assert set(rows) <= set(self.model.jobs), "jobs the model never enqueued"
        for job_id, row in rows.items():
            status = row["status"]
            final = self.model.final.get(job_id)
            assert final is None or status == final, \
                f"job {job_id} left its final status {final} for {status}"
            if status in TERMINAL:
                self.model.final[job_id] = status
            if status == "running":
                assert self.model.dead_claims.get(job_id) == row["lease_token"], \
                    f"job {job_id} left running by a drain that returned: {row}"

    def check_cancels(self, rows: dict[int, dict[str, Any]],
                      executions: list[Execution]) -> None:
        for job_id, cancel in self.model.cancels.items():
            status = rows[job_id]["status"]
            if cancel.outcome == "cancelled":
                assert status == "cancelled", f"job {job_id} cancelled, now {status}"
            # A job running when it was cancelled may still start the attempt it was
            # claimed for (a drain runs its batch one job after another); nothing more.
            ran = [e for e in executions if e.job_id == job_id and e.started > cancel.at]
            allowed = 1 if cancel.outcome == "cancel_requested" else 0
            assert len(ran) <= allowed, \
                f"job {job_id} ran after its cancel ({cancel.outcome}): {ran}"

    def check_charges(self, rows: dict[int, dict[str, Any]],
                      executions: list[Execution]) -> None:
        started: dict[int, set[int]] = defaultdict(set)
        for execution in executions:
            started[execution.job_id].add(execution.attempt)
        for job_id, row in rows.items():
            if row["status"] == "running":
                continue
            charged = set(range(1, row["attempts"] + 1))
            assert charged <= started[job_id], (
                f"job {job_id} ({row['status']}) charged attempts "
                f"{sorted(charged - started[job_id])} it never started")

    def check_ordering(self, rows: dict[int, dict[str, Any]],
                       executions: list[Execution]) -> None:
        by_job: dict[int, list[Execution]] = defaultdict(list)
        for execution in executions:
            by_job[execution.job_id].append(execution)
        for job_id, runs in by_job.items():
            assert not checks.overlapping(runs), f"job {job_id} ran twice at once: {runs}"
        keys: dict[str, list[int]] = defaultdict(list)
        for job_id in sorted(rows):
            if rows[job_id]["ordering_key"] is not None:
                keys[rows[job_id]["ordering_key"]].append(job_id)
        for key, ids in keys.items():
            # A job with parents joins its key's line when it becomes due, not when it was
            # enqueued (else a child listed before its parent in one batch would hold the key
            # its parent needs), and one that waits for a signal leaves it while it waits
            # (docs/queue.md): the jobs of the key after such a job may run while it waits.
            for earlier, later in itertools.pairwise(
                    [i for i in ids if rows[i].get("after_parents") is None
                     and rows[i].get("do") != "wait"]):
                if not by_job.get(later):
                    continue
                assert rows[earlier]["status"] in TERMINAL, (
                    f"key {key}: job {later} ran while job {earlier} is "
                    f"{rows[earlier]['status']}")
                first_later = min(e.started for e in by_job[later])
                last_earlier = max((checks.end_of(e) for e in by_job.get(earlier, [])),
                                   default=-math.inf)
                assert last_earlier <= first_later, (
                    f"key {key}: job {later} started before job {earlier} ended")

    def check_rates(self, executions: list[Execution]) -> None:
        type_rate = parse_rate(TYPE_RATE)
        starts = [e.started for e in executions if e.job_type == "work-rated"]
        most = checks.most_in_any_window(starts, type_rate.period)
        assert most <= type_rate.limit, f"type rate {TYPE_RATE}: {most} starts in a window"
        for queue, history in self.model.rates.items():
            bounds = [since for since, _ in history[1:]] + [math.inf]
            for (since, rate), until in zip(history, bounds, strict=True):
                if rate is None:
                    continue
                limit = parse_rate(rate)
                mine = [e.started for e in executions
                        if e.queue == queue and since <= e.started < until]
                most = checks.most_in_any_window(mine, limit.period)
                assert most <= limit.limit, f"queue {queue} at {rate}: {most} in a window"

    def check_checkpoints(self, rows: dict[int, dict[str, Any]],
                          executions: list[Execution]) -> None:
        """A resumable ``steps`` job's saved step is the number of its runs that saved one
        (each ends by continuing or returning): none lost, none saved by a run that no longer
        held the job; one that is done saved its last."""
        saved: dict[int, int] = defaultdict(int)
        for execution in executions:
            if execution.outcome in ("Continue", "returned"):
                saved[execution.job_id] += 1
        for job_id, row in rows.items():
            if row["job_type"] != "work-resumable" or row.get("do") != "steps":
                continue
            step = (row["state"] or {}).get("step", 0)
            assert step == saved[job_id], (
                f"job {job_id} saved step {step}, after {saved[job_id]} runs that saved: {row}")
            if row["status"] == "done":
                assert step == STEPS, f"job {job_id} done at step {step}: {row}"
            STATS["resumable jobs checked"] += 1

    def check_transactions(self, rows: dict[int, dict[str, Any]]) -> None:
        writes = self.rows("SELECT job_id, attempt FROM model_tx_writes")
        written = [(w["job_id"], w["attempt"]) for w in writes]
        done = sorted((i, r["attempts"]) for i, r in rows.items()
                      if r["job_type"] == "work-tx" and r["status"] == "done")
        assert sorted(written) == done, (
            f"transactional writes {sorted(written)}, done transactional jobs {done}")

    def check_dependencies(self, rows: dict[int, dict[str, Any]],
                           executions: list[Execution]) -> None:
        """A child waits while a parent has not ended, with exactly that many parents left;
        it becomes due (and may run) only once every parent ended as it needs: all done
        (after done) or each ended (after finished); one its parent cancelled names a parent
        that ended failed or cancelled; an edge records the end its parent has. A child
        waiting for done parents first ran after each parent's handler returned."""
        edges: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for edge in self.rows("""
                SELECT e.child_id, e.parent_id, e.parent_status, j.status, j.parents_left,
                       j.after_parents, j.cancelled_by, j.wait_signal
                FROM job_edges AS e JOIN jobs AS j ON j.id = e.child_id"""):
            edges[edge["child_id"]].append(edge)
        returned: dict[int, float] = {}
        first_start: dict[int, float] = {}
        for e in executions:
            first_start.setdefault(e.job_id, e.started)
            if e.outcome == "returned" and e.ended is not None:
                returned[e.job_id] = e.ended
        for child, mine in edges.items():
            status, after = mine[0]["status"], mine[0]["after_parents"]
            ends = {e["parent_id"]: e["parent_status"] for e in mine}
            open_ = [p for p, end in ends.items() if end is None]
            for parent, end in ends.items():
                if end is not None and parent in rows:
                    assert rows[parent]["status"] == end, (
                        f"edge {parent}->{child} says {end}, the parent is {rows[parent]}")
            if status == "waiting" and mine[0]["wait_signal"] is None:
                assert open_ and mine[0]["parents_left"] == len(open_), (child, mine)
            elif status == "waiting":  # for a signal: it ran, its parents had ended
                assert not open_, f"job {child} waits for a signal, parents open: {mine}"
            elif mine[0]["cancelled_by"] is not None:
                assert ends[mine[0]["cancelled_by"]] in ("failed", "cancelled"), (child, mine)
            elif status != "cancelled":
                assert not open_, f"job {child} {status} with parents not ended: {mine}"
                if after == "done":
                    assert set(ends.values()) == {"done"}, (child, mine)
            if after == "done" and child in first_start:
                late = [p for p in ends if p not in returned
                        or returned[p] > first_start[child]]
                assert not late, f"job {child} ran before its parents {late} returned"
                STATS["children checked against their parents' runs"] += 1

    def check_signals(self, rows: dict[int, dict[str, Any]],
                      executions: list[Execution]) -> None:
        """No job waits for a signal that was sent (and is kept): a send and a wait that
        meet never miss each other. A run that got a signal got a payload sent for its name
        before it started; a job's wait gave its attempt back (check_charges)."""
        missed = self.rows("""
            SELECT j.id, j.wait_signal FROM jobs AS j
            JOIN pgdrain_signals AS s ON s.name = j.wait_signal
            WHERE j.status = 'waiting' AND s.sent_at IS NOT NULL""")
        assert not missed, f"jobs waiting for signals already sent: {missed}"
        for row in self.rows("SELECT wait_result->>'received' AS received, count(*) AS n "
                             "FROM jobs WHERE wait_result IS NOT NULL GROUP BY 1"):
            STATS[f"jobs whose wait ended, received={row['received']} (seen by a check)"] += \
                row["n"]
        names = {i: r.get("signal") for i, r in rows.items() if r.get("do") == "wait"}
        for execution in executions:
            if execution.signal is None or execution.job_id not in names:
                continue
            received, payload = execution.signal
            STATS[f"wait runs that {'received' if received else 'timed out'}"] += 1
            if received:
                sent = [p for at, p in self.model.sent[names[execution.job_id]]
                        if at <= execution.started]
                assert payload in sent, (
                    f"job {execution.job_id} got {payload!r}, not a payload sent for "
                    f"{names[execution.job_id]} before it ran: {sent}")
