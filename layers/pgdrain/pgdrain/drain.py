"""One drain pass: the janitor, then claim / run / record in batches until the queue has nothing
due, the job limit is reached, or the deadline is near. Then return a summary.

The drain is what the Lambda function runs on every invocation; it knows nothing of Lambda
itself: the caller passes a ``time_left`` clock (the context's remaining time) and an observer
for logs and metrics.

Time: of the invocation's time left at the start, the safety margin (``Settings.margin_for``)
is kept for recording outcomes and returning: no handler runs into it. Database I/O may use
half of it: every statement, socket read and lock wait is bounded so that it ends before the
other half, which is left for returning. A database that stops answering, or a lock held by
someone else, ends the drain with ``stopped: "database_error"`` and a short ``error``; what it
claimed and did not record comes back when the leases expire, uncharged.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from . import store as pgstore
from .completer import Completer, Recorded
from .db import Connector, NoTimeLeft, Session
from .errors import (
    ConfigError,
    DatabaseConnectError,
    DatabaseUnavailable,
    Discard,
    HandlerTimeout,
)
from .janitor import run_janitor, vacuum_if_due
from .models import Finish, JanitorResult, Job, Outcome, Written
from .policy import Backoff, Fail, Retry, Wait, after_failure, decide
from .registry import Handler, Registry
from .settings import Settings
from .timeouts import TimeLimits

log = logging.getLogger(__name__)

# An invocation's first job runs with less than its budget (see _runs_cut_short), but not with
# less than this: a sliver of time would only spend its attempt on a certain timeout.
MIN_CUT_SHORT_SECONDS = 1.0

# Of the safety margin, the share database I/O may still use; the rest is for returning.
IO_SHARE_OF_MARGIN = 0.5

# How an outcome is counted in the summary (and named to the observer).
_COUNTED = {Outcome.DONE: "done", Outcome.RETRY: "retried", Outcome.FAIL: "failed",
            Outcome.SNOOZE: "snoozed", Outcome.RELEASE: "released"}


@dataclass
class DrainSummary:
    """What one drain did. The first six counts are the contract's."""

    reclaimed: int = 0
    """Expired leases the janitor recovered (back to pending, or to failed: reclaimed_failed)."""
    claimed: int = 0
    done: int = 0
    retried: int = 0
    failed: int = 0
    """Jobs this drain dead-lettered (out of attempts, discarded, or no handler)."""
    released: int = 0
    """Claimed but handed back unstarted before the deadline, attempt refunded."""
    snoozed: int = 0
    stale: int = 0
    """Finishing writes that changed nothing because the claim had been lost."""
    reclaimed_failed: int = 0
    reclaimed_refunded: int = 0
    """Of ``reclaimed``: jobs whose start was never recorded, given their attempt back."""
    purged: int = 0
    vacuumed: int = 0
    """1 if this drain vacuumed the jobs table (PGDRAIN_VACUUM_DEAD_TUPLES)."""
    stopped: str = "empty"
    """Why the drain stopped: empty, max_jobs, deadline or database_error."""
    error: str | None = None
    """With ``stopped: "database_error"``: what went wrong, in a few words (details are in
    the log)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class DrainObserver(Protocol):
    """Receives each job's outcome, for logs and metrics, and the end of each claimed batch."""

    def job_finished(self, job: Job, outcome: str, duration: float,
                     error: BaseException | None) -> None: ...

    def batch_finished(self) -> None: ...


class _NullObserver:
    def job_finished(self, job: Job, outcome: str, duration: float,
                     error: BaseException | None) -> None:
        pass

    def batch_finished(self) -> None:
        pass


class DrainStore(Protocol):
    """What the drain needs of the queue's storage: ``PostgresStore`` (a ``Connector``) in
    production, ``tests/support/fake_store.py`` in the drain's unit tests."""

    @property
    def connected(self) -> bool: ...

    def open(self, deadline: float) -> None:
        """Connect (or check the connection), every wait bounded by ``deadline``."""

    def discard(self) -> None:
        """Drop the connection (it may be mid-transaction or dead)."""

    def janitor(self, settings: Settings, registry: Registry) -> JanitorResult: ...

    def vacuum_if_due(self, settings: Settings) -> bool: ...

    def claim(self, *, batch_size: int, lease_seconds: float,
              queues: Sequence[str] | None) -> list[Job]: ...

    def claim_alone(self, *, lease_seconds: float, queues: Sequence[str] | None) -> Job | None: ...

    def finish_many(self, finishes: Sequence[Finish]) -> Written: ...

    def session(self) -> Session:
        """The connection, for a transactional handler's transaction."""


