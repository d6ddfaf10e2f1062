"""Job types the function tests drain (PGDRAIN_JOBS=tests.support.jobs)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pgdrain


@pgdrain.job("test-noop", timeout=5)
def noop(job: pgdrain.Job) -> None:
    pass


@pgdrain.job("test-sleep", timeout=5)
def sleep(job: pgdrain.Job) -> None:
    """Sleeps payload["seconds"] (only on the attempts listed in payload["on_attempts"])."""
    attempts = job.payload.get("on_attempts")
    if attempts is None or job.attempts in attempts:
        time.sleep(job.payload["seconds"])


@pgdrain.job("test-boom", timeout=5)
def boom(job: pgdrain.Job) -> None:
    raise ValueError(f"boom on attempt {job.attempts}")


@pgdrain.job("test-snooze", timeout=5)
def snooze(job: pgdrain.Job) -> None:
    raise pgdrain.Snooze(job.payload.get("seconds", 60), "not yet")


@pgdrain.job("test-discard", timeout=5)
def discard(job: pgdrain.Job) -> None:
    raise pgdrain.Discard("the customer no longer exists")


@pgdrain.job("test-overrun", timeout=0.5)
def overrun(job: pgdrain.Job) -> None:
    """Overruns its 0.5 s budget; the marker file proves whether it was really stopped."""
    time.sleep(2)
    Path(job.payload["marker"]).write_text("the handler ran to its end")


@pgdrain.job("test-kill", timeout=5, max_attempts=2)
def kill(job: pgdrain.Job) -> None:
    """Kills its own process (a crash, an OOM kill) on the attempts in payload["on_attempts"]."""
    if job.attempts in job.payload.get("on_attempts", [job.attempts]):
        os.kill(os.getpid(), signal.SIGKILL)


@pgdrain.job("test-record", timeout=5, transactional=True)
def record(job: pgdrain.Job, conn) -> None:
    """Writes a row in the job's own transaction, then fails if the payload says so."""
    conn.run("INSERT INTO side_effects (job_id, attempt) VALUES (:id, :attempt)",
             id=job.id, attempt=job.attempts)
    if job.payload.get("fail"):
        raise RuntimeError("failed after writing")


@dataclass(frozen=True)
class Greeting:
    """Who to greet, and how often."""

    to: str
    times: int = 1
    tags: list[str] = field(default_factory=list)


@pgdrain.job("test-typed", timeout=5, payload=Greeting)
def typed(job: pgdrain.Job) -> None:
    """Fails unless the handler received the parsed model (not the raw dict)."""
    if not isinstance(job.payload, Greeting):
        raise TypeError(f"expected a Greeting, got {type(job.payload).__name__}")


@pgdrain.job("test-long", timeout=300)
def long_budget(job: pgdrain.Job) -> None:
    """Declares a budget longer than the tests' functions can give; sleeps payload["seconds"]."""
    time.sleep(job.payload.get("seconds", 0))


@pgdrain.job("test-exit", timeout=5)
def exit_drain(job: pgdrain.Job) -> None:
    """Raises SystemExit: not the job's failure, it stops the drain itself."""
    raise SystemExit("stopping the drain")


@pgdrain.job("test-orphan", timeout=5, transactional=True)
def orphan(job: pgdrain.Job, conn) -> None:
    """Inserts a child whose parent is missing: the deferred foreign key fails at COMMIT."""
    conn.run("INSERT INTO children (parent) VALUES (:id)", id=job.id)


@pgdrain.job("test-hold", timeout=1, transactional=True)
def hold(job: pgdrain.Job, conn) -> None:
    """Locks a row, then sleeps in a statement far past its 1 s time limit."""
    conn.run("UPDATE holds SET n = n + 1 WHERE id = 1")
    conn.run("SELECT pg_sleep(60)")


@pgdrain.job("test-swallow", timeout=0.5)
def swallow(job: pgdrain.Job) -> None:
    """Catches every HandlerTimeout and carries on (what a handler must never do): for ever,
    or with payload["once"], once, and then returns as if it had finished."""
    while True:
        try:  # noqa: SIM105 (written as users write it: the point of the test)
            time.sleep(10)
        except BaseException:
            pass
        if job.payload.get("once"):
            return


HELD: list = []
"""Connections test-lock-own-row left holding a lock (the test closes them)."""
_LOCKED: set[int] = set()


@pgdrain.job("test-lock-own-row", timeout=5)
def lock_own_row(job: pgdrain.Job) -> None:
    """Locks its own job row from another session and keeps the lock (on its first run in
    this process only): the drain's finishing write for it must then wait, as behind an
    operator's open transaction."""
    from pgdrain.db import connect

    if job.id in _LOCKED:
        return
    _LOCKED.add(job.id)
    conn = connect(os.environ["DATABASE_URL"])
    conn.run("BEGIN")
    conn.run("SELECT id FROM jobs WHERE id = :id FOR UPDATE", id=job.id)
    HELD.append(conn)


@pgdrain.job("test-quick", timeout=1)
def quick(job: pgdrain.Job) -> None:
    """Sleeps payload["seconds"] within a 1 s budget: short contexts can run several."""
    time.sleep(job.payload.get("seconds", 0))


@pgdrain.job("test-lock-then-hang", timeout=1, transactional=True)
def lock_then_hang(job: pgdrain.Job, conn) -> None:
    """Has another session lock its own job row (kept until the test closes it), then hangs in
    a statement past its 1 s limit: the drain must drop its connection, and the retry write
    that follows meets the lock."""
    from pgdrain.db import connect

    other = connect(os.environ["DATABASE_URL"])
    other.run("BEGIN")
    other.run("SELECT id FROM jobs WHERE id = :id FOR UPDATE", id=job.id)
    HELD.append(other)
    conn.run("SELECT pg_sleep(10)")
