"""Job types for test_runaways.py (PGDRAIN_JOBS=...,tests.reliability.runaway_jobs): handlers
that ignore their time limit, block the event loop, or cut the drain's own connection.

Loaded through PGDRAIN_JOBS only by the tests that need them, and taken out of the process's
REGISTRY after each (``unload``): their short budgets and their hooked type would otherwise
change every later drain of the process (its smallest budget, its hook handler).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

import pgdrain
from pgdrain.db import connect

# A runaway never runs longer than this, whatever the test does: the suite must end.
RUNAWAY_BOUND_SECONDS = 30.0

RELEASE = threading.Event()
"""Set by the test at its end: the runaways return (what they then do is never written)."""
_lock = threading.Lock()
_running = 0
RAN: list[tuple[int, str, float]] = []
"""Every execution's start: (job id, job type, time.monotonic()), in this process."""
HOOKED: list[tuple[int, str | None]] = []
"""The on_failed hook's calls: (failed job's id, its error)."""


def _began(job: pgdrain.Job) -> None:
    with _lock:
        RAN.append((job.id, job.job_type, time.monotonic()))


def runaways_running() -> int:
    with _lock:
        return _running


@pgdrain.job("runaway-tx", timeout=0.5, max_attempts=1, transactional=True)
def runaway_tx(job: pgdrain.Job, conn) -> None:
    """Ignores its time limit as a handler blocked in C code does: Event.wait is a lock acquire,
    which the HandlerTimeout aimed at its thread cannot enter (it is raised only when Python
    runs again), and it swallows that one too. Returns once the test sets RELEASE."""
    global _running
    _began(job)
    with _lock:
        _running += 1
    try:
        bound = time.monotonic() + RUNAWAY_BOUND_SECONDS
        while not RELEASE.is_set() and time.monotonic() < bound:
            try:  # noqa: SIM105 (what a handler must never do: the point of the test)
                RELEASE.wait(max(0.0, bound - time.monotonic()))
            except BaseException:
                pass
    finally:
        with _lock:
            _running -= 1


@pgdrain.job("tx-write", timeout=5, transactional=True)
def tx_write(job: pgdrain.Job, conn) -> None:
    """Writes a row in its own transaction: committed with its done, or not at all."""
    _began(job)
    conn.run("INSERT INTO tx_writes (job_id) VALUES (:id)", id=job.id)


@pgdrain.job("tx-overrun", timeout=0.3, max_attempts=1, transactional=True)
def tx_overrun(job: pgdrain.Job, conn) -> None:
    """Writes a row in its transaction, then overruns its 0.3 s budget: the write rolls back."""
    _began(job)
    conn.run("INSERT INTO tx_writes (job_id) VALUES (:id)", id=job.id)
    time.sleep(2)


def _hook(failed: dict, error: str | None) -> None:
    HOOKED.append((failed["id"], error))


@pgdrain.job("fails-hooked", timeout=5, max_attempts=1, on_failed=_hook)
def fails_hooked(job: pgdrain.Job) -> None:
    """Fails on its only attempt: its hook's job (pgdrain.on-failed, transactional) follows."""
    _began(job)
    raise RuntimeError("failed for its hook")


@pgdrain.job("async-blocker", timeout=2, max_attempts=1)
async def async_blocker(job: pgdrain.Job) -> None:
    """Holds the event loop: time.sleep in a coroutine (payload["seconds"]), which no
    cancellation interrupts."""
    _began(job)
    time.sleep(job.payload["seconds"])


@pgdrain.job("async-small", timeout=1)
async def async_small(job: pgdrain.Job) -> None:
    """About 3 ms of awaiting."""
    _began(job)
    await asyncio.sleep(0.003)


def _slot_holder_pid(conn) -> int | None:
    """The backend holding a drain slot in this database (drain_slot_take's advisory lock)."""
    from pgdrain.store import DRAIN_SLOT_LOCK_KEY

    rows = conn.run("""
        SELECT pid FROM pg_locks
        WHERE locktype = 'advisory' AND classid = :key::int::oid AND objsubid = 2 AND granted
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())""",
                    key=DRAIN_SLOT_LOCK_KEY)
    return rows[0][0] if rows else None


KILLED: list[int] = []
"""The backends cut-slot-holder terminated."""


def _cut_slot_holder(job: pgdrain.Job) -> None:
    _began(job)
    other = connect(os.environ["DATABASE_URL"])
    try:
        pid = _slot_holder_pid(other)
        assert pid is not None, "no drain holds a slot"
        other.run("SELECT pg_terminate_backend(:pid, 5000)", pid=pid)
        KILLED.append(pid)
    finally:
        other.close()


@pgdrain.job("cut-slot-holder-tx", timeout=5, transactional=True)
def cut_slot_holder_tx(job: pgdrain.Job, conn) -> None:
    """Terminates the session that holds the drain's slot (an operator's
    pg_terminate_backend, a failover), from a transactional handler."""
    _cut_slot_holder(job)


@pgdrain.job("cut-slot-holder", timeout=5)
def cut_slot_holder(job: pgdrain.Job) -> None:
    """The same from a plain handler."""
    _cut_slot_holder(job)


@pgdrain.job("record-tx-overrun", timeout=0.3, max_attempts=1, transactional=True)
def record_tx_overrun(job: pgdrain.Job, conn) -> None:
    """A transactional recording job (recording_jobs.py) that overruns its 0.3 s budget: its
    time limit stops it, in its transaction."""
    from tests.reliability import recording_jobs

    recording_jobs.record(job)


def unload() -> None:
    """Release the runaways and take these types (and the hook handler their hooked type
    installed) out of the process's REGISTRY, and this module out of sys.modules: the next
    test loads them afresh, and the others never see them."""
    RELEASE.set()
    for job_type in ("runaway-tx", "tx-write", "tx-overrun", "fails-hooked", "async-blocker",
                     "async-small", "cut-slot-holder-tx", "cut-slot-holder", "record-tx-overrun",
                     "pgdrain.on-failed"):
        pgdrain.REGISTRY._handlers.pop(job_type, None)
    sys.modules.pop(__name__, None)
