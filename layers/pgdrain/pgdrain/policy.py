"""Retry decisions as pure functions: no I/O, no clock, randomness passed in.

The database applies the delay to its own ``now()``; these functions only say how long and
whether to retry at all.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class Retry:
    """Run the job again after ``delay_seconds``."""

    delay_seconds: float


@dataclass(frozen=True, slots=True)
class Fail:
    """Dead-letter the job: it is out of attempts, or asked not to be retried."""


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


def after_lost_lease(
    attempts: int,
    max_attempts: int,
    backoff: Backoff,
    *,
    started: bool,
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
    return after_failure(attempts, max_attempts, backoff, rand=rand)
