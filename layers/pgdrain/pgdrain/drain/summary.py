"""What one drain did: its counts, and why it stopped, both typed (no counter named by a
string). ``Stop`` and ``Count`` are ``StrEnum``s: the summary's ``stopped`` and the outcome the
observer is told stay plain strings for the function's JSON and the logs."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any

from ..models import Outcome


class Stop(enum.StrEnum):
    """Why a drain stopped."""

    EMPTY = "empty"
    MAX_JOBS = "max_jobs"
    DEADLINE = "deadline"
    BUSY = "busy"
    """PGDRAIN_MAX_DRAINS drains were running already."""
    RATE_LIMITED = "rate_limited"
    """Only work a rate limit holds back was due, and it frees too late to run."""
    DATABASE_ERROR = "database_error"


class Count(enum.StrEnum):
    """How a job's attempt is counted in the summary (and named to the observer)."""

    DONE = "done"
    RETRIED = "retried"
    FAILED = "failed"
    SNOOZED = "snoozed"
    RELEASED = "released"
    STALE = "stale"


COUNTED = {Outcome.DONE: Count.DONE, Outcome.RETRY: Count.RETRIED, Outcome.FAIL: Count.FAILED,
           Outcome.SNOOZE: Count.SNOOZED, Outcome.WAIT: Count.SNOOZED,
           Outcome.RELEASE: Count.RELEASED}
"""The count of each outcome a finishing write records (a stale write: ``Count.STALE``)."""


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
    """Runs that snoozed, continued (pgdrain.Continue) or began a wait for a signal
    (pgdrain.WaitFor): their attempts given back."""
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
    stopped: Stop = Stop.EMPTY
    """Why the drain stopped: empty, max_jobs, deadline, busy (PGDRAIN_MAX_DRAINS drains
    were running already), rate_limited or database_error."""
    error: str | None = None
    """With ``stopped: "database_error"``: what went wrong, in a few words (details are in
    the log)."""

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "stopped": str(self.stopped)}

    def add(self, count: Count) -> None:
        """One more job counted as ``count``."""
        match count:
            case Count.DONE:
                self.done += 1
            case Count.RETRIED:
                self.retried += 1
            case Count.FAILED:
                self.failed += 1
            case Count.SNOOZED:
                self.snoozed += 1
            case Count.RELEASED:
                self.released += 1
            case Count.STALE:
                self.stale += 1
