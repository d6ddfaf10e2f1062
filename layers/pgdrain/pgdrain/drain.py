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
import queue
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from . import fanout
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
from .hooks import install as install_hooks
from .janitor import run_janitor, vacuum_if_due
from .models import Finish, JanitorResult, Job, Outcome, Written
from .policy import Backoff, Fail, Retry, Wait, after_failure, decide
from .registry import Handler, Registry
from .results import encode_result
from .runner import DURATIONS, Runner, Task, runner
from .scheduler import enqueue_due
from .settings import Settings
from .store import ControlledClaim
from .timeouts import TimeLimits

if TYPE_CHECKING:
    from .flow import Rate

log = logging.getLogger(__name__)

# An invocation's first job runs with less than its budget (see _runs_cut_short), but not with
# less than this: a sliver of time would only spend its attempt on a certain timeout.
MIN_CUT_SHORT_SECONDS = 1.0

# Of the safety margin, the share database I/O may still use; the rest is for returning.
IO_SHARE_OF_MARGIN = 0.5

# A claim also takes the jobs its pace says will finish while the next claim is on its way.
CLAIM_AHEAD_SECONDS = 0.05
# A wait for a rate window ends this much after the window frees, so that the claim after it
# does not come a hair too early by the database's clock.
RATE_WAIT_SLACK_SECONDS = 0.01
# A drain that did not see tenants at its start looks again at most this often (when a claim
# comes back short): a tenant's flood that comes later is shared fairly within a second.
TENANT_LOOK_SECONDS = 1.0
# A drain whose job modules declare rate-limited types looks for their due jobs at its first
# claim, then at most this often while none is due (a walk of the claim's index: there is no
# index by type), and claims through the controlled claim only while some are.
RATED_LOOK_SECONDS = 1.0

# After a worker thread's time limit ran out, it has this long to stop before its job is
# recorded as timed out without it (and the thread counted as a runaway).
RUNAWAY_GRACE_SECONDS = 0.2

# The concurrent drain waits at most this long between looks at limits and the completer.
TICK_SECONDS = 0.05

# While jobs run longer than this, or report progress, the concurrent drain writes their
# progress and reads their cancel requests this often (one statement for all of them).
CONTROL_SECONDS = 1.0

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
    expired: int = 0
    """Pending jobs the janitor ended failed because their expires_at passed unstarted."""
    scheduled: int = 0
    """Jobs this drain enqueued for periodic schedules whose tick was due."""
    vacuumed: int = 0
    """1 if this drain vacuumed the jobs table (PGDRAIN_VACUUM_DEAD_TUPLES)."""
    abandoned: int = 0
    """Handlers still running when the drain returned: they ignored their time limit. Their
    jobs were recorded as timed out; whatever they do later is never written."""
    continued: int = 0
    """Drains this one started: itself again when it stopped with due work left, and more
    when the backlog was larger than it could run (fan-out, never past PGDRAIN_MAX_DRAINS)."""
    stopped: str = "empty"
    """Why the drain stopped: empty, max_jobs, deadline, busy (PGDRAIN_MAX_DRAINS drains
    were running already) or database_error."""
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

    def enqueue_scheduled(self, registry: Registry) -> int:
        """Enqueue the due ticks of the registry's schedules; how many jobs were created."""

    def sync_controls(self, jobs: Sequence[Job], progress: Sequence[str | None]) -> set[int]:
        """Write running jobs' progress (None: no report) and return those asked to stop."""

    def claim(self, *, batch_size: int, lease_seconds: float,
              queues: Sequence[str] | None, fair: bool = False) -> list[Job]:
        """The plain claim (``fair``: from each tenant in turn), leaving rate-limited types
        and capped or rate-limited queues to ``claim_controlled``."""

    def claim_alone(self, *, lease_seconds: float, queues: Sequence[str] | None) -> Job | None: ...

    def claim_controlled(self, *, batch_size: int, lease_seconds: float,
                         queues: Sequence[str] | None) -> ControlledClaim: ...

    def tenanted(self) -> bool:
        """Whether pending jobs name tenants."""

    def rated_due(self, queues: Sequence[str] | None) -> bool:
        """Whether a job of a rate-limited type (the registry's) is due."""

    def finish_many(self, finishes: Sequence[Finish]) -> Written: ...

    def session(self) -> Session:
        """The connection, for a transactional handler's transaction."""

    def lend(self, deadline: float) -> Session | None:
        """A connection of its own for a transactional handler on a worker thread, from a
        pool of ``pool_size``; None when all are lent."""

    def give_back(self, session: Session, *, broken: bool) -> None: ...

    def take_slot(self, slots: int) -> int | None: ...

    def give_back_slot(self, slot: int) -> None: ...

    def drains_running(self) -> int: ...

    def reserve_launches(self, wanted: int, slots: int) -> int:
        """Room for up to ``wanted`` launches within ``slots`` (pgdrain.fanout)."""

    def unreserve_launches(self, count: int) -> None: ...

    def due(self, *, limit: int, queues: Sequence[str] | None) -> int:
        """Due jobs a claim could take now, up to ``limit``: what decides continuation and
        fan-out (capped and rate-limited work within its room; not an ordering key's later
        jobs, nor work a cap or a rate holds back)."""


