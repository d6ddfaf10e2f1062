"""Handlers off the drain's thread: worker threads for plain functions, one event loop for
``async def`` handlers, each call under a time limit enforced from outside.

The drain's own thread keeps the database connection (claims and finishing writes) and hands
each job to ``Runner.start`` as a ``Task``. A finished task comes back on the drain's outbox.

A thread cannot be stopped from outside, so an overrun is handled in steps: when a task's
limit runs out the drain calls ``interrupt``, which raises ``HandlerTimeout`` in the handler's
thread at its next Python instruction (``PyThreadState_SetAsyncExc``: a sleep or a blocking
socket read is left first, when it returns) and, for a transactional handler, closes its
database connection so that a blocked statement ends and the server rolls its transaction
back. An ``async def`` handler is cancelled by ``asyncio.timeout``. A handler that ignores all
of that is a runaway: its thread stays busy, the pool starts another in its place, and the
drain records the job as timed out and never writes what the runaway does later.

The threads are daemons and outlive an invocation: in Lambda a warm container keeps them
(idle, blocked on the inbox) for the next one. A runaway still running when ``lambda_handler``
returns is frozen with the container and thaws, still running, in its next invocation.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import HandlerTimeout
from .models import Job
from .registry import Handler

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Task:
    """One job handed to a handler: what ran, and how it ended."""

    job: Job
    handler: Handler
    timeout: float
    """The job's time limit, counted from when its handler began."""
    started: float
    """``time.monotonic()`` when it was handed over."""
    call: Callable[[Task], Any]
    """What the worker runs (the handler, or its transaction around it)."""
    outbox: queue.SimpleQueue[Task | None]
    """Where it goes back when it finished; None there wakes the drain's loop for something
    else (a checkpoint handed to it)."""
    must_end: float | None = None
    """The latest ``time.monotonic()`` its handler may run to (the invocation's time for
    handlers); None: ``started + timeout``."""
    error: BaseException | None = None
    result: Any = None
    begun: float | None = None
    """When its thread (or the event loop) began the call: None while it waits for one. A
    busy event loop (a handler that blocks it) can hold a task there: its limit has not
    started, and if the drain gives it up first (``revoke``) it never runs."""
    revoked: bool = False
    """Given up before it began: it never runs (its job was handed back, uncharged)."""
    start_by: float | None = None
    """For a job claimed under a rate limit: the ``time.monotonic()`` after which it may no
    longer begin (its start would not count in its claim's window: see flow.start_slack)."""
    late: bool = False
    """It did not begin by ``start_by``, and so never ran: back on the outbox, to be handed
    back uncharged."""
    ended: float | None = None
    fired_at: float | None = None
    """When its time limit ran out (it may have ended since)."""
    conn: Any = None
    """A transactional handler's connection while it runs: closed to stop it."""
    thread_id: int | None = None
    async_task: asyncio.Task[Any] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def limit_at(self) -> float:
        """When its time limit runs out: ``timeout`` after it began (never past
        ``must_end``); one that has not begun may wait until ``must_end``."""
        end = self.started + self.timeout if self.must_end is None else self.must_end
        return end if self.begun is None else min(self.begun + self.timeout, end)

    @property
    def finished(self) -> bool:
        return self.ended is not None

    def begin(self) -> bool:
        """Mark its call begun, unless it was revoked first or is too late to begin (then it
        must not run; a late one goes back on the outbox)."""
        with self.lock:
            if self.revoked:
                return False
            now = time.monotonic()
            if self.start_by is not None and now > self.start_by:
                self.revoked = self.late = True
                return False
            self.begun = now
            return True


