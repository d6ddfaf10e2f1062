"""The model-based test's job types, in a registry of their own, and the record of every
handler execution (in memory: every drain of the test runs on a thread of this process, so one
monotonic clock orders all starts and ends).

A job's payload says what its handler does: ``{"do": "ok" | "fail" | "snooze" | "discard" |
"timeout" | "steps" | "wait"}``; ``wait`` waits for the signal its payload names
(``pgdrain.WaitFor``, ``WAIT_TIMEOUT``) and returns on the run after; ``steps`` saves a
checkpoint and continues (``pgdrain.Continue``) until its third run, which returns
(``work-resumable`` is the resumable type; on any other type the checkpoint is refused, a
failure). ``work-tx`` runs in the drain's transaction and writes a row of
``model_tx_writes`` first (committed with its ``done``, rolled back otherwise); ``work-rated``
carries a type rate (``TYPE_RATE``). ``work-batch`` is a batch handler (``BATCH_SIZE`` a
call): each item behaves as its payload says and is reported failed alone with what it
raised; a ``timeout`` item holds the whole call past its limit, which fails every item.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import pgdrain
from pgdrain.registry import Registry

TYPE_RATE = "4/s"
BATCH_SIZE = 3
HANDLER_TIMEOUT = 0.3
"""Every type's time limit; a ``timeout`` handler runs past it until stopped."""
TIMEOUT_BOUND = 3.0
"""A ``timeout`` handler returns by itself after this long, whatever happens."""
SNOOZE_SECONDS = 60.0
STEPS = 3
SIGNALS = ("s1", "s2")
"""The signals ``wait`` jobs wait for."""
WAIT_TIMEOUT = 100.0
"""A ``wait`` job's timeout: ``pass_time`` passes it."""
"""Runs of a ``steps`` job: each saves its step and continues, the last returns."""

TX_WRITES_DDL = """
CREATE TABLE IF NOT EXISTS model_tx_writes (
    job_id  bigint NOT NULL,
    attempt int NOT NULL
)
"""


@dataclass
class Execution:
    job_id: int
    attempt: int
    queue: str
    job_type: str
    started: float
    ended: float | None = None
    outcome: str | None = None
    signal: tuple[bool, Any] | None = None
    """What the job's last wait got, as its handler saw it: (received, payload)."""


class Recorder:
    """Every handler execution, in start order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.executions: list[Execution] = []

    def clear(self) -> None:
        with self.lock:
            self.executions = []

    def start(self, job: pgdrain.Job) -> Execution:
        execution = Execution(job.id, job.attempts, job.queue, job.job_type, time.monotonic())
        with self.lock:
            self.executions.append(execution)
        return execution

    def snapshot(self) -> list[Execution]:
        with self.lock:
            return list(self.executions)


RECORDER = Recorder()
REGISTRY = Registry()


def _behave(job: pgdrain.Job) -> None:
    what = (job.payload or {}).get("do", "ok")
    if what == "fail":
        raise RuntimeError(f"model failure on attempt {job.attempts}")
    if what == "snooze":
        raise pgdrain.Snooze(SNOOZE_SECONDS)
    if what == "discard":
        raise pgdrain.Discard("model discard")
    if what == "wait" and job.signal is None:
        raise pgdrain.WaitFor(job.payload["signal"], timeout=WAIT_TIMEOUT)
    if what == "steps":
        step = (job.state or {}).get("step", 0) + 1
        job.checkpoint({"step": step})
        if step < STEPS:
            raise pgdrain.Continue()
    if what == "timeout":
        # Short sleeps: the time limit is raised in this thread between two of them.
        until = time.monotonic() + TIMEOUT_BOUND
        while time.monotonic() < until:
            time.sleep(0.01)


def _recorded(job: pgdrain.Job, conn: Any = None) -> None:
    execution = RECORDER.start(job)
    if job.signal is not None:
        execution.signal = (job.signal.received, job.signal.payload)
    try:
        if conn is not None:
            conn.run("INSERT INTO model_tx_writes (job_id, attempt) VALUES (:id, :attempt)",
                     id=job.id, attempt=job.attempts)
        _behave(job)
    except BaseException as exc:
        execution.outcome = type(exc).__name__
        raise
    else:
        execution.outcome = "returned"
    finally:
        execution.ended = time.monotonic()


@pgdrain.job("work", timeout=HANDLER_TIMEOUT, registry=REGISTRY)
def work(job: pgdrain.Job) -> None:
    _recorded(job)


@pgdrain.job("work-tx", timeout=HANDLER_TIMEOUT, transactional=True, registry=REGISTRY)
def work_tx(job: pgdrain.Job, conn: Any) -> None:
    _recorded(job, conn)


@pgdrain.job("work-rated", timeout=HANDLER_TIMEOUT, rate=TYPE_RATE, registry=REGISTRY)
def work_rated(job: pgdrain.Job) -> None:
    _recorded(job)


@pgdrain.job("work-resumable", timeout=HANDLER_TIMEOUT, resumable=True, registry=REGISTRY)
def work_resumable(job: pgdrain.Job) -> None:
    _recorded(job)


@pgdrain.job("work-batch", timeout=HANDLER_TIMEOUT, batch_size=BATCH_SIZE, registry=REGISTRY)
def work_batch(jobs: list[pgdrain.Job]) -> pgdrain.BatchResult:
    executions = []
    for job in jobs:
        execution = RECORDER.start(job)
        if job.signal is not None:
            execution.signal = (job.signal.received, job.signal.payload)
        executions.append(execution)
    failures: dict[int, BaseException] = {}
    try:
        for job, execution in zip(jobs, executions, strict=True):
            try:
                _behave(job)
            except Exception as exc:
                failures[job.id] = exc
                execution.outcome = type(exc).__name__
            else:
                execution.outcome = "returned"
    except BaseException as exc:  # the call's time limit: every item's end
        for execution in executions:
            execution.outcome = type(exc).__name__
        raise
    finally:
        ended = time.monotonic()
        for execution in executions:
            execution.ended = ended
    return pgdrain.BatchResult(failures=failures)