class Launcher(Protocol):
    """Starts more drains (an asynchronous invoke of the drain function in Lambda)."""

    def prepare(self) -> None:
        """Get ready to launch (import what it needs) while there is time to spare."""

    def launch(self, count: int, reason: str) -> int:
        """Start ``count`` drains; returns how many were started."""


# What each connector (one per warm container) has recorded of this code's declarations: its
# hooked types (pgdrain_hooked_types, so that processes without the job modules, the CLI's
# janitor, hook their failures too). One statement per cold start, not one per invocation (a
# PostgresStore lives for one invocation).
_DECLARED: weakref.WeakKeyDictionary[Connector, dict[str, object]] = \
    weakref.WeakKeyDictionary()


class PostgresStore:
    """The drain's store on PostgreSQL: the catalogue's statements on a ``Connector``."""

    def __init__(self, connector: Connector, pool_size: int = 0, hooked: Sequence[str] = (),
                 type_rates: Mapping[str, Rate] | None = None):
        self.connector = connector
        self.pool = connector.pool(pool_size)
        self.hooked = tuple(hooked)
        """Job types with an on_failed hook: a failed write inserts the hook's job."""
        self.type_rates = dict(type_rates or {})
        """Job types with a rate limit: claim_controlled takes them, the plain claim not."""
        self.limited_types = sorted(self.type_rates)
        self.rates_declared = False
        self.slot_generation: int | None = None
        """The connection (``Connector.generation``) that holds this drain's slot."""

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
        # Before the janitor, which may fail a hooked job itself.
        self._declare_once("hooked", self.hooked, pgstore.declare_hooked_types)
        return run_janitor(self.session(), settings, registry)

    def vacuum_if_due(self, settings: Settings) -> bool:
        return vacuum_if_due(self.session(), settings)

    def enqueue_scheduled(self, registry: Registry) -> int:
        return enqueue_due(self.session(), registry)

    def sync_controls(self, jobs: Sequence[Job], progress: Sequence[str | None]) -> set[int]:
        return pgstore.sync_controls(self.session(), jobs, progress)

    def _claiming(self) -> Session:
        """The session to claim on: only the one holding this drain's slot. A connection
        lost mid-drain is reopened for writing outcomes, but a drain on a new connection
        holds no slot (the old one's ended with it) and so claims no more."""
        session = self.session()
        if self.slot_generation is not None and \
                self.connector.generation != self.slot_generation:
            raise SlotLost("the connection holding this drain's slot (PGDRAIN_MAX_DRAINS) was "
                           "lost; the drain stops claiming")
        return session

    def claim(self, *, batch_size: int, lease_seconds: float,
              queues: Sequence[str] | None, fair: bool = False) -> list[Job]:
        return pgstore.claim(self._claiming(), batch_size=batch_size,
                             lease_seconds=lease_seconds, queues=queues,
                             limited_types=self.limited_types, fair=fair)

    def claim_controlled(self, *, batch_size: int, lease_seconds: float,
                         queues: Sequence[str] | None) -> ControlledClaim:
        self._claiming()
        self._declare_rates()
        return pgstore.claim_controlled(self.session(), batch_size=batch_size,
                                        lease_seconds=lease_seconds, queues=queues,
                                        type_rates=self.type_rates)

    def _declare_rates(self) -> None:
        # Once per invocation, not per warm connector: a rated type without its row has no
        # room (no job of it starts), so a row an operator deleted comes back at once.
        if not self.rates_declared:
            pgstore.declare_type_rates(self.session(), self.type_rates)
            self.rates_declared = True

    def _declare_once(self, what: str, value: Any, write: Callable[[Session, Any], None]
                      ) -> None:
        """Write a declaration of this code (``value``; nothing when empty) once per warm
        connector, and again only if it changed."""
        done = _DECLARED.setdefault(self.connector, {})
        if value and done.get(what) != value:
            write(self.session(), value)
            done[what] = value

    def claim_alone(self, *, lease_seconds: float, queues: Sequence[str] | None) -> Job | None:
        return pgstore.claim_alone(self._claiming(), lease_seconds=lease_seconds, queues=queues,
                                   limited_types=self.limited_types)

    def tenanted(self) -> bool:
        return pgstore.tenanted(self.session())

    def rated_due(self, queues: Sequence[str] | None) -> bool:
        return bool(self.limited_types) and pgstore.limited_due(
            self.session(), queues=(), job_types=self.limited_types, only_queues=queues)

    def finish_many(self, finishes: Sequence[Finish]) -> Written:
        return pgstore.finish_many(self.session(), finishes, hooked=self.hooked)

    def lend(self, deadline: float) -> Session | None:
        return self.pool.lend(deadline)

    def give_back(self, session: Session, *, broken: bool) -> None:
        self.pool.give_back(session, broken=broken)

    def take_slot(self, slots: int) -> int | None:
        # Answer the rings first, then try: a drain that finds every slot taken has answered
        # too, for the drains holding them, which look for due work once more (aws.doorbell).
        pgstore.drain_started(self.session())
        slot = pgstore.take_drain_slot(self.session(), slots, idle_ms=self._idle_bound_ms())
        if slot is not None:
            self.slot_generation = self.connector.generation
        return slot

    def _idle_bound_ms(self) -> int:
        """The time this invocation has left: no drain idles longer holding its slot."""
        deadline = self.session().deadline
        return 0 if deadline is None else max(1, math.ceil((deadline - time.monotonic()) * 1000))

    def give_back_slot(self, slot: int) -> None:
        holder, self.slot_generation = self.slot_generation, None
        if holder == self.connector.generation:  # else it ended with its connection
            pgstore.give_back_drain_slot(self.session(), slot)

    def drains_running(self) -> int:
        return pgstore.drains_running(self.session())

    def reserve_launches(self, wanted: int, slots: int) -> int:
        return pgstore.reserve_drain_launches(self.session(), wanted, slots,
                                              lapse_seconds=fanout.LAPSE_SECONDS)

    def unreserve_launches(self, count: int) -> None:
        pgstore.unreserve_drain_launches(self.session(), count)

    def due(self, *, limit: int, queues: Sequence[str] | None) -> int:
        due, controlled = pgstore.due_count(self.session(), limit=limit, queues=queues,
                                            limited_types=self.limited_types)
        if due < limit and (controlled or self.type_rates):
            self._declare_rates()
            due += pgstore.controlled_due(self.session(), limit=limit - due, queues=queues,
                                          type_rates=self.type_rates)
        return due


