"""What one drain pass shares between its rooms: its store, settings and budget, the summary
it counts into, and the completer its outcomes are written through."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from ..completer import Completer, Recorded
from ..models import Finish, Job
from ..registry import Handler, Registry
from ..settings import Settings
from ..timeouts import TimeLimits
from . import outcomes
from .budget import Budget
from .checkpoints import Checkpoints
from .outcomes import Ended
from .planner import Pace
from .ports import DrainObserver, DrainStore, Launcher
from .summary import COUNTED, Count, DrainSummary, Stop

log = logging.getLogger("pgdrain.drain")  # the library's one drain logger, as users filter it


class DrainState:
    def __init__(self, store: DrainStore, registry: Registry, settings: Settings, *,
                 time_left: Callable[[], float], observer: DrainObserver, budget: Budget,
                 launcher: Launcher | None, limits: TimeLimits):
        self.store = store
        self.registry = registry
        self.settings = settings
        self.time_left = time_left
        self.observer = observer
        self.budget = budget
        self.launcher = launcher
        self.limits = limits
        self.summary = DrainSummary()
        self.completer = Completer(store.finish_many, self._recorded)
        self.checkpoints = Checkpoints(store)
        self.pace = Pace()
        self.started = 0
        """Jobs started so far (the first one's budget rules differ: ``Budget.cut_short``)."""
        self.inline: Job | None = None
        """The job whose handler runs on the drain's own thread now."""
        self._cut_short_types: set[str] = set()
        self.batches: dict[int, tuple[Handler, list[Job]]] = {}
        """The batches running (drain.batches), by their lead job's id: the type's handler
        and the items. Empty unless a batch handler runs."""

    def left(self) -> float:
        """The time handlers may still use (the invocation's, less the margin)."""
        return self.budget.left(self.time_left())

    def stopping(self, reason: Stop) -> Stop:
        """The drain stops with work maybe left: get the launcher ready for its
        continuation now, while handlers may still be running, not at the last moment."""
        if self.launcher is not None:
            with suppress(Exception):
                self.launcher.prepare()
        return reason

    # --- outcomes ---

    def done(self, job: Job, value: Any) -> Finish:
        return outcomes.done(job, value, self.settings.result_max_bytes,
                             keep_done=self._keep_done)

    @property
    def _keep_done(self) -> bool:
        """Done rows are kept for the retention; at 0 a finish deletes them."""
        return self.settings.retention_seconds > 0

    def settle(self, ended: Ended) -> None:
        """An attempt ended: its finishing write waits in the completer, or (written by its
        own transaction, or stale) it is counted now. A batch's end is each item's."""
        if self.batches:
            batch = self.batches.pop(ended.job.id, None)
            if batch is not None:
                from .batches import item_ends

                for item in item_ends(ended, *batch):
                    self._settle(item)
                # The pace counts jobs: the loop counts the call as one, and the rest here.
                self.pace.finished += len(batch[1]) - 1
                return
        self._settle(ended)

    def _settle(self, ended: Ended) -> None:
        settled = outcomes.settle(ended, result_max_bytes=self.settings.result_max_bytes,
                                  backoff=self.settings.backoff, keep_done=self._keep_done)
        if settled.finish is not None:
            self.completer.add(settled.finish, ended.job, started=ended.started,
                               duration=ended.duration, error=settled.error)
        elif settled.count is not None:
            self.count(ended.job, settled.count, ended.duration, None)

    def fail_at_once(self, job: Job, error: Exception) -> None:
        """Dead-letter a job that cannot run at all (no handler, a payload Python cannot
        hold): retrying would not change that. Nothing of it ran."""
        self.completer.add(Finish.fail(job, str(error)), job, started=time.monotonic(),
                           duration=0.0, error=error)

    def release(self, jobs: list[Job]) -> None:
        """Hand claimed jobs back unstarted, their attempt refunded (a batch's, every item)."""
        now = time.monotonic()
        if self.batches:
            jobs = [item for job in jobs
                    for item in self.batches.pop(job.id, (None, [job]))[1]]
        for job in jobs:
            self.completer.add(Finish.release(job), job, started=now, duration=0.0)

    def _recorded(self, outcome: Recorded) -> None:
        """The completer wrote an outcome: count it and tell the observer."""
        self.count(outcome.job, Count.STALE if outcome.stale else COUNTED[outcome.outcome],
                   outcome.duration, outcome.error)

    def count(self, job: Job, count: Count, duration: float,
              error: BaseException | None) -> None:
        self.summary.add(count)
        self.observer.job_finished(job, count, duration, error)

    # --- what the log says ---

    def warn_cut_short(self, job: Job, handler: Handler, left: float) -> None:
        if job.job_type in self._cut_short_types:  # once per type and invocation
            return
        self._cut_short_types.add(job.job_type)
        log.warning("job %s (%s) has a %g s time budget but this invocation has %.1f s "
                    "left after the safety margin: it runs with that; if this recurs, raise "
                    "the function's timeout or lower the job type's timeout",
                    job.id, job.job_type, handler.timeout or self.settings.job_timeout_seconds,
                    left)

    def handler_stuck(self, seconds: float) -> None:
        """Called by the time limit when a handler ignores every HandlerTimeout."""
        job = self.inline
        log.error("job %s (%s) ignored its time limit: still running %.1f s after it ran out, "
                  "catching HandlerTimeout (except BaseException, or a bare except) at more "
                  "than one level, or inside code that never returns to Python. If it does not "
                  "stop, Lambda ends this invocation at its timeout and its jobs come back "
                  "uncharged when their leases expire. Never swallow HandlerTimeout.",
                  job.id if job else "?", job.job_type if job else "?", seconds)