class PostgresStore:
    """The drain's store on PostgreSQL: the catalogue's statements on a ``Connector``."""

    def __init__(self, connector: Connector):
        self.connector = connector

    @property
    def connected(self) -> bool:
        return self.connector.connected

    def open(self, deadline: float) -> None:
        self.connector.open(deadline)

    def discard(self) -> None:
        self.connector.discard()

    def session(self) -> Session:
        return self.connector.session()

    def janitor(self, settings: Settings, registry: Registry) -> JanitorResult:
        return run_janitor(self.session(), settings, registry)

    def vacuum_if_due(self, settings: Settings) -> bool:
        return vacuum_if_due(self.session(), settings)

    def claim(self, *, batch_size: int, lease_seconds: float,
              queues: Sequence[str] | None) -> list[Job]:
        return pgstore.claim(self.session(), batch_size=batch_size, lease_seconds=lease_seconds,
                           queues=queues)

    def claim_alone(self, *, lease_seconds: float, queues: Sequence[str] | None) -> Job | None:
        return pgstore.claim_alone(self.session(), lease_seconds=lease_seconds, queues=queues)

    def finish_many(self, finishes: Sequence[Finish]) -> Written:
        return pgstore.finish_many(self.session(), finishes)


class _StaleClaim(Exception):
    """A transactional job's done write found its claim lost: roll its writes back."""


def drain(
    store: Connector | DrainStore,
    registry: Registry,
    settings: Settings,
    *,
    time_left: Callable[[], float],
    observer: DrainObserver | None = None,
) -> DrainSummary:
    """Run the janitor, then drain due jobs; see the module docstring.

    ``time_left`` returns the seconds until the invocation's deadline. The drain never starts a
    job whose time budget (its handler's timeout, or ``job_timeout_seconds``) does not fit in
    the time left minus the safety margin; jobs it claimed but cannot start are released with
    their attempt refunded, and the drain stops. The exception is the invocation's first job,
    which runs cut to the time left if at least a second is left, and a job whose budget is
    longer than the function can ever give (see ``_runs_cut_short``): otherwise such budgets
    would block the queue.

    ``store`` is a ``Connector`` (PostgreSQL) or any ``DrainStore``. Its connection is opened
    (or checked) here, bounded by the time left: a database failure returns the summary with
    ``stopped: "database_error"`` rather than raising.
    """
    start_left = time_left()
    if start_left >= settings.lease_seconds:
        raise ConfigError(
            f"PGDRAIN_LEASE_SECONDS ({settings.lease_seconds}) must be longer than the "
            f"function timeout ({start_left:.0f} s left at start): otherwise a live "
            "invocation could lose its jobs to the janitor")
    if isinstance(store, Connector):
        store = PostgresStore(store)
    run = _Drain(store, registry, settings, time_left, observer or _NullObserver(), start_left)
    with TimeLimits(on_stuck=run.handler_stuck) as limits:
        run.limits = limits
        return run.run()


def shortest_runnable_seconds(registry: Registry, settings: Settings) -> float:
    """The least time after the safety margin in which a drain can run a job at all."""
    budgets = [h.timeout for h in registry if h.timeout is not None]
    return min([*budgets, settings.job_timeout_seconds, MIN_CUT_SHORT_SECONDS])


