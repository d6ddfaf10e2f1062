"""Outcome mapping: how an attempt ended (a value, an error, a timeout, a committed
transaction, a lost claim) becomes a finishing write (``Finish``, through ``policy``) or a
count, the same for an attempt on the drain's thread and on a worker's."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..errors import HandlerTimeout
from ..models import Finish, Job
from ..policy import Backoff, Fail, Retry, Wait, decide
from ..registry import Handler
from ..results import encode_result
from .summary import Count

log = logging.getLogger("pgdrain.drain")  # the library's one drain logger, as users filter it


class StaleClaim(Exception):
    """A transactional job's done write found its claim lost: roll its writes back."""


COMMITTED = object()
"""What a transaction's run returns: the handler's writes and its job's done (and result)
committed."""


@dataclass(slots=True)
class Ended:
    """How one attempt ended."""

    job: Job
    handler: Handler
    started: float
    """``time.monotonic()`` when the attempt was handed over (the completer's window)."""
    duration: float
    result: Any = None
    error: BaseException | None = None
    timed_out: float | None = None
    """Its limit (seconds) when it ran out: recorded as timed out, whatever it returned."""


@dataclass(frozen=True, slots=True)
class Settled:
    """What to do with an ended attempt: write ``finish``, or only count ``count`` (its
    transaction wrote its outcome already, or its claim was lost)."""

    finish: Finish | None = None
    count: Count | None = None
    error: BaseException | None = None
    """The error to report with it (to the observer)."""


def timed_out(seconds: float) -> HandlerTimeout:
    return HandlerTimeout(f"timed out after {seconds:g} s")


def done(job: Job, value: Any, result_max_bytes: int, *, keep_done: bool = True) -> Finish:
    """A handler returned ``value``: the job is done, with it as its result when it can be
    stored (else with the reason in last_error: the work was done all the same). Without
    ``keep_done`` (done rows are not kept) a job with nothing to keep leaves no row."""
    if value is None:
        return Finish.done(job, forget=not keep_done)
    result, problem = encode_result(value, result_max_bytes)
    if problem:
        log.warning("job %s (%s): %s", job.id, job.job_type, problem)
    return Finish.done(job, result, problem)


def failed(job: Job, handler: Handler, error: BaseException, backoff: Backoff) -> Finish:
    """A failed attempt: what ``policy.decide`` makes of it."""
    decision = decide(error, job.attempts, job.max_attempts, policy=handler.policy,
                      default=backoff)
    if isinstance(decision, Wait):
        return (Finish.snooze(job, decision.delay_seconds) if decision.signal is None else
                Finish.wait(job, decision.signal, decision.delay_seconds))
    message = f"{type(error).__name__}: {error}"
    if isinstance(error, HandlerTimeout):
        message = f"HandlerTimeout: {job.job_type} {error}"
    assert isinstance(decision, Fail | Retry)
    return (Finish.fail(job, message) if isinstance(decision, Fail) else
            Finish.retry(job, message, decision.delay_seconds))


def settle(ended: Ended, *, result_max_bytes: int, backoff: Backoff,
           keep_done: bool = True) -> Settled:
    """The one mapping of an attempt's end (``keep_done``: as ``done``)."""
    job, handler, error = ended.job, ended.handler, ended.error
    if ended.result is COMMITTED:
        return Settled(count=Count.DONE)  # its transaction wrote done with its work
    overran = ended.timed_out is not None or isinstance(error, HandlerTimeout)
    if overran and handler.resumable and job.control.checkpoints_saved:
        # It got somewhere and saved it: it continues from there, no attempt spent. (One that
        # saved nothing in this run spends the attempt, as any overrun: no loop for ever
        # without progress.)
        return Settled(Finish.snooze(job, 0))
    if ended.timed_out is not None:
        error = timed_out(ended.timed_out)
        return Settled(failed(job, handler, error, backoff), error=error)
    if error is None:
        return Settled(done(job, ended.result, result_max_bytes, keep_done=keep_done))
    if isinstance(error, StaleClaim):
        return Settled(count=Count.STALE)
    # SystemExit or KeyboardInterrupt raised by a handler on a worker thread is that job's
    # failure: it cannot stop the drain from there.
    return Settled(failed(job, handler, error, backoff), error=error)
