"""One drain pass: the drain's slot, the janitor, the fan-out, the loop, the continuation;
and ``drain()``, its entry point."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import suppress

from .. import fanout
from ..db import Connector, NoTimeLeft
from ..errors import ConfigError, DatabaseConnectError, DatabaseUnavailable
from ..hooks import install as install_hooks
from ..registry import Registry
from ..runner import Runner, runner
from ..settings import Settings
from ..timeouts import TimeLimits
from .budget import Budget
from .loop import Loop
from .planner import Batched, ClaimPlanner
from .ports import DrainObserver, DrainStore, Launcher, NullObserver
from .postgres import PostgresStore
from .state import DrainState
from .summary import DrainSummary, Stop

log = logging.getLogger("pgdrain.drain")  # the library's one drain logger, as users filter it


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
    """Run the janitor, then drain due jobs; see the package docstring.

    ``time_left`` returns the seconds until the invocation's deadline. The drain never starts a
    job whose time budget (its handler's timeout, or ``job_timeout_seconds``) does not fit in
    the time left minus the safety margin; jobs it claimed but cannot start are released with
    their attempt refunded, and the drain stops. The exception is the invocation's first job,
    which runs cut to the time left if at least a second is left, and a job whose budget is
    longer than the function can ever give (see ``Budget.cut_short``): otherwise such budgets
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
    budget = Budget.at_start(settings, registry, start_left, time.monotonic())
    with TimeLimits(on_stuck=lambda seconds: state.handler_stuck(seconds)) as limits:
        state = DrainState(store, registry, settings, time_left=time_left,
                           observer=observer or NullObserver(), budget=budget,
                           launcher=launcher, limits=limits)
        return _Pass(state, runner).run()


class _Pass:
    def __init__(self, state: DrainState, runner: Runner | None):
        self.s = state
        self.runner = runner
        self.by_queue = False
        """Some queue is paused, capped or rate-limited (the janitor saw): counts read queue
        by queue, as the claims do."""

    def run(self) -> DrainSummary:
        s = self.s
        try:
            s.store.open(s.budget.io_deadline)
            slot = s.store.take_slot(s.settings.max_drains)
            if slot is None:
                s.summary.stopped = Stop.BUSY
                return s.summary
            try:
                planner = self._janitor()
                self._fan_out()
                Loop(s, planner, self.runner or runner()).run()
            finally:
                if s.store.connected:
                    with suppress(DatabaseUnavailable):
                        s.store.give_back_slot(slot)
            self._continue_if_due()
        except DatabaseUnavailable as exc:
            self._stopped_by_database(exc)
        return s.summary

    def _janitor(self) -> ClaimPlanner:
        """The janitor's work, counted; and the planner for what it saw of the queue."""
        s, summary = self.s, self.s.summary
        janitor = s.store.janitor(s.settings, s.registry)
        summary.reclaimed = janitor.reclaimed + janitor.failed
        summary.reclaimed_failed = janitor.failed
        summary.reclaimed_refunded = janitor.refunded
        summary.expired = janitor.expired
        summary.purged = janitor.purged
        self.by_queue = janitor.queues_set
        planner = ClaimPlanner(alone_due=janitor.alone_due, controlled=janitor.controlled,
                               fair=janitor.tenants, rated=bool(s.registry.type_rates()),
                               lease=s.budget.lease, queues=s.settings.queues or None,
                               by_queue=janitor.queues_set, batches=self._batches())
        summary.vacuumed = int(s.store.vacuum_if_due(s.settings))
        summary.scheduled = s.store.enqueue_scheduled(
            s.registry, stored_due=janitor.schedules_due and s.registry.stored_schedules)
        return planner

    def _batches(self) -> Batched | None:
        """The batch types' claims, when the job modules declare batch handlers (not rated
        ones: the controlled claim takes those per item) and the store claims batches."""
        s = self.s
        handlers = s.registry.batch_types()
        if not handlers or not isinstance(s.store, PostgresStore):
            return None  # another store's plain claim takes them; the loop still groups them
        from .batches import BatchClaims

        s.store.use_batches({t: (h.batch_size or 1, h.batch_window)
                             for t, h in handlers.items()})
        claimed = {t: h for t, h in handlers.items() if t in s.store.batch_sizes}
        return BatchClaims(claimed) if claimed else None

    def _fan_out(self) -> None:
        """Start more drains when the backlog is more than this one runs at once: one per
        PGDRAIN_CONCURRENCY due jobs, up to PGDRAIN_MAX_DRAINS running in all."""
        s = self.s
        if s.launcher is None or s.settings.max_drains <= 1:
            return
        per_drain = s.settings.concurrency
        due = s.store.due(limit=per_drain * s.settings.max_drains,
                          queues=s.settings.queues or None, by_queue=self.by_queue)
        self._launch(fanout.wanted(due, per_drain), "fan-out")

    def _continue_if_due(self) -> None:
        """After giving the slot back: if due work is left, start a drain for it, so a
        backlog never waits for the schedule. Looking after the slot is free closes the
        race with a ring that was skipped because this drain still held it (see
        aws.doorbell)."""
        s = self.s
        if s.launcher is None or s.summary.stopped not in (Stop.EMPTY, Stop.MAX_JOBS,
                                                           Stop.DEADLINE):
            return
        if not s.budget.may_ask(s.time_left()):
            return  # no time to ask; the schedule's next tick will look
        if s.store.due(limit=1, queues=s.settings.queues or None, by_queue=self.by_queue):
            self._launch(1, "continue")

    def _launch(self, wanted: int, reason: str) -> None:
        """Start up to ``wanted`` drains, within the room the ledger of launches on their way
        gives (pgdrain.fanout); an invoke that failed gives its room back."""
        s = self.s
        assert s.launcher is not None
        reserved = s.store.reserve_launches(wanted, s.settings.max_drains) if wanted > 0 else 0
        if reserved:
            started = s.launcher.launch(reserved, reason)
            s.summary.continued += started
            if started < reserved:
                with suppress(DatabaseUnavailable):  # else they lapse by themselves
                    s.store.unreserve_launches(reserved - started)

    def _stopped_by_database(self, exc: DatabaseUnavailable) -> None:
        """End the drain on a database failure, with a summary that says so."""
        s = self.s
        s.store.discard()
        if isinstance(exc, NoTimeLeft):  # our own clock ran out before the next statement
            s.summary.stopped = Stop.DEADLINE
            log.warning("drain stopped at its deadline with outcomes unwritten; those jobs "
                        "come back uncharged when their leases expire")
            return
        s.summary.stopped = Stop.DATABASE_ERROR
        # The summary may reach an API client: pgdrain's short message, never the server's
        # fields, host or user (DatabaseConnectError says where; that is for the log).
        s.summary.error = ("could not connect to the database"
                           if isinstance(exc, DatabaseConnectError) else str(exc))
        log.error("drain stopped: %s; the jobs it claimed and did not record come back "
                  "uncharged when their leases expire", exc, exc_info=exc)
