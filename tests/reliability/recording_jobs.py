"""Job types for the reliability suite (PGDRAIN_JOBS=tests.reliability.recording_jobs).

Every execution is recorded in ``executions`` on a connection of its own (autocommit): a row
when it starts (job id, attempt, pid, start) and its end and outcome when it returns or raises.
A process killed mid-job leaves ``ended_at`` NULL. The record shows what ran, when and where,
whatever the drain then manages to write. Create the table with ``EXECUTIONS_DDL`` first.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from contextlib import contextmanager, suppress

import pgdrain
from pgdrain.db import connect

EXECUTIONS_DDL = """
CREATE TABLE IF NOT EXISTS executions (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     bigint NOT NULL,
    attempt    int NOT NULL,
    pid        int NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at   timestamptz,
    outcome    text
)
"""

# One connection per thread: handlers run on the drain's worker threads at once, and a pg8000
# connection serves one thread at a time.
_local = threading.local()


def _db():
    conn = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = connect(os.environ["DATABASE_URL"])
    return conn


@contextmanager
def _unbroken():
    """A record's statement that did not finish (the drain's time limit, SIGALRM, stopped the
    handler inside it) leaves this connection mid-reply: every later record of the process
    read the wrong answer (TypeError: 'NoneType' object is not subscriptable) and failed jobs
    that had not run. Such a connection is dropped, and the next record opens another. The
    interrupted record itself is as the limit left it, as for any handler: a start not
    written, or an end not written (the drain's HandlerTimeout entry says where it stopped)."""
    try:
        yield
    except BaseException:
        conn = getattr(_local, "conn", None)
        _local.conn = None
        if conn is not None:
            with suppress(Exception):
                conn._usock.close()
        raise


def _started(job: pgdrain.Job) -> int:
    """The execution's start, dated when the handler began: opening this thread's connection
    (after one was dropped) can take a tenth of a second on a loaded machine, which its time
    limit counts; a start dated after it made a handler stopped at its limit look as if it
    had run a tenth of a second less."""
    began = time.monotonic()
    with _unbroken():
        conn = _db()
        return conn.run("INSERT INTO executions (job_id, attempt, pid, started_at) "
                        "VALUES (:id, :attempt, :pid, "
                        "clock_timestamp() - make_interval(secs => :behind)) RETURNING id",
                        id=job.id, attempt=job.attempts, pid=os.getpid(),
                        behind=time.monotonic() - began)[0][0]


def _ended(execution: int, outcome: str) -> None:
    with _unbroken():
        _db().run("UPDATE executions SET ended_at = clock_timestamp(), outcome = :outcome "
                  "WHERE id = :id", id=execution, outcome=outcome)


@pgdrain.job("record", timeout=10)
def record(job: pgdrain.Job) -> None:
    """Sleeps ``payload["seconds"]`` (default 0); raises with probability ``payload["fail"]``;
    kills its own process (SIGKILL) mid-job on the attempts in ``payload["kill_on"]``."""
    execution = _started(job)
    if job.attempts in job.payload.get("kill_on", []):
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(job.payload.get("seconds", 0))
    if random.random() < job.payload.get("fail", 0):
        _ended(execution, "raised")
        raise RuntimeError(f"injected failure on attempt {job.attempts}")
    _ended(execution, "returned")
