"""Admission: whether a claimed job may start now, whatever the number of slots. One
implementation of the refusals (an undecodable payload, no handler: failed at once, since a
retry would not change them) and of the checks that hold a job back or hand it back."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from ..errors import Discard
from ..models import Job
from ..registry import Handler, Registry
from .budget import Budget


class Verdict(enum.Enum):
    START = "start"
    REFUSE = "refuse"
    """It can never run: fail it at once (``Admission.error`` says why)."""
    WAIT = "wait"
    """Not now: its type runs at its concurrency limit."""
    RELEASE = "release"
    """Claimed under a rate limit too long ago: hand it back unstarted."""
    TOO_LATE = "too_late"
    """Its budget does not fit in the time left: hand back what is claimed and stop."""


@dataclass(frozen=True, slots=True)
class Admission:
    verdict: Verdict
    handler: Handler | None = None
    timeout: float = 0.0
    """With START: its time limit (its budget, or the time left when it runs cut short)."""
    cut_short: bool = False
    """With START: it runs with less than its budget (see ``Budget.cut_short``)."""
    error: Exception | None = None


def refusal(job: Job, handler: Handler | None) -> Exception | None:
    """Why ``job`` can never run (None: it can)."""
    if job.payload_error is not None:
        return ValueError(f"undecodable payload: {job.payload_error}")
    if handler is None:
        return LookupError(f"no handler registered for job_type '{job.job_type}'")
    return None


def admit(job: Job, registry: Registry, *, default_timeout: float, budget: Budget,
          left: float, started: int, of_type: int, late: bool) -> Admission:
    """What to do with ``job`` now: ``left`` is the time after the margin, ``started`` the
    jobs started so far, ``of_type`` those of its type running, ``late`` whether its rate
    window has passed (``budget.late``)."""
    handler = registry.get(job.job_type)
    error = refusal(job, handler)
    if error is not None or handler is None:
        return Admission(Verdict.REFUSE, error=error)
    if handler.concurrency and of_type >= handler.concurrency:
        return Admission(Verdict.WAIT, handler)
    if late:
        return Admission(Verdict.RELEASE, handler)
    limit = handler.timeout or default_timeout
    cut_short = left < limit
    if cut_short and not budget.cut_short(limit, left, started):
        return Admission(Verdict.TOO_LATE, handler)
    return Admission(Verdict.START, handler, min(limit, left), cut_short)


def with_parsed_payload(job: Job, handler: Handler) -> Job:
    """The job with its payload parsed into the handler's model.

    The enqueue paths validate payloads, but plain SQL can insert anything: a payload that no
    longer fits the model cannot succeed on a retry, so it is discarded with the reason.
    """
    if handler.payload_model is None:
        return job
    from ..payload import PayloadError, parse  # only drains that meet a payload model pay

    try:
        return replace(job, payload=parse(handler.payload_model, job.payload))
    except PayloadError as exc:
        raise Discard(f"invalid payload: {exc}") from None
