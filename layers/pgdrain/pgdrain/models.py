"""The values pgdrain passes around: job states, claimed jobs and operation results."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class Status(enum.StrEnum):
    """A job's ``status``; the words are the seed article's and users' SQL relies on them."""

    PENDING = "pending"
    """Waiting until ``run_at``; the claim moves it to running."""
    RUNNING = "running"
    """Claimed under a lease; its worker finishes it, or the janitor reclaims it at expiry."""
    DONE = "done"
    """Finished; the janitor purges it after the retention period."""
    FAILED = "failed"
    """Dead-lettered with its last error, out of attempts or discarded; requeue to run again."""


@dataclass(frozen=True, slots=True)
class Job:
    """A claimed job, as the claim returned it. ``lease_token`` identifies this claim."""

    id: int
    job_type: str
    payload: Any
    attempts: int
    max_attempts: int
    queue: str
    priority: int
    run_at: datetime
    created_at: datetime
    claimed_at: datetime
    lease_expires_at: datetime
    lease_token: str
    dedupe_key: str | None = None
    lost_claims: int = 0
    """How often a drain died holding this job before it was known to have started; when
    above 0 the job is claimed alone, its start recorded (see policy.after_lost_lease)."""
    payload_error: str | None = None
    """Why the stored payload could not be decoded (``payload`` is then None): the drain
    fails the job with this reason instead of running it."""

    @property
    def idempotency_key(self) -> str:
        """A key that is the same on every attempt of this job: pass it to outside providers."""
        return f"pgdrain-job-{self.id}"


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """The id of an enqueued job; ``created`` is False when a live duplicate's id came back.

    ``due`` is True when a job created now is already due (by the database's clock).
    """

    id: int
    created: bool
    due: bool = False


@dataclass(frozen=True, slots=True)
class Written:
    """Which finishing writes took effect. ``stale`` ids belonged to a claim that was lost."""

    ids: tuple[int, ...] = ()
    stale: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class JanitorResult:
    """What one janitor pass did; ``ran`` is False when another drain held the janitor lock."""

    ran: bool
    reclaimed: int = 0
    """Expired leases put back to pending (charged, with backoff, or refunded)."""
    failed: int = 0
    """Expired leases with a recorded start, out of attempts: moved to failed."""
    purged: int = 0
    """Old done rows deleted."""
    refunded: int = 0
    """Of ``reclaimed``: jobs whose start was never recorded, given their attempt back."""


@dataclass(frozen=True, slots=True)
class Backlog:
    """Due pending jobs (counted up to a cap) and how long the oldest has waited."""

    due: int = 0
    oldest_due_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts by queue and status, and the lag of the oldest due pending job."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    due: int = 0
    oldest_due_seconds: float = 0.0

    def total(self, status: str) -> int:
        return sum(by_status.get(status, 0) for by_status in self.counts.values())
