"""Retry decisions as pure functions: no I/O, no clock, randomness passed in.

``decide`` turns how a handler's attempt ended (the exception it raised) into what happens to
the job: retry after a delay, wait (a snooze, the attempt given back), or fail. A job type may
bring its own rules (``TypePolicy``: ``@pgdrain.job(backoff=..., retry_on=...)``). The database
applies a delay to its own ``now()``; these functions only say how long and whether at all.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from .errors import Discard, HandlerTimeout, Snooze, WaitFor
from .models import MAX_DELAY_SECONDS

DEFAULT_BASE_SECONDS = 2.0
DEFAULT_CAP_SECONDS = 3600.0
DEFAULT_JITTER = 0.1


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff: ``base * 2**(attempt-1)``, spread by ±``jitter``, at most ``cap``.

    With the defaults the delays after attempts 1, 2, 3 are about 2, 4 and 8 seconds, the
    seed article's ``power(2, attempts)``. Jitter keeps jobs that failed together (an outage)
    from retrying in lockstep.
    """

    base_seconds: float = DEFAULT_BASE_SECONDS
    cap_seconds: float = DEFAULT_CAP_SECONDS
    jitter: float = DEFAULT_JITTER

    def __post_init__(self) -> None:
        if self.base_seconds < 0 or self.cap_seconds < 0:
            raise ValueError("backoff base and cap must not be negative")
        if not 0 <= self.jitter <= 1:
            raise ValueError("backoff jitter must be between 0 and 1")

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1 for the first)."""
        exponent = max(attempt, 1) - 1
        # 2**exponent overflows float for absurd attempt counts; the cap applies long before.
        raw = self.cap_seconds if exponent >= 64 else self.base_seconds * 2.0**exponent
        spread = 1.0 + self.jitter * (2.0 * rand() - 1.0)
        return min(self.cap_seconds, max(0.0, raw * spread))


BackoffFunction = Callable[[int, BaseException | None], float]
"""A job type's own backoff: ``(failed attempt number, its error or None) -> seconds``. The
error is None when the attempt's lease expired (the drain died). Oban's "contextual backoff":
a 429 may wait longer than a timeout."""


@dataclass(frozen=True, slots=True)
class TypePolicy:
    """A job type's retry rules, beside its handler.

    ``backoff``: a ``Backoff`` or a ``BackoffFunction``; None uses the drain's
    (``PGDRAIN_BACKOFF_*``). ``retry_on``: the exception types worth a retry; any other fails
    the job at once (a time limit is always retried). None retries every exception.
    """

    backoff: Backoff | BackoffFunction | None = None
    retry_on: tuple[type[BaseException], ...] | None = None

    def delay(self, attempt: int, error: BaseException | None, default: Backoff,
              rand: Callable[[], float] = random.random) -> float:
        """Seconds before the retry of failed attempt ``attempt``."""
        if self.backoff is None:
            return default.delay(attempt, rand)
        if isinstance(self.backoff, Backoff):
            return self.backoff.delay(attempt, rand)
        try:
            seconds = float(self.backoff(attempt, error))
        except Exception:  # the type's own function failed: the drain's backoff will do
            return default.delay(attempt, rand)
        if not math.isfinite(seconds):
            return default.delay(attempt, rand)
        return min(max(seconds, 0.0), MAX_DELAY_SECONDS)

    def retries(self, error: BaseException) -> bool:
        """Whether ``error`` is worth another attempt under ``retry_on``."""
        if self.retry_on is None or isinstance(error, HandlerTimeout):
            return True
        return isinstance(error, self.retry_on)


DEFAULT_POLICY = TypePolicy()


@dataclass(frozen=True, slots=True)
class Retry:
    """Run the job again after ``delay_seconds``."""

    delay_seconds: float


@dataclass(frozen=True, slots=True)
class Fail:
    """Dead-letter the job: it is out of attempts, or its failure is not worth a retry."""


@dataclass(frozen=True, slots=True)
class Wait:
    """The handler snoozed: run again after ``delay_seconds``, the attempt given back; or,
    with ``signal``, it waits for that signal for at most ``delay_seconds``."""

    delay_seconds: float
    signal: str | None = None


@dataclass(frozen=True, slots=True)
class Refund:
    """Pending again at once with the claim's attempt given back: nothing shows that the job
    ever started, so it is not charged."""


Decision = Retry | Fail


def after_failure(
    attempts: int,
    max_attempts: int,
    backoff: Backoff,
    *,
    retryable: bool = True,
    rand: Callable[[], float] = random.random,
) -> Decision:
    """Decide what happens to a job whose attempt number ``attempts`` failed.

    ``attempts`` counts the failed attempt itself (the claim spent it). A job that has used
    ``max_attempts`` attempts, or whose failure is not retryable, fails.
    """
    if not retryable or attempts >= max_attempts:
        return Fail()
    return Retry(backoff.delay(attempts, rand))


def decide(
    error: BaseException,
    attempts: int,
    max_attempts: int,
    *,
    policy: TypePolicy = DEFAULT_POLICY,
    default: Backoff,
    rand: Callable[[], float] = random.random,
) -> Retry | Fail | Wait:
    """What happens to a job whose attempt number ``attempts`` ended with ``error``.

    ``Snooze`` and ``WaitFor`` wait (the attempt is not spent); ``Discard``, an error
    ``retry_on`` does not name, and the last of ``max_attempts`` fail; anything else is
    retried after the type's backoff (or ``default``).
    """
    if isinstance(error, WaitFor):
        return Wait(error.timeout, error.name)
    if isinstance(error, Snooze):
        return Wait(error.delay_seconds)
    if isinstance(error, Discard) or not policy.retries(error) or attempts >= max_attempts:
        return Fail()
    return Retry(policy.delay(attempts, error, default, rand))


def after_lost_lease(
    attempts: int,
    max_attempts: int,
    backoff: Backoff,
    *,
    started: bool,
    policy: TypePolicy = DEFAULT_POLICY,
    rand: Callable[[], float] = random.random,
) -> Retry | Fail | Refund:
    """Decide what happens to a job whose lease expired: its drain died holding it.

    A drain runs its claimed batch one job after another, so when it dies only one of them
    was running, and unless its start was recorded (``started``), nothing says which. Such a
    job is refunded, never charged: a job that never started is never charged an attempt and
    never dead-lettered for a lease that expired. The refund is counted on the job
    (``lost_claims``), and from then on the job is claimed alone with its start recorded by
    the claim; a lease that expires after that is that attempt's failure, so a job that kills
    its worker every time, even while its claim is decoded, still ends ``failed`` after
    ``max_attempts``, with at most one uncharged run more.
    """
    if not started:
        return Refund()
    if attempts >= max_attempts:
        return Fail()
    return Retry(policy.delay(attempts, None, backoff, rand))
