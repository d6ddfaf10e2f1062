"""The drain's ports: what it needs of the queue's storage, of whoever starts more drains,
and of whoever watches it (logs and metrics)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ..db import Session
from ..models import Finish, JanitorResult, Job, Written
from ..registry import Registry
from ..settings import Settings

if TYPE_CHECKING:
    from ..store import ControlledClaim


class DrainObserver(Protocol):
    """Receives each job's outcome, for logs and metrics, and the end of each claimed batch."""

    def job_finished(self, job: Job, outcome: str, duration: float,
                     error: BaseException | None) -> None: ...

    def batch_finished(self) -> None: ...


class NullObserver:
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

    def enqueue_scheduled(self, registry: Registry, stored_due: bool = False) -> int:
        """Enqueue the due ticks of the registry's schedules, and of the stored ones when
        ``stored_due`` (the janitor's look saw one due); how many jobs were created."""

    def sync_controls(self, jobs: Sequence[Job], progress: Sequence[str | None]) -> set[int]:
        """Write running jobs' progress (None: no report) and return those asked to stop."""

    def job_states(self, ids: Sequence[int]) -> dict[int, str]:
        """The saved state (JSON text) of those of the jobs that have one."""

    def job_parents(self, ids: Sequence[int]) -> dict[int, dict[int, tuple[str, str | None]]]:
        """The parents of jobs (depends_on): for each, each parent's end and result."""

    def save_checkpoints(self, jobs: Sequence[Job], states: Sequence[str]) -> set[int]:
        """Save each job's checkpoint, guarded by its claim; the ids saved."""

    def claim(self, *, batch_size: int, lease_seconds: float,
              queues: Sequence[str] | None, fair: bool = False,
              by_queue: bool = False) -> list[Job]:
        """The plain claim (``fair``: from each tenant in turn), leaving rate-limited types
        and capped or rate-limited queues to ``claim_controlled``; ``by_queue``: read queue
        by queue (the same jobs, faster beside a paused or controlled queue's backlog)."""

    def claim_alone(self, *, lease_seconds: float, queues: Sequence[str] | None) -> Job | None: ...

    def claim_controlled(self, *, batch_size: int, lease_seconds: float,
                         queues: Sequence[str] | None) -> ControlledClaim: ...

    def tenanted(self) -> bool:
        """Whether pending jobs name tenants."""

    def rated_due(self, queues: Sequence[str] | None) -> bool:
        """Whether a job of a rate-limited type (the registry's) is due."""

    def finish_many(self, finishes: Sequence[Finish]) -> Written: ...

    def session(self) -> Session:
        """The connection (the drain's own: claims and finishing writes)."""

    def lend(self, deadline: float) -> Session | None:
        """A connection of its own for a transactional handler, from a pool of
        ``pool_size``; None when all are lent."""

    def give_back(self, session: Session, *, broken: bool) -> None: ...

    def take_slot(self, slots: int) -> int | None: ...

    def give_back_slot(self, slot: int) -> None: ...

    def drains_running(self) -> int: ...

    def reserve_launches(self, wanted: int, slots: int) -> int:
        """Room for up to ``wanted`` launches within ``slots`` (pgdrain.fanout)."""

    def unreserve_launches(self, count: int) -> None: ...

    def due(self, *, limit: int, queues: Sequence[str] | None, by_queue: bool = False) -> int:
        """Due jobs a claim could take now, up to ``limit``: what decides continuation and
        fan-out (capped and rate-limited work within its room; not an ordering key's later
        jobs, nor work a cap or a rate holds back)."""


class Launcher(Protocol):
    """Starts more drains (an asynchronous invoke of the drain function in Lambda)."""

    def prepare(self) -> None:
        """Get ready to launch (import what it needs) while there is time to spare."""

    def launch(self, count: int, reason: str) -> int:
        """Start ``count`` drains; returns how many were started."""
