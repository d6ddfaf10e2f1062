"""The drain's store on PostgreSQL: the adapter of the ``DrainStore`` port over
``pgdrain.store`` (the catalogue's statements on a ``Connector``)."""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import fanout, flow_store
from .. import store as pgstore
from ..db import DEADLOCK_DETECTED, Connector, Session, sqlstate
from ..errors import DatabaseUnavailable
from ..janitor import run_janitor, vacuum_if_due
from ..models import Finish, JanitorResult, Job, Written
from ..policy import Backoff, Fail, after_failure
from ..registry import Registry
from ..scheduler import declare, enqueue_due
from ..settings import Settings
from ..store import ControlledClaim

if TYPE_CHECKING:
    from ..batch_store import BatchClaim
    from ..flow import Rate


class SlotLost(DatabaseUnavailable):
    """The connection holding the drain's slot is gone: the drain may no longer claim."""


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
        self.left_out = self.limited_types
        """The types the plain claims and counts leave out: the rated (claim_controlled
        takes them) and the batch types (claim_batch; ``use_batches``)."""
        self.batch_sizes: dict[str, tuple[int, float]] = {}
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

    def enqueue_scheduled(self, registry: Registry, stored_due: bool = False) -> int:
        declare(self.session(), registry)  # once per container: what `pgdrain schedules` reads
        return enqueue_due(self.session(), registry, stored_due=stored_due)

    def sync_controls(self, jobs: Sequence[Job], progress: Sequence[str | None]) -> set[int]:
        return pgstore.sync_controls(self.session(), jobs, progress)

    def job_states(self, ids: Sequence[int]) -> dict[int, str]:
        return pgstore.job_states(self.session(), ids)

    def job_parents(self, ids: Sequence[int]) -> dict[int, dict[int, tuple[str, str | None]]]:
        return pgstore.job_parents(self.session(), ids)

    def save_checkpoints(self, jobs: Sequence[Job], states: Sequence[str]) -> set[int]:
        return pgstore.save_checkpoints(self.session(), jobs, states)

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
              queues: Sequence[str] | None, fair: bool = False,
              by_queue: bool = False) -> list[Job]:
        return pgstore.claim(self._claiming(), batch_size=batch_size,
                             lease_seconds=lease_seconds, queues=queues,
                             limited_types=self.left_out, fair=fair, by_queue=by_queue)

    def claim_controlled(self, *, batch_size: int, lease_seconds: float,
                         queues: Sequence[str] | None) -> ControlledClaim:
        self._claiming()
        self._declare_rates()
        from .. import claiming  # only drains with caps or rates pay for it

        return claiming.claim_controlled(self.session(), batch_size=batch_size,
                                         lease_seconds=lease_seconds, queues=queues,
                                         type_rates=self.type_rates)

    def _declare_rates(self) -> None:
        # Once per invocation, not per warm connector: a rated type without its row has no
        # room (no job of it starts), so a row an operator deleted comes back at once.
        if not self.rates_declared:
            from .. import claiming

            claiming.declare_type_rates(self.session(), self.type_rates)
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
                                   limited_types=self.left_out)

    def use_batches(self, sizes: Mapping[str, tuple[int, float]]) -> None:
        """Claim the batch types (each its batch_size and batch_window; not rated ones, which
        the controlled claim takes per item) with ``claim_batch`` only."""
        self.batch_sizes = {t: v for t, v in sizes.items() if t not in self.type_rates}
        self.left_out = sorted(set(self.limited_types) | set(self.batch_sizes))

    def claim_batch(self, *, job_type: str, batch_size: int, take: int, batch_window: float,
                    lease_seconds: float, queues: Sequence[str] | None) -> BatchClaim:
        from ..batch_store import claim_batch_of_type

        return claim_batch_of_type(self._claiming(), job_type=job_type, batch_size=batch_size,
                                   take=take, batch_window=batch_window,
                                   lease_seconds=lease_seconds, queues=queues)

    def tenanted(self) -> bool:
        return pgstore.tenanted(self.session())

    def rated_due(self, queues: Sequence[str] | None) -> bool:
        return bool(self.limited_types) and flow_store.limited_due(
            self.session(), queues=(), job_types=self.limited_types, only_queues=queues)

    def finish_many(self, finishes: Sequence[Finish]) -> Written:
        """Write outcomes; a deadlock is retried once. The row triggers of dependencies lock
        a finishing parent's children in id order, but two batches of parents whose
        children interleave (one batch's first parent has the other's last child) can still
        take them in opposite orders: the server then fails one statement, which changed
        nothing, and it is run again (not inside a transaction: that one is lost)."""
        session = self.session()
        try:
            return pgstore.finish_many(session, finishes, hooked=self.hooked)
        except Exception as exc:
            if sqlstate(exc) != DEADLOCK_DETECTED or not session.autocommitting():
                raise
        return pgstore.finish_many(session, finishes, hooked=self.hooked)

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

    def due(self, *, limit: int, queues: Sequence[str] | None, by_queue: bool = False) -> int:
        due, controlled = pgstore.due_count(self.session(), limit=limit, queues=queues,
                                            limited_types=self.left_out,
                                            by_queue=by_queue)
        if due < limit and self.batch_sizes:
            from ..batch_store import batch_due

            due = min(limit, due + batch_due(self.session(), self.batch_sizes, queues))
        if due < limit and (controlled or self.type_rates):
            self._declare_rates()
            from .. import claiming

            due += claiming.controlled_due(self.session(), limit=limit - due, queues=queues,
                                           type_rates=self.type_rates)
        return due


def record_failure(conn: Any, job: Job, error: str, backoff: Backoff, *,
                   retryable: bool = True) -> tuple[str, bool]:
    """Retry or dead-letter a job whose attempt failed, as ``policy.after_failure`` decides.

    Returns the resulting status (``pending`` or ``failed``) and whether the write took effect.
    """
    decision = after_failure(job.attempts, job.max_attempts, backoff, retryable=retryable)
    if isinstance(decision, Fail):
        return "failed", pgstore.fail(conn, job, error)
    return "pending", pgstore.retry(conn, job, error, decision.delay_seconds)