class _Every:
    """A look at the database taken at most once every ``seconds``."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.last: float | None = None

    def looked(self) -> None:
        self.last = time.monotonic()

    def due(self) -> bool:
        """True (and counted as a look) if the last look is ``seconds`` old, or none was."""
        now = time.monotonic()
        if self.last is not None and now - self.last < self.seconds:
            return False
        self.last = now
        return True


class SlotLost(DatabaseUnavailable):
    """The connection holding the drain's slot is gone: the drain may no longer claim."""


class _StaleClaim(Exception):
    """A transactional job's done write found its claim lost: roll its writes back."""


def drain(
    store: Connector | DrainStore,
    registry: Registry,
    settings: Settings,
    *,
    time_left: Callable[[], float],
    observer: DrainObserver | None = None,
    launcher: Launcher | None = None,
    runner: Runner | None = None,
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
    if settings.lease_seconds is not None and start_left >= settings.lease_seconds:
        raise ConfigError(
            f"PGDRAIN_LEASE_SECONDS ({settings.lease_seconds}) must be longer than the "
            f"function timeout ({start_left:.0f} s left at start): otherwise a live "
            "invocation could lose its jobs to the janitor")
    if isinstance(store, Connector):
        store = PostgresStore(store, settings.pool_size, registry.hooked_types(),
                              registry.type_rates())
    install_hooks(registry)
    run = _Drain(store, registry, settings, time_left, observer or _NullObserver(), start_left)
    run.launcher = launcher
    run.runner = runner
    with TimeLimits(on_stuck=run.handler_stuck) as limits:
        run.limits = limits
        return run.run()


class Pace:
    """How fast this drain's jobs finish: jobs per second since its first start."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.first_start: float | None = None
        self.finished = 0

    def start(self) -> None:
        if self.first_start is None:
            self.first_start = self.clock()

    def finish(self) -> None:
        self.finished += 1

    def jobs_in(self, seconds: float) -> int:
        """Jobs that finish in ``seconds`` at this pace (0 before any has finished)."""
        if self.first_start is None or not self.finished:
            return 0
        elapsed = max(self.clock() - self.first_start, 1e-3)
        return int(self.finished / elapsed * seconds)


def shortest_runnable_seconds(registry: Registry, settings: Settings) -> float:
    """The least time after the safety margin in which a drain can run a job at all."""
    budgets = [h.timeout for h in registry if h.timeout is not None]
    return min([*budgets, settings.job_timeout_seconds, MIN_CUT_SHORT_SECONDS])


class _Drain:
    limits: TimeLimits
    launcher: Launcher | None = None
    runner: Runner | None = None

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
        self.controlled = False
        """Some queue has a cap or a rate limit (the janitor's look at the start): claim
        through claim_controlled too. A limit set later is obeyed at once (the plain claim
        leaves such queues alone) and served from the next drain on."""
        self.rated = bool(registry.type_rates())
        self.rated_due = False
        """A job of a rate-limited type is due (looked for at the start, then at most every
        RATED_LOOK_SECONDS while none is): claim through claim_controlled too. Only then:
        the controlled claim takes turns with other drains on the type's row lock."""
        self.rated_look = _Every(RATED_LOOK_SECONDS)
        self.fair = False
        """Pending jobs name tenants: the plain claim takes from each in turn."""
        self.tenant_look = _Every(TENANT_LOOK_SECONDS)
        self.rate_free_in: float | None = None
        """After a claim that found nothing: the seconds until a rate limit that held due
        work back lets one more start (None: no rate held anything back)."""
        self.start_by: dict[int, float] = {}
        """Jobs claimed under a rate limit: the ``time.monotonic()`` by which each must start,
        or be handed back unstarted (flow.start_slack: the starts keep the rate)."""
        self.running: Job | None = None
        budgets = [h.timeout for h in registry if h.timeout is not None]
        self.smallest_budget = min([*budgets, settings.job_timeout_seconds])
        self.margin = settings.margin_for(start_left)
        self.lease = settings.lease_for(start_left)
        self.usable = start_left - self.margin
        """The most time any job of this invocation can have."""
        self.cut_short_types: set[str] = set()
        self.io_deadline = time.monotonic() + start_left - self.margin * (1 - IO_SHARE_OF_MARGIN)
        self.pace = Pace()

    def run(self) -> DrainSummary:
        try:
            self.store.open(self.io_deadline)
            slot = self.store.take_slot(self.settings.max_drains)
            if slot is None:
                self.summary.stopped = "busy"
                return self.summary
            try:
                self._janitor()
                self._fan_out()
                if self.settings.concurrency > 1:
                    _Concurrent(self).run()
                else:
                    self._drain()
            finally:
                if self.store.connected:
                    with suppress(DatabaseUnavailable):
                        self.store.give_back_slot(slot)
            self._continue_if_due()
        except DatabaseUnavailable as exc:
            self._stopped_by_database(exc)
        return self.summary

    def _janitor(self) -> None:
        janitor = self.store.janitor(self.settings, self.registry)
        self.summary.reclaimed = janitor.reclaimed + janitor.failed
        self.summary.reclaimed_failed = janitor.failed
        self.summary.reclaimed_refunded = janitor.refunded
        self.summary.expired = janitor.expired
        self.summary.purged = janitor.purged
        self.alone_due = janitor.alone_due
        self.controlled = janitor.controlled
        self.fair = janitor.tenants
        self.tenant_look.looked()
        self.summary.vacuumed = int(self.store.vacuum_if_due(self.settings))
        self.summary.scheduled = self.store.enqueue_scheduled(self.registry)

    def _fan_out(self) -> None:
        """Start more drains when the backlog is more than this one runs at once: one per
        PGDRAIN_CONCURRENCY due jobs, up to PGDRAIN_MAX_DRAINS running in all."""
        if self.launcher is None or self.settings.max_drains <= 1:
            return
        per_drain = self.settings.concurrency
        due = self.store.due(limit=per_drain * self.settings.max_drains,
                             queues=self.settings.queues or None)
        self._launch(fanout.wanted(due, per_drain), "fan-out")

    def _continue_if_due(self) -> None:
        """After giving the slot back: if due work is left, start a drain for it, so a
        backlog never waits for the schedule. Looking after the slot is free closes the
        race with a ring that was skipped because this drain still held it (see
        aws.doorbell)."""
        if self.launcher is None or self.summary.stopped not in ("empty", "max_jobs",
                                                                  "deadline"):
            return
        if self.time_left() <= self.margin * (1 - IO_SHARE_OF_MARGIN):
            return  # no time to ask; the schedule's next tick will look
        if self.store.due(limit=1, queues=self.settings.queues or None):
            self._launch(1, "continue")

    def _launch(self, wanted: int, reason: str) -> None:
        """Start up to ``wanted`` drains, within the room the ledger of launches on their way
        gives (pgdrain.fanout); an invoke that failed gives its room back."""
        assert self.launcher is not None
        reserved = self.store.reserve_launches(wanted, self.settings.max_drains) \
            if wanted > 0 else 0
        if reserved:
            started = self.launcher.launch(reserved, reason)
            self.summary.continued += started
            if started < reserved:
                with suppress(DatabaseUnavailable):  # else they lapse by themselves
                    self.store.unreserve_launches(reserved - started)

    def _drain(self) -> None:
        while True:
            room = self.settings.max_jobs - self.summary.claimed
            if room <= 0:
                self.summary.stopped = self._stopping("max_jobs")
                return
            if self.time_left() - self.margin < self._least_to_start():
                self.summary.stopped = self._stopping("deadline")
                return
            jobs = self._claim(self._claim_size(room, free=1))
            if not jobs:
                if self._wait_for_rate():
                    continue
                return
            self.summary.claimed += len(jobs)
            if not self._run_batch(jobs):
                self.summary.stopped = self._stopping("deadline")
                return

    def _stopping(self, reason: str) -> str:
        """The drain stops with work maybe left: get the launcher ready for its
        continuation now, while handlers may still be running, not at the last moment."""
        if self.launcher is not None:
            with suppress(Exception):
                self.launcher.prepare()
        return reason

    def _claim_size(self, room: int, free: int) -> int:
        """How many jobs to claim: the free slots, plus what the jobs' pace says will finish
        while the next claim is on its way, within the time left; PGDRAIN_BATCH_SIZE caps it.
        Fast jobs so reach full batches; slow ones are not held claimed behind each other."""
        ahead = self.pace.jobs_in(CLAIM_AHEAD_SECONDS)
        fits = self.pace.jobs_in(max(0.0, self.time_left() - self.margin)) + free
        return max(1, min(room, self.settings.batch_size, free + ahead, fits))

    def _claim(self, size: int) -> list[Job]:
        """The next claim: a job whose claim was lost before, alone, while there are any
        (the janitor said so); then batches."""
        queues = self.settings.queues or None
        if self.alone_due:
            job = self.store.claim_alone(lease_seconds=self.lease, queues=queues)
            if job is not None:
                return [job]
            self.alone_due = False
        jobs: list[Job] = []
        self.rate_free_in = None
        # First, or a steady flow of others' jobs would leave them waiting.
        if self.controlled or self._rated_due():
            sent = time.monotonic()
            controlled = self.store.claim_controlled(batch_size=size, lease_seconds=self.lease,
                                                     queues=queues)
            jobs, self.rate_free_in = controlled.jobs, controlled.rate_free_in
            self.start_by.update((job_id, sent + within)
                                 for job_id, within in controlled.rated.items())
            if not self.controlled and not jobs and self.rate_free_in is None:
                self.rated_due = False  # none due any more: look again in a while
        if len(jobs) < size:
            more = self.store.claim(batch_size=size - len(jobs), lease_seconds=self.lease,
                                    queues=queues, fair=self.fair)
            if len(more) < size - len(jobs) and not self.fair and self._tenants_came():
                self.fair = True
                more += self.store.claim(batch_size=size - len(jobs) - len(more),
                                         lease_seconds=self.lease, queues=queues, fair=True)
            jobs += more
        if jobs:
            self.rate_free_in = None
        return jobs

    def _rated_due(self) -> bool:
        """Whether to claim rate-limited types' jobs: while some were due at the last look,
        and at a look at most every RATED_LOOK_SECONDS (the first at the first claim)."""
        if self.rated and not self.rated_due and self.rated_look.due():
            self.rated_due = self.store.rated_due(self.settings.queues or None)
        return self.rated_due

    def _tenants_came(self) -> bool:
        """Whether jobs naming tenants came since the last look (the janitor's, at the start):
        asked when a claim comes back short, at most once every TENANT_LOOK_SECONDS."""
        return self.tenant_look.due() and self.store.tenanted()

    def _wait_for_rate(self) -> bool:
        """The claim found only work a rate limit holds back: wait until the limit lets one
        more start and claim again (True), if that leaves time to run a job; else stop
        early, ``rate_limited`` (False). Never a loop of empty claims."""
        wait = self.rate_free_in
        if wait is None:
            return False
        if self.time_left() - self.margin - wait < self._least_to_start():
            self.summary.stopped = "rate_limited"
            return False
        time.sleep(wait + RATE_WAIT_SLACK_SECONDS)
        return True

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
        if self.late(job):
            self._add_released([job])
            return True
        budget = handler.timeout or self.settings.job_timeout_seconds
        left = self.time_left() - self.margin
        if left < budget and not self._runs_cut_short(job, budget, left):
            self._add_released(rest)
            self.completer.flush()
            return False
        self.started += 1
        self.pace.start()
        self._run_job(job, handler, min(budget, left))
        self.pace.finish()
        return True

    def late(self, job: Job) -> bool:
        """Whether ``job`` was claimed under a rate limit too long ago to start now: its start
        would no longer count in the window its claim was counted in. Hand it back unstarted
        (uncharged; the rate runs below its limit, never above)."""
        by = self.start_by.get(job.id)
        return by is not None and time.monotonic() > by

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
            value = self._call(handler, timeout, job)
        except BaseException as exc:
            if not isinstance(exc, Exception | HandlerTimeout):
                raise  # KeyboardInterrupt, SystemExit: not the job's failure
            self._ended(job, handler, exc, started)
        else:
            self.completer.add(self.done(job, value), job, started=started,
                               duration=time.monotonic() - started)

    def done(self, job: Job, value: Any) -> Finish:
        """A handler returned ``value``: the job is done, with it as its result when it can be
        stored (else with the reason in last_error: the work was done all the same)."""
        if value is None:
            return Finish.done(job)
        result, problem = encode_result(value, self.settings.result_max_bytes)
        if problem:
            log.warning("job %s (%s): %s", job.id, job.job_type, problem)
        return Finish.done(job, result, problem)

    def _call(self, handler: Handler, timeout: float, *args: Any) -> Any:
        """The handler, under its time limit; HandlerTimeout too if it swallowed one."""
        try:
            with self.limits.limit(timeout) as limit:
                value = _run_async(handler, timeout, *args) if handler.is_async else \
                    handler.func(*args)
        finally:
            self.limits.disarm()
        if limit.fired:  # it caught HandlerTimeout and returned: it still overran
            raise HandlerTimeout(f"timed out after {timeout:g} s")
        return value

    def _run_transactional(self, job: Job, handler: Handler, timeout: float,
                           started: float) -> None:
        """A transactional handler on the drain's thread, on a pooled connection of its own
        (as on a worker thread): a timeout then drops that connection, never the drain's,
        which holds the drain's slot."""
        self.completer.flush()  # what is waiting goes first: this transaction writes its own
        session = self.store.lend(self.io_deadline)
        if session is None:  # every pooled connection is lent (none should be: see _runaway)
            self._add_released([job])
            return
        transaction = _Transaction(session, job, self.done)
        try:
            transaction.run(lambda conn: self._call(handler, timeout, job, conn), timeout)
        except _StaleClaim:
            self._count(job, "stale", time.monotonic() - started, None)
        # The job's failure. HandlerTimeout is a BaseException: unnamed, it would end the
        # invocation instead (at PGDRAIN_CONCURRENCY=1, where SIGALRM raises it here).
        except (Exception, HandlerTimeout) as exc:
            self._ended(job, handler, exc, started)
        else:
            self._count(job, "done", time.monotonic() - started, None)
        finally:
            self.store.give_back(session, broken=transaction.broken)

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


class _Concurrent:
    """The drain's loop at PGDRAIN_CONCURRENCY > 1: claims and finishing writes on the
    drain's thread and connection, handlers on the runner's threads and event loop.

    Claimed jobs wait in ``ready`` until a slot is free; a job that can no longer start
    before the deadline is released with the rest of ``ready``, uncharged. Every handler runs
    under its own time limit (``Runner.interrupt``); one that ignores it for
    RUNAWAY_GRACE_SECONDS is recorded as timed out, its slot given to the next job, and what
    it does later never written (see pgdrain.runner).
    """

    def __init__(self, drain: _Drain):
        self.d = drain
        self.runner = drain.runner or runner()
        self.outbox: queue.SimpleQueue[Task] = queue.SimpleQueue()
        self.ready: deque[Job] = deque()
        self.running: dict[int, Task] = {}
        self.by_type: Counter[str] = Counter()
        self.runaways: dict[int, Task] = {}
        self.stopping: str | None = None
        self.size = drain.settings.concurrency
        self.isolated = False
        """A job with a lost claim is running: nothing else starts or is claimed."""
        self.claimed_nothing = False
        """The last claim came back empty while jobs ran: claim again once one finishes
        (its retry may be due at once), and stop only when a claim finds nothing with
        nothing running and every outcome written."""
        self.next_sync = time.monotonic() + CONTROL_SECONDS

    def run(self) -> None:
        d = self.d
        try:
            while True:
                self._start_ready()
                if self.stopping is None and not self.isolated and len(self.ready) < self.size:
                    if not self.running and not self.ready:
                        # Everything so far written first: a retry due at once is claimable.
                        d.completer.flush()
                        self.claimed_nothing = False
                    if not self.claimed_nothing and self._claim_more():
                        continue
                if not self.ready and not self.running:
                    if self.stopping is not None:
                        break
                    continue  # claim again, now that every outcome is written
                self._collect(self._wait_seconds())
                self._enforce_limits()
                self._sync_controls()
                d.completer.flush_if_due()
            d.completer.flush()
            d.summary.stopped = self.stopping or "empty"
        except BaseException:
            self._stop_all()
            if d.store.connected:
                with suppress(Exception):
                    d._add_released(list(self.ready))
                    self.ready.clear()
                    d.completer.flush()
            raise
        finally:
            self._count_abandoned()

    # --- claiming ---

    def _claim_more(self) -> bool:
        """Claim if there is room; True if jobs came."""
        d = self.d
        room = d.settings.max_jobs - d.summary.claimed
        if room <= 0:
            self.stopping = d._stopping("max_jobs")
            return False
        if d.time_left() - d.margin < d._least_to_start():
            self.stopping = d._stopping("deadline")
            return False
        free = self.size - len(self.running) - len(self.ready)
        if free <= 0 and d.pace.jobs_in(CLAIM_AHEAD_SECONDS) <= len(self.ready):
            return False
        # What finished is written before the next claim, as a batch at a time would: a
        # write of thousands of outcomes costs more per row than a batch's.
        d.completer.flush()
        jobs = d._claim(d._claim_size(room, free=max(free, 0)))
        if not jobs:
            if self.running:
                self.claimed_nothing = True
            elif d._wait_for_rate():
                return True
            else:
                self.stopping = d.summary.stopped or "empty"
            return False
        d.summary.claimed += len(jobs)
        self.ready.extend(jobs)
        return True

    # --- starting ---

    def _start_ready(self) -> None:
        while self.ready and len(self.running) < self.size and not self.isolated:
            if self.ready[0].lost_claims and not self._isolate():
                return
            started = self._start_one()
            if self.isolated and not self.running:
                self.isolated = False  # it failed at once, or could not start in time
            if not started:
                return

    def _isolate(self) -> bool:
        """A job whose claim was lost before (it may be what killed a drain) runs alone:
        once nothing else runs and every outcome so far is written, so that if it kills
        this process too, it takes no other job's run or outcome with it."""
        if self.running:
            return False
        self.d.completer.flush()
        self.isolated = True
        return True

    def _start_one(self) -> bool:
        """Start the first ready job that may start now; False when none may."""
        d = self.d
        for index, job in enumerate(self.ready):
            if bool(job.lost_claims) is not self.isolated:
                if self.isolated:
                    return False
                continue  # a job with a lost claim waits to run alone (see _isolate)
            if job.payload_error is not None:
                del self.ready[index]
                d._fail_at_once(job, ValueError(f"undecodable payload: {job.payload_error}"))
                return True
            handler = d.registry.get(job.job_type)
            if handler is None:
                del self.ready[index]
                d._fail_at_once(job, LookupError(
                    f"no handler registered for job_type '{job.job_type}'"))
                return True
            if handler.concurrency and self.by_type[job.job_type] >= handler.concurrency:
                continue
            if d.late(job):
                del self.ready[index]
                d._add_released([job])
                return True
            budget = handler.timeout or d.settings.job_timeout_seconds
            left = d.time_left() - d.margin
            if left < budget and not d._runs_cut_short(job, budget, left):
                # Nothing claimed can start in time any more: hand it all back, uncharged.
                d._add_released(list(self.ready))
                self.ready.clear()
                self.stopping = d._stopping("deadline")
                d.completer.flush()
                return False
            if self._inline(handler):
                del self.ready[index]
                self._run_inline(job, handler, min(budget, left))
                return True
            session = None
            if handler.transactional:
                session = d.store.lend(d.io_deadline)
                if session is None:
                    continue  # every pooled connection is lent: a plain job may go first
            del self.ready[index]
            self._launch(job, handler, min(budget, left), session, time.monotonic() + left)
            return True
        return False

    def _inline(self, handler: Handler) -> bool:
        """A quick plain handler runs on the drain's own thread, under its SIGALRM limit
        (where there is one): a worker thread would cost more than the job."""
        return (not handler.transactional and not handler.is_async and self.d.limits.active
                and DURATIONS.quick(handler.job_type))

    def _run_inline(self, job: Job, handler: Handler, timeout: float) -> None:
        d = self.d
        started = time.monotonic()
        d.started += 1
        d.pace.start()
        d._run_job(job, handler, timeout)
        DURATIONS.record(handler.job_type, time.monotonic() - started)
        d.pace.finish()
        d.completer.flush_if_due()

    def _launch(self, job: Job, handler: Handler, timeout: float,
                session: Session | None, must_end: float) -> None:
        d = self.d
        started = time.monotonic()
        if handler.payload_model is not None:
            try:
                job = _with_parsed_payload(job, handler)
            except Discard as exc:
                if session is not None:
                    d.store.give_back(session, broken=False)
                d._ended(job, handler, exc, started)
                return
        d.started += 1
        d.pace.start()
        call = _transact if session is not None else _call_plain
        task = Task(job, handler, timeout, started, call, self.outbox, must_end=must_end,
                    start_by=d.start_by.get(job.id))
        if session is not None:
            task.conn = session.conn
            task.transaction = _Transaction(session, job, d.done)
        self.running[id(task)] = task
        self.by_type[job.job_type] += 1
        self.runner.start(task)

    # --- finishing ---

    def _wait_seconds(self) -> float:
        now = time.monotonic()
        limits = [t.limit_at - now for t in self.running.values() if t.fired_at is None]
        return max(0.0, min([TICK_SECONDS, *limits]))

    def _collect(self, timeout: float) -> None:
        try:
            task = self.outbox.get(timeout=timeout) if timeout > 0 else self.outbox.get_nowait()
        except queue.Empty:
            return
        while True:
            self._finished(task)
            try:
                task = self.outbox.get_nowait()
            except queue.Empty:
                return

    def _finished(self, task: Task) -> None:
        d = self.d
        if self.runaways.pop(id(task), None) is not None:
            return  # recorded as timed out already, its connection given back then
        if task.late:  # it could not begin in time for its rate window: it never ran
            self._never_began(task)
            return
        transaction: _Transaction | None = task.transaction
        if transaction is not None:
            d.store.give_back(transaction.session,
                              broken=task.fired_at is not None or transaction.broken)
        self._forget(task)
        self.claimed_nothing = False
        d.pace.finish()
        job, handler = task.job, task.handler
        duration = (task.ended or 0.0) - (task.begun or task.started)
        if not handler.is_async and not handler.transactional and task.begun is not None:
            DURATIONS.record(job.job_type, (task.ended or task.begun) - task.begun)
        error = task.error
        if transaction is not None and task.result is _COMMITTED:
            d._count(job, "done", duration, None)  # its transaction wrote done with its work
        elif task.fired_at is not None:
            d._ended(job, handler, HandlerTimeout(f"timed out after {task.timeout:g} s"),
                     task.started)
        elif error is None:
            d.completer.add(d.done(job, task.result), job, started=task.started,
                            duration=duration)
        elif isinstance(error, _StaleClaim):
            d._count(job, "stale", duration, None)
        else:
            # SystemExit or KeyboardInterrupt raised by a handler on a worker thread is that
            # job's failure: it cannot stop the drain from there.
            d._ended(job, handler, error, task.started)

    def _sync_controls(self) -> None:
        """About every CONTROL_SECONDS: write the progress handlers reported and tell the
        handlers of jobs asked to stop (``job.cancel_requested``). Jobs that end within a
        second and report nothing (most) cost no statement."""
        now = time.monotonic()
        if now < self.next_sync:
            return
        self.next_sync = now + CONTROL_SECONDS
        tasks = [t for t in self.running.values() if not t.finished and (
            now - t.started >= CONTROL_SECONDS or t.job.control.has_progress)]
        if not tasks:
            return
        jobs = [t.job for t in tasks]
        asked = self.d.store.sync_controls(jobs, [j.control.take_progress() for j in jobs])
        for job in jobs:
            if job.id in asked:
                job.control.cancel_requested = True

    def _enforce_limits(self) -> None:
        now = time.monotonic()
        for task in list(self.running.values()):
            if task.finished:
                continue
            if task.fired_at is None:
                if now >= task.limit_at:
                    if self.runner.revoke(task):
                        self._never_began(task)
                        continue
                    task.fired_at = now
                    self.runner.interrupt(task)
            elif now - task.fired_at >= RUNAWAY_GRACE_SECONDS:
                self._runaway(task, now)
            else:
                self.runner.interrupt(task)  # again: it may have caught the first
        for task in self.runaways.values():
            self.runner.interrupt(task)

    def _never_began(self, task: Task) -> None:
        """A task whose handler never began before its time ran out (the event loop was held
        by another handler): nothing of it ran, so it is handed back, uncharged."""
        self._forget(task)
        if task.transaction is not None:
            self.d.store.give_back(task.transaction.session, broken=False)
        self.d._add_released([task.job])

    def _forget(self, task: Task) -> None:
        self.running.pop(id(task), None)
        self.by_type[task.job.job_type] -= 1
        self.isolated = False if not self.running else self.isolated

    def _runaway(self, task: Task, now: float) -> None:
        """A handler that ignored its limit: record its job as timed out without it, and
        take its connection back (broken: it is closed under the runaway), so that a
        runaway never keeps a pooled connection lent past this moment."""
        d = self.d
        self._forget(task)
        self._give_up(task)
        d._ended(task.job, task.handler,
                 HandlerTimeout(f"timed out after {task.timeout:g} s"), task.started)
        log.error("job %s (%s) ignored its time limit: still running %.1f s after it ran out "
                  "(it caught HandlerTimeout, or is blocked where Python cannot interrupt "
                  "it). Its job is recorded as timed out and whatever it does later is not "
                  "written. Never swallow HandlerTimeout; give blocking calls a timeout.",
                  task.job.id, task.job.job_type, now - task.fired_at if task.fired_at else 0)

    def _stop_all(self) -> None:
        """On the way out after an error: hand back what never began, interrupt every other
        handler, give them a moment."""
        for task in list(self.running.values()):
            if self.runner.revoke(task):
                self._never_began(task)
        for task in self.running.values():
            if not task.finished:
                task.fired_at = task.fired_at or time.monotonic()
                self.runner.interrupt(task)
        until = time.monotonic() + RUNAWAY_GRACE_SECONDS
        while any(not t.finished for t in self.running.values()) and time.monotonic() < until:
            time.sleep(0.005)
        for task in list(self.running.values()):
            if not task.finished:
                self._give_up(task)

    def _give_up(self, task: Task) -> None:
        """No longer wait for ``task``: it is a runaway, and its pooled connection (if any)
        goes back to the pool as broken now, not when (if ever) the handler returns."""
        self.runaways[id(task)] = task
        if task.transaction is not None:
            self.d.store.give_back(task.transaction.session, broken=True)

    def _count_abandoned(self) -> None:
        abandoned = [t for t in self.runaways.values() if not t.finished]
        self.d.summary.abandoned += len(abandoned)


def _run_async(handler: Handler, timeout: float, *args: Any) -> Any:
    """An ``async def`` handler on the drain's own thread (PGDRAIN_CONCURRENCY=1): awaited on
    an event loop of its own, cancelled at its time limit."""
    import asyncio

    async def limited() -> Any:
        try:
            return await asyncio.wait_for(handler.func(*args), timeout)
        except TimeoutError:
            raise HandlerTimeout(f"timed out after {timeout:g} s") from None

    return asyncio.run(limited())


def _call_plain(task: Task) -> Any:
    return task.handler.func(task.job)


_COMMITTED = object()
"""What a transaction's run returns: the handler's writes and its job's done (and result)
committed."""


class _Transaction:
    """A transactional handler's one protocol, on its own pooled connection, on the drain's
    thread or a worker's: its writes and its job's done commit together, or not at all.
    Written by hand rather than with Session.transaction(): after a timeout the connection may
    be mid-message, and must be dropped (``broken``: the server then rolls back) instead of
    reused."""

    def __init__(self, session: Session, job: Job, done: Callable[[Job, Any], Finish]):
        self.session = session
        self.job = job
        self.done = done
        self.broken = False

    def run(self, call: Callable[[Any], Any], timeout: float) -> object:
        """``call(conn)`` (the handler) inside the transaction, then the job's done write and
        the commit; raises what the handler raised (the transaction rolled back), _StaleClaim
        when the claim was lost meanwhile."""
        session = self.session
        session.rows("transaction_begin")
        try:
            # A second past the handler's own limit, so that the limit normally speaks first.
            session.rows("transaction_bounds", milliseconds=math.ceil((timeout + 1) * 1000))
            value = call(session.conn)
            if pgstore.finish_many(session, [self.done(self.job, value)]).stale:
                raise _StaleClaim
            # A deferred constraint or a serialization failure surfaces here: the job's error.
            session.rows("transaction_commit")
        except HandlerTimeout:
            self.broken = True  # mid-protocol: drop it
            raise
        except BaseException:
            try:
                session.rows("transaction_rollback")
            except BaseException:
                self.broken = True
            raise
        return _COMMITTED


def _transact(task: Task) -> object:
    """A transactional handler on a worker thread (see _Transaction)."""
    transaction: _Transaction = task.transaction
    return transaction.run(lambda conn: task.handler.func(task.job, conn), task.timeout)
