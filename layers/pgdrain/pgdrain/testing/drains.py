"""``drain_all`` and ``run_job``: due jobs run inline, in the test's process, through the real
drain (``pgdrain.drain.drain`` on a connection of its own), so payload models, policies,
timeouts, transactional handlers, hooks and every other rule apply as in Lambda."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from ..db import Connector, Session, connect
from ..drain import DrainSummary, Stop, drain
from ..enqueue import enqueue
from ..errors import Continue, PgdrainError, WaitFor
from ..models import Job
from ..registry import REGISTRY, Registry
from ..settings import Settings
from .target import Where, connector_for, where_of

PASS_SECONDS = 900.0
"""Each pass runs as an invocation of Lambda's longest timeout would (no wall-clock wait:
it is the time budget handlers are measured against)."""


KEEP_DONE_SECONDS = 86400
"""The default settings keep done jobs a day (the shipped default keeps none): a test reads
a job's row, result included, after drain_all as much as in it."""


def default_settings() -> Settings:
    return Settings(retention_seconds=KEEP_DONE_SECONDS)


class NotSettled(PgdrainError):
    """drain_all ran ``limit`` jobs or ``max_passes`` passes and jobs kept coming."""


class DrainFailed(PgdrainError):
    """A drain pass could not run: the database failed, or other drains hold every slot."""


class JobNotRun(PgdrainError):
    """run_job's job was not run (not pending, or not claimable: see the message)."""


@dataclass(frozen=True)
class JobRun:
    """One attempt the drain made (or a job it ended without running it)."""

    id: int
    job_type: str
    queue: str
    attempt: int
    outcome: str
    """done, retried, failed, cancelled, snoozed, continued, waiting, released or stale."""
    status: str | None
    """The job's status after the drain (None: a done job with nothing kept, no row left)."""
    result: Any
    """What the handler returned, as stored (JSON), for a done job."""
    error: str | None
    """The attempt's error as stored ("Type: message"), or as raised for a snooze."""
    exception: BaseException | None = field(default=None, compare=False)
    """The exception the handler raised, traceback included (re-raise it to debug)."""
    duration: float = 0.0
    payload: Any = None


@dataclass
class Drained:
    """What drain_all did: every attempt in order, the passes' summaries, counts by outcome."""

    jobs: list[JobRun] = field(default_factory=list)
    summaries: list[DrainSummary] = field(default_factory=list)

    @property
    def counts(self) -> Counter[str]:
        """Attempts by outcome: ``drained.counts["done"]``."""
        return Counter(run.outcome for run in self.jobs)

    @property
    def passes(self) -> int:
        return len(self.summaries)

    @property
    def done(self) -> int:
        return self.counts["done"]

    @property
    def retried(self) -> int:
        return self.counts["retried"]

    @property
    def failed(self) -> int:
        return self.counts["failed"]

    @property
    def scheduled(self) -> int:
        """Jobs the schedules' due ticks enqueued."""
        return sum(s.scheduled for s in self.summaries)

    def of_type(self, job_type: str) -> list[JobRun]:
        return [run for run in self.jobs if run.job_type == job_type]

    def job(self, job_id: int) -> JobRun:
        """The last attempt of job ``job_id`` (KeyError: it did not run)."""
        for run in reversed(self.jobs):
            if run.id == job_id:
                return run
        raise KeyError(f"job {job_id} did not run in this drain_all")

    def __iter__(self) -> Iterator[JobRun]:
        return iter(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)


@dataclass
class _Seen:
    job: Job
    count: str
    duration: float
    error: BaseException | None


class _Collector:
    """A DrainObserver keeping each attempt's end."""

    def __init__(self) -> None:
        self.seen: list[_Seen] = []

    def job_finished(self, job: Job, outcome: str, duration: float,
                     error: BaseException | None) -> None:
        self.seen.append(_Seen(job, str(outcome), duration, error))

    def batch_finished(self) -> None:
        pass


def outcome_of(count: str, error: BaseException | None, status: str | None) -> str:
    """An attempt's outcome in a test's words, from the drain's count, the error it saw and
    the row's status after. Pure."""
    if count == "snoozed":
        if isinstance(error, WaitFor) or status == "waiting":
            return "waiting"
        if isinstance(error, Continue) or error is None:
            return "continued"  # Continue, or a resumable run's overrun after a checkpoint
        return "snoozed"
    if count in ("retried", "failed") and status == "cancelled":
        return "cancelled"
    return count