class _Drain:
    limits: TimeLimits

    def __init__(self, store: DrainStore, registry: Registry, settings: Settings,
                 time_left: Callable[[], float], observer: DrainObserver, start_left: float):
        self.store = store
        self.registry = registry
        self.settings = settings
        self.time_left = time_left
        self.observer = observer
        self.summary = DrainSummary()
        self.completer = Completer(store.finish_many, self._recorded)
        self.started = 0
        self.alone_due = False
        self.running: Job | None = None
        budgets = [h.timeout for h in registry if h.timeout is not None]
        self.smallest_budget = min([*budgets, settings.job_timeout_seconds])
        self.margin = settings.margin_for(start_left)
        self.usable = start_left - self.margin
        """The most time any job of this invocation can have."""
        self.cut_short_types: set[str] = set()
        self.io_deadline = time.monotonic() + start_left - self.margin * (1 - IO_SHARE_OF_MARGIN)

    def run(self) -> DrainSummary:
        try:
            self.store.open(self.io_deadline)
            self._janitor()
            self._drain()
        except DatabaseUnavailable as exc:
            self._stopped_by_database(exc)
        return self.summary

    def _janitor(self) -> None:
        janitor = self.store.janitor(self.settings, self.registry)
        self.summary.reclaimed = janitor.reclaimed + janitor.failed
        self.summary.reclaimed_failed = janitor.failed
        self.summary.reclaimed_refunded = janitor.refunded
        self.summary.purged = janitor.purged
        self.alone_due = janitor.alone_due
        self.summary.vacuumed = int(self.store.vacuum_if_due(self.settings))

    def _drain(self) -> None:
        while True:
            room = self.settings.max_jobs - self.summary.claimed
            if room <= 0:
                self.summary.stopped = "max_jobs"
                return
            if self.time_left() - self.margin < self._least_to_start():
                self.summary.stopped = "deadline"
                return
            jobs = self._claim(room)
            if not jobs:
                return
            self.summary.claimed += len(jobs)
            if not self._run_batch(jobs):
                self.summary.stopped = "deadline"
                return

    def _claim(self, room: int) -> list[Job]:
        """The next claim: a job whose claim was lost before, alone, while there are any
        (the janitor said so); then batches."""
        queues = self.settings.queues or None
        if self.alone_due:
            job = self.store.claim_alone(lease_seconds=self.settings.lease_seconds,
                                         queues=queues)
            if job is not None:
                return [job]
            self.alone_due = False
        return self.store.claim(batch_size=min(self.settings.batch_size, room),
                                lease_seconds=self.settings.lease_seconds, queues=queues)

    def _stopped_by_database(self, exc: DatabaseUnavailable) -> None:
        """End the drain on a database failure, with a summary that says so."""
        self.store.discard()
        if isinstance(exc, NoTimeLeft):  # our own clock ran out before the next statement
            self.summary.stopped = "deadline"
            log.warning("drain stopped at its deadline with outcomes unwritten; those jobs "
                        "come back uncharged when their leases expire")
            return
        self.summary.stopped = "database_error"
        # The summary may reach an API client: pgdrain's short message, never the server's
        # fields, host or user (DatabaseConnectError says where; that is for the log).
        self.summary.error = ("could not connect to the database"
                              if isinstance(exc, DatabaseConnectError) else str(exc))
        log.error("drain stopped: %s; the jobs it claimed and did not record come back "
                  "uncharged when their leases expire", exc, exc_info=exc)

    def handler_stuck(self, seconds: float) -> None:
        """Called by the time limit when a handler ignores every HandlerTimeout."""
        job = self.running
        log.error("job %s (%s) ignored its time limit: still running %.1f s after it ran out, "
                  "catching HandlerTimeout (except BaseException, or a bare except) at more "
                  "than one level, or inside code that never returns to Python. If it does not "
                  "stop, Lambda ends this invocation at its timeout and its jobs come back "
                  "uncharged when their leases expire. Never swallow HandlerTimeout.",
                  job.id if job else "?", job.job_type if job else "?", seconds)

    def _run_batch(self, jobs: list[Job]) -> bool:
        """Run a claimed batch; False if the deadline stopped it (the rest was released)."""
        index = 0
        try:
            for index, job in enumerate(jobs):
                if not self._start(job, jobs[index:]):
                    return False
                self.completer.flush_if_due()
            self.completer.flush()
            return True
        except BaseException:
            # Record what finished and hand back what never started, if the connection is
            # still there (no reconnecting on the way out: the deadline may be near). The error
            # that stopped the batch is the one to report; the job it stopped in, and anything
            # not written, comes back uncharged when its lease expires.
            if self.store.connected:
                with suppress(Exception):
                    self._add_released(jobs[index + 1:])
                    self.completer.flush()
            raise
        finally:
            self.observer.batch_finished()

    def _start(self, job: Job, rest: list[Job]) -> bool:
        """Run ``job`` (or fail it at once if it cannot run); False, releasing ``rest`` (the
        job and those after it), when there is no time for it."""
        if job.payload_error is not None:
            self._fail_at_once(job, ValueError(f"undecodable payload: {job.payload_error}"))
            return True
        handler = self.registry.get(job.job_type)
        if handler is None:
            self._fail_at_once(job, LookupError(
                f"no handler registered for job_type '{job.job_type}'"))
            return True
        budget = handler.timeout or self.settings.job_timeout_seconds
        left = self.time_left() - self.margin
        if left < budget and not self._runs_cut_short(job, budget, left):
            self._add_released(rest)
            self.completer.flush()
            return False
        self.started += 1
        self._run_job(job, handler, min(budget, left))
        return True

    def _least_to_start(self) -> float:
        """The least time left (after the margin) in which some job may still start."""
        if not self.started:
            return min(self.smallest_budget, MIN_CUT_SHORT_SECONDS)
        if self.smallest_budget > self.usable:
            return max(MIN_CUT_SHORT_SECONDS, self.usable / 2)
        return self.smallest_budget

    def _runs_cut_short(self, job: Job, budget: float, left: float) -> bool:
        """Whether a job whose budget exceeds the time left runs anyway, with what is left.

        Released, a job whose budget this function can never give (a 30 s budget in Lambda's
        default 3 s function) would come back on every drain and block the queue. It runs
        with the time there is, if at least MIN_CUT_SHORT_SECONDS are left, and after the
        invocation's first job at least half of what the invocation could ever give it. The
        invocation's first job also runs when the janitor and connecting ate into a budget
        that would otherwise have fitted.
        """
        if budget > self.usable:
            floor = MIN_CUT_SHORT_SECONDS if not self.started else max(
                MIN_CUT_SHORT_SECONDS, self.usable / 2)
        elif not self.started:
            floor = MIN_CUT_SHORT_SECONDS
        else:
            return False
        if left < floor:
            return False
        if job.job_type not in self.cut_short_types:  # once per type and invocation
            self.cut_short_types.add(job.job_type)
            log.warning("job %s (%s) has a %g s time budget but this invocation has %.1f s "
                        "left after the safety margin: it runs with that; if this recurs, raise "
                        "the function's timeout or lower the job type's timeout",
                        job.id, job.job_type, budget, left)
        return True

    def _run_job(self, job: Job, handler: Handler, timeout: float) -> None:
        started = time.monotonic()
        if handler.payload_model is not None:
            try:
                job = _with_parsed_payload(job, handler)
            except Discard as exc:
                self._ended(job, handler, exc, started)
                return
        self.running = job
        try:
            if handler.transactional:
                self._run_transactional(job, handler, timeout, started)
            else:
                self._run_plain(job, handler, timeout, started)
        finally:
            self.running = None

    def _run_plain(self, job: Job, handler: Handler, timeout: float, started: float) -> None:
        try:
            self._call(handler, timeout, job)
        except BaseException as exc:
            if not isinstance(exc, Exception | HandlerTimeout):
                raise  # KeyboardInterrupt, SystemExit: not the job's failure
            self._ended(job, handler, exc, started)
        else:
            self.completer.add(Finish.done(job), job, started=started,
                               duration=time.monotonic() - started)

    def _call(self, handler: Handler, timeout: float, *args: Any) -> None:
        """The handler, under its time limit; HandlerTimeout too if it swallowed one."""
        try:
            with self.limits.limit(timeout) as limit:
                handler.func(*args)
        finally:
            self.limits.disarm()
        if limit.fired:  # it caught HandlerTimeout and returned: it still overran
            raise HandlerTimeout(f"timed out after {timeout:g} s")

    def _run_transactional(self, job: Job, handler: Handler, timeout: float,
                           started: float) -> None:
        # The handler's writes and the job's done commit together, or not at all. Written by
        # hand rather than with Session.transaction(): after a timeout the connection may be
        # mid-message, and must be dropped (the server then rolls back) instead of reused.
        self.completer.flush()  # what is waiting goes first: this transaction writes its own
        session = self.store.session()
        session.rows("transaction_begin")
        try:
            # A second past the handler's own limit, so that the limit normally speaks first.
            session.rows("transaction_statement_timeout",
                         milliseconds=math.ceil((timeout + 1) * 1000))
            self._call(handler, timeout, job, session.conn)
            if pgstore.complete(session, [job]).stale:
                raise _StaleClaim
            # A deferred constraint or a serialization failure surfaces here: the job's error.
            session.rows("transaction_commit")
        except HandlerTimeout as exc:
            self.store.discard()
            self._ended(job, handler, exc, started)
            return
        except BaseException as exc:
            try:
                session.rows("transaction_rollback")
            except Exception:
                self.store.discard()
            if isinstance(exc, _StaleClaim):
                self._count(job, "stale", time.monotonic() - started, None)
            elif isinstance(exc, Exception):
                self._ended(job, handler, exc, started)
            else:
                raise
            return
        self._count(job, "done", time.monotonic() - started, None)

    def _ended(self, job: Job, handler: Handler, error: BaseException, started: float) -> None:
        """A failed attempt: what ``policy.decide`` makes of it, written with the others."""
        decision = decide(error, job.attempts, job.max_attempts, policy=handler.policy,
                          default=self.settings.backoff)
        if isinstance(decision, Wait):
            finish = Finish.snooze(job, decision.delay_seconds)
        else:
            message = f"{type(error).__name__}: {error}"
            if isinstance(error, HandlerTimeout):
                message = f"HandlerTimeout: {job.job_type} {error}"
            finish = (Finish.fail(job, message) if isinstance(decision, Fail) else
                      Finish.retry(job, message, decision.delay_seconds))
            assert isinstance(decision, Fail | Retry)
        self.completer.add(finish, job, started=started, duration=time.monotonic() - started,
                           error=error)

    def _fail_at_once(self, job: Job, error: Exception) -> None:
        """Dead-letter a job that cannot run at all (no handler, a payload Python cannot
        hold): retrying would not change that. Nothing of it ran."""
        self.completer.add(Finish.fail(job, str(error)), job, started=time.monotonic(),
                           duration=0.0, error=error)

    def _add_released(self, jobs: list[Job]) -> None:
        now = time.monotonic()
        for job in jobs:
            self.completer.add(Finish.release(job), job, started=now, duration=0.0)

    def _recorded(self, outcome: Recorded) -> None:
        """The completer wrote an outcome: count it and tell the observer."""
        self._count(outcome.job, "stale" if outcome.stale else _COUNTED[outcome.outcome],
                    outcome.duration, outcome.error)

    def _count(self, job: Job, outcome: str, duration: float,
               error: BaseException | None) -> None:
        setattr(self.summary, outcome, getattr(self.summary, outcome) + 1)
        self.observer.job_finished(job, outcome, duration, error)


def record_failure(conn: Any, job: Job, error: str, backoff: Backoff, *,
                   retryable: bool = True) -> tuple[str, bool]:
    """Retry or dead-letter a job whose attempt failed, as ``policy.after_failure`` decides.

    Returns the resulting status (``pending`` or ``failed``) and whether the write took effect.
    """
    decision = after_failure(job.attempts, job.max_attempts, backoff, retryable=retryable)
    if isinstance(decision, Fail):
        return "failed", pgstore.fail(conn, job, error)
    return "pending", pgstore.retry(conn, job, error, decision.delay_seconds)


def _with_parsed_payload(job: Job, handler: Handler) -> Job:
    """The job with its payload parsed into the handler's model.

    The enqueue paths validate payloads, but plain SQL can insert anything: a payload that no
    longer fits the model cannot succeed on a retry, so it is discarded with the reason.
    """
    from .payload import PayloadError, parse

    try:
        return replace(job, payload=parse(handler.payload_model, job.payload))
    except PayloadError as exc:
        raise Discard(f"invalid payload: {exc}") from None