class Runner:
    """A pool of worker threads (grown on demand, so a runaway never costs a slot) and one
    event loop thread. One per process: a warm Lambda container reuses it."""

    def __init__(self) -> None:
        self._inbox: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        self._idle = 0
        self._threads = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, task: Task) -> None:
        if _is_async(task.handler):
            self._event_loop().call_soon_threadsafe(self._start_async, task)
            return
        with self._lock:  # never held while a thread starts: finishing workers need it
            spawn = not self._idle
            if spawn:
                self._threads += 1
                name = f"pgdrain-worker-{self._threads}"
            else:
                self._idle -= 1
        self._inbox.put(task)
        if spawn:
            threading.Thread(target=self._work, name=name, daemon=True).start()

    def revoke(self, task: Task) -> bool:
        """Give up ``task`` if its call has not begun: True if it never will (its worker or
        the event loop skips it), False if it is running or ran."""
        with task.lock:
            if task.begun is not None or task.finished:
                return False
            task.revoked = True
            return True

    def interrupt(self, task: Task) -> None:
        """Stop ``task``'s handler if it is still running (see the module docstring)."""
        with task.lock:
            if task.finished:
                return
            if task.async_task is not None and self._loop is not None:
                self._loop.call_soon_threadsafe(task.async_task.cancel)
            elif task.thread_id is not None:
                _raise_in_thread(task.thread_id, HandlerTimeout)
            conn = task.conn
        if conn is not None:
            _close_socket(conn)

    @property
    def threads(self) -> int:
        return self._threads

    def _work(self) -> None:
        ident = threading.get_ident()
        while True:
            task = None
            try:
                task = self._inbox.get()
                if task is None:
                    return
                task.thread_id = ident
                if not task.begin():
                    if task.late:
                        task.outbox.put(task)
                    continue  # given up before it began: the drain hands its job back
                try:
                    task.result = task.call(task)
                except BaseException as exc:  # the job's failure, whatever it is
                    task.error = exc
                self._finish(task, ident)
            except BaseException:  # an interrupt that arrived between two tasks
                if task is not None and not task.finished:
                    task.error = task.error or HandlerTimeout("interrupted")
                    self._finish(task, ident)
                continue
            finally:
                with self._lock:
                    self._idle += 1

    @staticmethod
    def _finish(task: Task, ident: int) -> None:
        with task.lock:  # from here on no interrupt can be aimed at this thread
            task.ended = time.monotonic()
            _raise_in_thread(ident, None)  # clear one that arrived just as it returned
        task.outbox.put(task)

    # --- async def handlers: one loop in its own thread ---

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        import asyncio  # only drains that meet an async def handler pay for it

        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="pgdrain-asyncio",
                                 daemon=True).start()
                self._loop = loop
            return self._loop

    def _start_async(self, task: Task) -> None:
        import asyncio

        task.async_task = asyncio.ensure_future(self._run_async(task))

    @staticmethod
    async def _run_async(task: Task) -> None:
        import asyncio

        if not task.begin():
            if task.late:
                task.outbox.put(task)
            return  # given up while the loop was busy: the drain hands its job back
        try:
            async with asyncio.timeout(task.timeout):
                task.result = await task.handler.func(task.job)
        except TimeoutError as exc:
            task.error = HandlerTimeout(f"timed out after {task.timeout:g} s")
            task.error.__cause__ = exc
        except asyncio.CancelledError:
            task.error = HandlerTimeout(f"timed out after {task.timeout:g} s")
        except BaseException as exc:
            task.error = exc
        with task.lock:
            task.ended = time.monotonic()
        task.outbox.put(task)


_RUNNER: Runner | None = None
_RUNNER_LOCK = threading.Lock()


def runner() -> Runner:
    """The process's runner, created on first use."""
    global _RUNNER
    with _RUNNER_LOCK:
        if _RUNNER is None:
            _RUNNER = Runner()
        return _RUNNER


def _is_async(handler: Handler) -> bool:
    return handler.is_async


def _raise_in_thread(ident: int, exc_type: type[BaseException] | None) -> None:
    """Raise ``exc_type`` in thread ``ident`` at its next instruction (None: cancel one that
    is pending)."""
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(ident), ctypes.py_object(exc_type) if exc_type is not None else None)


def _close_socket(conn: Any) -> None:
    """End a pg8000 connection's socket from another thread: a read blocked on it returns."""
    sock = getattr(conn, "_usock", None)
    if sock is None:
        return
    try:
        import socket

        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        log.debug("shutting a handler's connection down failed", exc_info=True)


# A plain handler whose runs have taken less than this (on average, and the last one less
# than QUICK_LAST_SECONDS) runs on the drain's own thread: handing it to a worker thread
# would cost more than the job (no-op jobs ran at less than half the speed).
QUICK_MEAN_SECONDS = 0.002
QUICK_LAST_SECONDS = 0.01


class Durations:
    """How long each job type's handler takes, per process (a warm container keeps it)."""

    def __init__(self) -> None:
        self._mean: dict[str, float] = {}
        self._last: dict[str, float] = {}

    def record(self, job_type: str, seconds: float) -> None:
        mean = self._mean.get(job_type)
        self._mean[job_type] = seconds if mean is None else 0.8 * mean + 0.2 * seconds
        self._last[job_type] = seconds

    def quick(self, job_type: str) -> bool:
        """Whether the type's handler is known to be quick (unknown types are not)."""
        mean = self._mean.get(job_type)
        return (mean is not None and mean < QUICK_MEAN_SECONDS
                and self._last[job_type] < QUICK_LAST_SECONDS)


DURATIONS = Durations()
