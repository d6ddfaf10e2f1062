"""The janitor: at the top of every drain, expired leases are decided and finished, pending jobs
past their ``expires_at`` ended failed (``expired``), waits for signals past their timeout
made due, expired signals forgotten, old done jobs (and, after their own
retention, failed and cancelled ones) purged in bounded batches, and the table vacuumed when
dead rows pile up.

Overlapping drains never queue behind each other for it: a transaction-scoped advisory lock is
tried without waiting, and a drain that does not get it skips the janitor.
"""

from __future__ import annotations

import logging
from typing import Any

from . import signals, store, waiting
from .db import as_session
from .models import ExpiredLease, Finish, JanitorResult, Outcome
from .policy import DEFAULT_POLICY, Fail, Refund, Retry, after_lost_lease
from .registry import REGISTRY, Registry
from .settings import Settings

log = logging.getLogger(__name__)

LEASE_EXPIRED_ERROR = ("lease expired: the drain died while running this job (out of memory, "
                       "killed at the function's timeout, or crashed) after recording its start")


def run_janitor(conn: Any, settings: Settings, registry: Registry | None = None
                ) -> JanitorResult:
    """Reclaim expired leases and purge old finished jobs, in one short transaction.

    Takes a transaction-scoped advisory lock without waiting: if another drain is running the
    janitor, this returns ``ran=False`` at once instead of queueing behind it. An expired job
    is decided by ``policy.after_lost_lease`` with its type's policy from ``registry``: refunded
    when its start was never recorded, else back to ``pending`` with backoff, or ``failed``
    when out of attempts, so a job that kills its worker every time cannot loop forever. Needs
    a connection pgdrain owns (pg8000 native), since it commits.
    """
    registry = REGISTRY if registry is None else registry
    session = as_session(conn)
    with session.transaction():
        look = store.try_janitor_lock(session)
        alone_due = look["alone_due"]
        seen = {"controlled": look["controlled"], "queues_set": look["queues_set"],
                "tenants": look["tenants"], "schedules_due": look["schedules_due"]}
        if not look["locked"]:
            return JanitorResult(ran=False, alone_due=alone_due, **seen)
        expired = store.expired_leases(session, limit=settings.reclaim_batch_size)
        finishes = [_finish(lease, registry, settings) for lease in expired]
        hooked = registry.hooked_types()
        written = set(store.finish_many(session, finishes, hooked=hooked).ids)
        outcomes = [f.outcome for f in finishes if f.id in written]
        # Pending again with a claim lost behind it (refunded now, or before): to claim alone.
        alone_due = alone_due or any(
            f.id in written and (f.outcome is Outcome.REFUND or
                                 (f.outcome is Outcome.RETRY and lease.lost_claims > 0))
            for f, lease in zip(finishes, expired, strict=True))
        too_late = store.expire_pending(session, limit=settings.reclaim_batch_size,
                                        hooked=hooked)
        stopped = store.cancel_requested_pending(session, limit=settings.reclaim_batch_size)
        timed_out = 0
        if look["signals"]:  # no row there, no job waits for a signal: no statement
            timed_out, _ = signals.janitor_pass(session, limit=settings.reclaim_batch_size)
        if look["waiters"]:  # nobody waits for a job (pgdrain.wait): no statement
            waiting.forget_dead(session)
        purged = _purge(session, settings)
    for job in stopped:
        log.info("job %s (%s, queue %s) was pending though asked to stop: cancelled", job["id"],
                 job["job_type"], job["queue"])
    for job in too_late:
        log.info("job %s (%s, queue %s) expired before it started: failed", job["id"],
                 job["job_type"], job["queue"])
    failed, refunded = outcomes.count(Outcome.FAIL), outcomes.count(Outcome.REFUND)
    return JanitorResult(ran=True, reclaimed=len(outcomes) - failed, failed=failed,
                         purged=purged, refunded=refunded, alone_due=alone_due,
                         expired=len(too_late), cancelled=len(stopped),
                         timed_out=timed_out, **seen)


def _purge(session: Any, settings: Settings) -> int:
    """Old done jobs, then old failed and cancelled ones (their own, longer retention), at
    most ``purge_max_batches`` statements of ``purge_batch_size`` rows each per kind."""
    purged = 0
    for _ in range(settings.purge_max_batches):
        deleted = store.purge_done(session, retention_seconds=settings.retention_seconds,
                                   limit=settings.purge_batch_size)
        purged += deleted
        if deleted < settings.purge_batch_size:
            break
    for _ in range(settings.purge_max_batches):
        deleted = store.purge_dead(session, retention_seconds=settings.failed_retention_seconds,
                                   limit=settings.purge_batch_size)
        purged += deleted
        if deleted < settings.purge_batch_size:
            break
    return purged


def _finish(lease: ExpiredLease, registry: Registry, settings: Settings) -> Finish:
    handler = registry.get(lease.job_type)
    decision = after_lost_lease(lease.attempts, lease.max_attempts, settings.backoff,
                                started=lease.started,
                                policy=handler.policy if handler else DEFAULT_POLICY)
    if isinstance(decision, Refund):
        return Finish(lease.id, lease.lease_token, Outcome.REFUND)
    if isinstance(decision, Fail):
        return Finish(lease.id, lease.lease_token, Outcome.FAIL, error=LEASE_EXPIRED_ERROR)
    assert isinstance(decision, Retry)
    return Finish(lease.id, lease.lease_token, Outcome.RETRY, decision.delay_seconds,
                  LEASE_EXPIRED_ERROR)


def vacuum_if_due(conn: Any, settings: Settings) -> bool:
    """Vacuum ``jobs`` when dead row versions have piled up; True if a vacuum ran.

    Every claim and finish leaves a dead version of its row and a dead entry at the front of
    the claim's index, and autovacuum wakes only every ``autovacuum_naptime`` (60 s by
    default): at thousands of jobs a second the claim then reads thousands of dead entries
    (docs/benchmarks.md, growth). Run it outside any transaction. A role that may not vacuum
    the table (not its owner, nor granted PostgreSQL 17's MAINTAIN) never finds it due.
    """
    if settings.vacuum_dead_tuples <= 0:
        return False
    session = as_session(conn)
    if not store.vacuum_due(session, dead_tuples=settings.vacuum_dead_tuples,
                            interval_seconds=settings.vacuum_interval_seconds):
        return False
    store.vacuum(session)
    return True
