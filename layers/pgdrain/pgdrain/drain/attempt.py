"""One attempt of one job: its handler called plain, ``async def`` or inside its
transaction, on the drain's own thread (under its SIGALRM limit) or on a runner's worker
thread (under the loop's watch). A transactional handler has ONE protocol wherever it runs:
``Transaction``, on a pooled connection of its own, never the drain's (which holds the
drain's slot)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import store as pgstore
from ..db import Session
from ..errors import HandlerTimeout
from ..models import Finish, Job
from ..registry import Handler
from ..runner import DURATIONS, Task
from ..timeouts import TimeLimits
from .outcomes import COMMITTED, Ended, StaleClaim, timed_out


class Transaction:
    """A transactional handler's one protocol: its writes and its job's done commit
    together, or not at all. Written by hand rather than with Session.transaction(): after a
    timeout the connection may be mid-message, and must be dropped (``broken``: the server
    then rolls back) instead of reused."""

    def __init__(self, session: Session, job: Job, done: Callable[[Job, Any], Finish]):
        self.session = session
        self.job = job
        self.done = done
        self.broken = False

    def run(self, call: Callable[[Any], Any], timeout: float) -> object:
        """``call(conn)`` (the handler) inside the transaction, then the job's done write and
        the commit; raises what the handler raised (the transaction rolled back), StaleClaim
        when the claim was lost meanwhile."""
        session = self.session
        session.rows("transaction_begin")
        try:
            # A second past the handler's own limit, so that the limit normally speaks first.
            session.rows("transaction_bounds", milliseconds=math.ceil((timeout + 1) * 1000))
            committed = self.write(call(session.conn))
            # A deferred constraint or a serialization failure surfaces here: the job's error.
            session.rows("transaction_commit")
        except HandlerTimeout:
            self.broken = True  # mid-protocol: drop it
            raise
        except BaseException:
            try:
                session.rows("transaction_rollback")
            except BaseException:
                self.broken = True
            raise
        return committed

    def write(self, value: Any) -> object:
        """The job's done write inside the transaction (a batch's: drain.batches); what
        ``run`` returns once it commits."""
        if pgstore.finish_many(self.session, [self.done(self.job, value)]).stale:
            raise StaleClaim
        return COMMITTED


@dataclass(eq=False, slots=True)
class Attempt:
    """One job handed to its handler: the drain's record of it while it runs."""

    job: Job
    handler: Handler
    timeout: float
    started: float
    """``time.monotonic()`` when it was handed over."""
    transaction: Transaction | None = None

    @property
    def session(self) -> Session | None:
        return None if self.transaction is None else self.transaction.session


def runs_inline(handler: Handler, *, slots: int, limits: TimeLimits) -> bool:
    """Whether an attempt runs on the drain's own thread: every attempt when the loop has one
    slot (nothing else could run meanwhile; SIGALRM stops even a handler that swallows
    HandlerTimeout, which a worker thread could only abandon; a KeyboardInterrupt ends the
    drain as it ends a script), and, with more slots, a quick plain handler where SIGALRM
    can stop it: a worker thread would cost more than the job."""
    if slots == 1:
        return True
    return (not handler.transactional and not handler.is_async and limits.active
            and DURATIONS.quick(handler.job_type))


def run_inline(attempt: Attempt, limits: TimeLimits) -> Ended:
    """The attempt on the drain's thread, to its end. Only the job's own failures end here
    (an Exception, or HandlerTimeout); a KeyboardInterrupt or SystemExit ends the drain."""
    job, handler, timeout = attempt.job, attempt.handler, attempt.timeout

    def call(*args: Any) -> Any:
        return _call_limited(limits, handler, timeout, *args)

    transaction = attempt.transaction
    value: Any = None
    error: BaseException | None = None
    try:
        if transaction is not None:
            value = transaction.run(lambda conn: call(job, conn), timeout)
        else:
            value = call(job)
    # HandlerTimeout is a BaseException: unnamed, it would end the invocation instead.
    except (Exception, HandlerTimeout) as exc:
        error = exc
    duration = time.monotonic() - attempt.started
    if not handler.is_async and transaction is None:
        DURATIONS.record(handler.job_type, duration)
    return Ended(job, handler, attempt.started, duration, result=value, error=error)


def _call_limited(limits: TimeLimits, handler: Handler, timeout: float, *args: Any) -> Any:
    """The handler, under its time limit; HandlerTimeout too if it swallowed one."""
    try:
        with limits.limit(timeout) as limit:
            value = _run_async(handler, timeout, *args) if handler.is_async else \
                handler.func(*args)
    finally:
        limits.disarm()
    if limit.fired:  # it caught HandlerTimeout and returned: it still overran
        raise timed_out(timeout)
    return value


def _run_async(handler: Handler, timeout: float, *args: Any) -> Any:
    """An ``async def`` handler on the drain's own thread: awaited on an event loop of its
    own, cancelled at its time limit."""
    import asyncio

    async def limited() -> Any:
        try:
            return await asyncio.wait_for(handler.func(*args), timeout)
        except TimeoutError:
            raise timed_out(timeout) from None

    return asyncio.run(limited())


def worker_call(attempt: Attempt) -> Callable[[Task], Any]:
    """What a worker thread runs for the attempt (an ``async def`` handler is awaited by the
    runner's event loop instead)."""
    transaction = attempt.transaction
    if transaction is None:
        return _call_plain
    return lambda task: transaction.run(lambda conn: task.handler.func(task.job, conn),
                                        task.timeout)


def _call_plain(task: Task) -> Any:
    return task.handler.func(task.job)


def ended_on_worker(attempt: Attempt, task: Task) -> Ended:
    """How a worker's attempt ended, from its task."""
    duration = (task.ended or 0.0) - (task.begun or task.started)
    handler = attempt.handler
    if not handler.is_async and not handler.transactional and task.begun is not None:
        DURATIONS.record(handler.job_type, (task.ended or task.begun) - task.begun)
    return Ended(attempt.job, handler, task.started, duration, task.result, task.error,
                 timed_out=task.timeout if task.fired_at is not None else None)