def _decoded(text: Any) -> Any:
    return json.loads(text) if isinstance(text, str) else text


def _runs(where: Where, seen: list[_Seen]) -> list[JobRun]:
    """Each attempt with its row as it stands now (read before the next pass's janitor can
    purge it)."""
    if not seen:
        return []
    with _session(where) as session:
        rows = session.rows("job_outcomes", ids=sorted({s.job.id for s in seen}))
    by_id = {r["id"]: r for r in rows}
    runs = []
    for s in seen:
        row = by_id.get(s.job.id) or {}
        status = row.get("status", "done" if s.count == "done" else None)
        error = row.get("last_error") if s.count in ("retried", "failed") else None
        if error is None and s.error is not None:
            error = f"{type(s.error).__name__}: {s.error}"
        runs.append(JobRun(
            id=s.job.id, job_type=s.job.job_type, queue=s.job.queue, attempt=s.job.attempts,
            outcome=outcome_of(s.count, s.error, status), status=status,
            result=_decoded(row.get("result")) if s.count == "done" else None,
            error=error, exception=s.error, duration=s.duration, payload=s.job.payload))
    return runs


@contextmanager
def _session(where: Where) -> Iterator[Session]:
    if isinstance(where, Connector):
        where.open(None)  # the pass's deadline is over: a statement of the test's own
        yield where.session()
        return
    conn = connect(where)
    try:
        yield Session(conn)
    finally:
        conn.close()


def _clock(seconds: float) -> Callable[[], float]:
    deadline = time.monotonic() + seconds
    return lambda: deadline - time.monotonic()


def _one_pass(connector: Connector, registry: Registry, settings: Settings,
              seconds: float) -> tuple[DrainSummary, list[_Seen]]:
    collector = _Collector()
    summary = drain(connector, registry, settings, time_left=_clock(seconds),
                    observer=collector)
    if summary.stopped == Stop.DATABASE_ERROR:
        raise DrainFailed(f"the drain stopped on a database error: {summary.error} (the "
                          "pgdrain.drain log says more)")
    if summary.stopped == Stop.BUSY:
        raise DrainFailed(f"the drain did not run: {settings.max_drains} drains (PGDRAIN_MAX_"
                          "DRAINS) hold this database's slots already")
    return summary, collector.seen


def drain_all(target: Any, *, registry: Registry | None = None,
              settings: Settings | None = None, limit: int = 1000, max_passes: int = 100,
              seconds: float = PASS_SECONDS) -> Drained:
    """Run every due job, inline in this process, through the real drain, pass after pass
    until nothing due is left (jobs the runs enqueue, retries due at once, continuations and
    released children included); return what happened.

    ``target``: the database URL, a ``pgdrain.db.Connector``, or the test's connection: the
    drain opens a connection of its own where that one goes (``target.where_of``). A
    connection with a transaction open is refused: jobs enqueued in it are invisible to the
    drain until it commits. ``registry``: the handlers (default: pgdrain's, ``@pgdrain.job``);
    ``settings``: the drain's (default: ``Settings()`` keeping done jobs a day, so that their
    rows stay to be read). Jobs not due yet (a backoff, a delay) stay: ``advance`` first.

    Raises NotSettled when more than ``limit`` attempts or ``max_passes`` passes were not
    enough (a job that enqueues another every run, a Continue that never ends), and
    DrainFailed when a pass could not run.
    """
    if not (isinstance(limit, int) and limit >= 1 and isinstance(max_passes, int)
            and max_passes >= 1):
        raise ValueError("drain_all: limit and max_passes must be whole numbers >= 1")
    registry = REGISTRY if registry is None else registry
    settings = default_settings() if settings is None else settings
    where = where_of(target)
    connector = connector_for(where)
    drained = Drained()
    try:
        for _ in range(max_passes):
            room = limit - len(drained.jobs) + 1  # one more than the limit: seen, refused
            summary, seen = _one_pass(connector, registry,
                                      replace(settings, max_jobs=min(settings.max_jobs, room)),
                                      seconds)
            drained.summaries.append(summary)
            drained.jobs.extend(_runs(connector, seen))
            if len(drained.jobs) > limit:
                raise NotSettled(_not_settled(drained, f"more than limit={limit} attempts"))
            if summary.claimed == 0 and summary.scheduled == 0:
                return drained
        raise NotSettled(_not_settled(drained, f"max_passes={max_passes} passes"))
    finally:
        if connector is not where:
            connector.discard()


