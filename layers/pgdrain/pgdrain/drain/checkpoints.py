"""Checkpoints of resumable jobs (``@pgdrain.job(..., resumable=True)``): the state a run
begins from, read as it begins (with what a job's parents and its last wait for a signal
left it), and each ``job.checkpoint(state)`` saved before the handler
goes on, guarded by the run's claim.

A handler on the drain's own thread saves through the drain's connection (the loop is
waiting for that handler), with its time limit's alarm held off until the statement has its
answer: an exception raised mid-message would leave the drain's connection unusable. A
handler on a worker thread or the event loop hands its
checkpoint to the loop and wakes it; the loop saves every checkpoint handed to it in one
statement, and the handler waits for that; the connection stays the loop's alone.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ..claimed import decode_json
from ..errors import CheckpointNotSaved
from ..models import Job, Signal
from ..registry import Handler
from ..timeouts import alarm_deferred
from .ports import DrainStore

log = logging.getLogger("pgdrain.drain")  # the library's one drain logger, as users filter it

_NOT_THIS_RUNS = ("checkpoint not saved: the job is no longer this run's (reclaimed, cancelled "
                  "or finished elsewhere), or the database refused the write")

SAVE_WAIT_SECONDS = 10.0
"""How long a worker's handler waits for its checkpoint to be saved before it is told it was
not (CheckpointNotSaved); the loop saves within a tick unless the database is slow."""


WAIT_SLICE_SECONDS = 0.05
"""A waiting handler wakes this often: the drain's time limit (HandlerTimeout, raised in its
thread) reaches it within a slice, never after the whole wait."""


def _wait(event: threading.Event, seconds: float) -> bool:
    """``event.wait(seconds)`` in slices, so that the handler's time limit interrupts it."""
    until = time.monotonic() + seconds
    while not event.wait(min(WAIT_SLICE_SECONDS, max(0.0, until - time.monotonic()))):
        if time.monotonic() >= until:
            return False
    return True


class _Handed:
    __slots__ = ("done", "job", "saved", "state", "text")

    def __init__(self, job: Job, text: str, state: Any):
        self.job, self.text, self.state = job, text, state
        self.saved = False
        self.done = threading.Event()


class Checkpoints:
    def __init__(self, store: DrainStore):
        self.store = store
        self.handed: queue.SimpleQueue[_Handed] = queue.SimpleQueue()
        self.wake: Callable[[], None] = lambda: None
        """Wakes the loop (set by the loop's ``Running``), which saves what was handed."""

    def begin(self, job: Job, handler: Handler, *, inline: bool) -> None:
        """Before a run: a job with parents (depends_on) gets their ends and results; tell
        the job whether its type is resumable; for one that is, read the state it resumes
        from and say how its checkpoints are saved."""
        if job.after_parents is not None:
            self._read_parents(job)
        if job.wait_result is not None:
            job.control.signal = _signal(job)
        job.control.resumable = handler.resumable
        if not handler.resumable:
            return
        text = self.store.job_states([job.id]).get(job.id)
        state, problem = decode_json(text)
        if problem:
            log.warning("job %s (%s): its saved state is not read (%s); it begins afresh",
                        job.id, job.job_type, problem)
        job.control.state = state
        job.control.saver = self._inline_saver(job) if inline else self._worker_saver(job)

    def _read_parents(self, job: Job) -> None:
        parents = {}
        for parent, (end, text) in self.store.job_parents([job.id]).get(job.id, {}).items():
            result, problem = decode_json(text)
            if problem:
                log.warning("job %s (%s): the result of its parent %s is not read (%s)",
                            job.id, job.job_type, parent, problem)
            parents[parent] = (end, result)
        job.control.parents = parents

    def _inline_saver(self, job: Job) -> Callable[[str, Any], None]:
        def save(text: str, state: Any) -> None:
            with alarm_deferred():
                try:
                    saved = job.id in self.store.save_checkpoints([job], [text])
                except Exception as exc:  # the handler is told; the drain's next statement
                    raise CheckpointNotSaved(f"checkpoint not saved: {exc}") from exc  # too
                if saved:
                    job.control.saved(state)
            if not saved:
                raise CheckpointNotSaved(_NOT_THIS_RUNS)
        return save

    def _worker_saver(self, job: Job) -> Callable[[str, Any], None]:
        def save(text: str, state: Any) -> None:
            handed = _Handed(job, text, state)
            self.handed.put(handed)
            self.wake()
            if not _wait(handed.done, SAVE_WAIT_SECONDS):
                raise CheckpointNotSaved(f"checkpoint not saved: the drain did not save it "
                                         f"within {SAVE_WAIT_SECONDS:g} s")
            if not handed.saved:
                raise CheckpointNotSaved(_NOT_THIS_RUNS)
        return save

    def save_handed(self) -> None:
        """Save every checkpoint handed over since the last tick, in one statement; each
        handler waiting on one learns whether it was saved."""
        if self.handed.empty():  # every tick, mostly: no exception raised to learn it
            return
        batch: dict[int, _Handed] = {}
        waiting: list[_Handed] = []
        while True:
            try:
                handed = self.handed.get_nowait()
            except queue.Empty:
                break
            waiting.append(handed)
            batch[handed.job.id] = handed  # a later checkpoint of the same job wins
        if not waiting:
            return
        saved: set[int] = set()
        try:
            saved = self.store.save_checkpoints([h.job for h in batch.values()],
                                                [h.text for h in batch.values()])
        finally:
            # Whatever happened, no handler waits on; one not saved is told so. An earlier
            # checkpoint of a job that handed a later one is saved when the later one is.
            for handed in waiting:
                handed.saved = handed.job.id in saved
                if handed.saved:
                    handed.job.control.saved(handed.state)
                handed.done.set()


def _signal(job: Job) -> Signal | None:
    """What the job's last wait for a signal got (the claim's ``wait_result``), or None with
    a warning when the stored value cannot be read (plain SQL wrote it)."""
    value, problem = decode_json(job.wait_result)
    try:
        if problem:
            raise ValueError(problem)
        return Signal(str(value["name"]), bool(value["received"]), value.get("payload"),
                      value.get("at"))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("job %s (%s): what its wait for a signal got is not read (%s)", job.id,
                    job.job_type, exc)
        return None
