"""The time budget of one invocation, as pure rules of numbers (seconds; ``now`` is the
caller's ``time.monotonic()``).

Of the time left at the start, the safety margin is kept for recording outcomes and
returning: no handler runs into it. Database I/O may use ``IO_SHARE_OF_MARGIN`` of it; the
rest is left for returning. A job starts only if its budget (its handler's timeout, or
PGDRAIN_JOB_TIMEOUT_SECONDS) fits in what is left after the margin, with two exceptions that
would otherwise block the queue (``cut_short``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..registry import Registry
from ..settings import Settings

# An invocation's first job runs with less than its budget (see cut_short), but not with less
# than this: a sliver of time would only spend its attempt on a certain timeout.
MIN_CUT_SHORT_SECONDS = 1.0

# Of the safety margin, the share database I/O may still use; the rest is for returning.
IO_SHARE_OF_MARGIN = 0.5


@dataclass(frozen=True, slots=True)
class Budget:
    """The invocation's numbers, fixed at its start."""

    margin: float
    """Kept for recording outcomes and returning (``Settings.margin_for``)."""
    lease: float
    usable: float
    """The most time any job of this invocation can have."""
    smallest: float
    """The smallest job budget of the registry (or the default job timeout)."""
    io_deadline: float
    """The ``time.monotonic()`` after which no database I/O may wait."""

    @classmethod
    def at_start(cls, settings: Settings, registry: Registry, start_left: float,
                 now: float) -> Budget:
        margin = settings.margin_for(start_left)
        return cls(margin=margin, lease=settings.lease_for(start_left),
                   usable=start_left - margin, smallest=smallest_budget(registry, settings),
                   io_deadline=now + start_left - margin * (1 - IO_SHARE_OF_MARGIN))

    def left(self, time_left: float) -> float:
        """Of the invocation's ``time_left``, what handlers may use."""
        return time_left - self.margin

    def least_to_start(self, started: int) -> float:
        """The least time left (after the margin) in which some job may still start, once
        ``started`` jobs have started in this invocation."""
        if not started:
            return min(self.smallest, MIN_CUT_SHORT_SECONDS)
        if self.smallest > self.usable:
            return max(MIN_CUT_SHORT_SECONDS, self.usable / 2)
        return self.smallest

    def cut_short(self, budget: float, left: float, started: int) -> bool:
        """Whether a job whose ``budget`` exceeds the time ``left`` runs anyway, with what is
        left.

        Released, a job whose budget this function can never give (a 30 s budget in Lambda's
        default 3 s function) would come back on every drain and block the queue. It runs
        with the time there is, if at least MIN_CUT_SHORT_SECONDS are left, and after the
        invocation's first job at least half of what the invocation could ever give it. The
        invocation's first job also runs when the janitor and connecting ate into a budget
        that would otherwise have fitted.
        """
        if budget > self.usable:
            floor = MIN_CUT_SHORT_SECONDS if not started else max(
                MIN_CUT_SHORT_SECONDS, self.usable / 2)
        elif not started:
            floor = MIN_CUT_SHORT_SECONDS
        else:
            return False
        return left >= floor

    def may_ask(self, time_left: float) -> bool:
        """Whether there is time for one more statement before returning (the margin's I/O
        share is not spent yet)."""
        return time_left > self.margin * (1 - IO_SHARE_OF_MARGIN)


def smallest_budget(registry: Registry, settings: Settings) -> float:
    budgets: Iterable[float] = (h.timeout for h in registry if h.timeout is not None)
    return min([*budgets, settings.job_timeout_seconds])


def shortest_runnable_seconds(registry: Registry, settings: Settings) -> float:
    """The least time after the safety margin in which a drain can run a job at all."""
    return min(smallest_budget(registry, settings), MIN_CUT_SHORT_SECONDS)


def late(start_by: float | None, now: float) -> bool:
    """Whether a job claimed under a rate limit, to start by ``start_by``, may no longer: its
    start would not count in the window its claim was counted in. It is handed back
    unstarted (uncharged; the rate runs below its limit, never above)."""
    return start_by is not None and now > start_by