def _not_settled(drained: Drained, what: str) -> str:
    common = Counter(run.job_type for run in drained.jobs).most_common(3)
    types = ", ".join(f"{job_type} ({n})" for job_type, n in common)
    return (f"drain_all: jobs kept coming after {what} ({len(drained.jobs)} attempts in "
            f"{drained.passes} passes; most run: {types or 'none'}). A job that enqueues "
            "another each run, or continues for ever? Raise limit= or max_passes= if this "
            "much work is expected")


def run_job(target: Any, job: int | str, payload: Any = None, *,
            registry: Registry | None = None, settings: Settings | None = None,
            seconds: float = PASS_SECONDS, **enqueue_options: Any) -> JobRun:
    """Run one job, one attempt, through the real drain, and nothing else: the job ``job``
    (an id), or a new job of type ``job`` with ``payload`` and ``enqueue_options`` (enqueued
    first and committed, as ``pgdrain.enqueue`` does: the type's payload model applies). A
    pending job not due yet (delayed, backing off) is made due first.

    The other pending jobs are locked for the while (the drain's claims skip locked rows),
    and the drain claims one job: jobs the run enqueues stay pending (``drain_all`` runs
    them). Raises JobNotRun when the job is not pending, or when the drain could not claim it
    (its queue paused, capped or rate-limited, an older job of its ordering key live,
    expired): the message says which it is.
    """
    registry = REGISTRY if registry is None else registry
    settings = default_settings() if settings is None else settings
    where = where_of(target)
    connector = connector_for(where)
    own = connector.sibling() if isinstance(where, Connector) else connector_for(where)
    locks = own.session()
    try:
        if isinstance(job, str):
            handler = registry.get(job)
            if handler is not None and handler.max_attempts and registry is not REGISTRY:
                # pgdrain.enqueue reads pgdrain's registry for the type's max_attempts
                enqueue_options.setdefault("max_attempts", handler.max_attempts)
            job_id = enqueue(locks.conn, job, payload, **enqueue_options).id
        elif payload is not None or enqueue_options:
            raise TypeError("run_job(target, job_id) runs an existing job: payload and "
                            "enqueue options go with a job type, run_job(target, type, payload)")
        else:
            job_id = job
        _make_due(locks, job_id)
        with locks.transaction():
            locks.rows("job_lock_others", id=job_id)
            summary, seen = _one_pass(connector, _without_schedules(registry),
                                      replace(settings, max_jobs=1), seconds)
        runs = [run for run in _runs(connector, seen) if run.id == job_id]
        if not runs:
            raise JobNotRun(f"job {job_id} was not run: the drain could not claim it (its "
                            "queue paused, capped or rate-limited, an older job of its "
                            "ordering key still live, or its expires_at passed); drain "
                            f"summary: {summary.as_dict()}")
        return runs[-1]
    finally:
        own.discard()
        if connector is not where:
            connector.discard()


def _make_due(session: Session, job_id: int) -> None:
    [row] = session.rows("job_run_now", ids=[job_id])
    if row["outcome"] not in ("due_now", "already_due"):
        what = "no such job" if row["outcome"] == "not_found" else f"it is {row['outcome']}"
        raise JobNotRun(f"job {job_id} cannot run: {what}; run_job runs a pending job")


def _without_schedules(registry: Registry) -> Registry:
    """The registry's handlers and middleware without its schedules, declared or stored:
    run_job's drain enqueues no tick (a tick's job could be claimed before the one asked
    for)."""
    handlers = Registry()
    for handler in registry:
        handlers.register(handler)
    for layer in registry.layers():
        handlers.add_layer(layer)
    handlers.stored_schedules = False
    return handlers
