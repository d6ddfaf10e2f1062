"""Backoff and the retry-or-fail decision, as tables."""

from __future__ import annotations

import pytest

from pgdrain.policy import Backoff, Fail, Refund, Retry, after_failure, after_lost_lease

NO_JITTER = Backoff(base_seconds=2, cap_seconds=3600, jitter=0)


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, 2), (2, 4), (3, 8), (4, 16), (10, 1024), (11, 2048), (12, 3600), (100, 3600),
     (10**6, 3600), (0, 2), (-3, 2)],
)
def test_delay_doubles_per_attempt_and_is_capped(attempt, expected):
    assert NO_JITTER.delay(attempt) == expected


@pytest.mark.parametrize(
    ("rand", "expected"),
    [(0.0, 7.2), (0.5, 8.0), (1.0, 8.8)],
)
def test_jitter_spreads_the_delay_by_the_fraction_either_way(rand, expected):
    backoff = Backoff(base_seconds=2, cap_seconds=3600, jitter=0.1)
    assert backoff.delay(3, rand=lambda: rand) == pytest.approx(expected)


def test_jitter_never_exceeds_the_cap():
    backoff = Backoff(base_seconds=2, cap_seconds=10, jitter=0.5)
    assert backoff.delay(30, rand=lambda: 1.0) == 10


@pytest.mark.parametrize(
    ("base", "cap", "jitter"),
    [(-1, 10, 0.1), (1, -10, 0.1), (1, 10, -0.1), (1, 10, 1.5)],
)
def test_invalid_backoff_is_rejected(base, cap, jitter):
    with pytest.raises(ValueError):
        Backoff(base_seconds=base, cap_seconds=cap, jitter=jitter)


@pytest.mark.parametrize(
    ("attempts", "max_attempts", "retryable", "expected"),
    [
        (1, 3, True, Retry(2)),
        (2, 3, True, Retry(4)),
        (3, 3, True, Fail()),
        (4, 3, True, Fail()),  # a requeue by plain SQL can push attempts past the maximum
        (1, 1, True, Fail()),
        (1, 3, False, Fail()),
        (2, 10, False, Fail()),
    ],
)
def test_after_failure(attempts, max_attempts, retryable, expected):
    assert after_failure(attempts, max_attempts, NO_JITTER, retryable=retryable) == expected


@pytest.mark.parametrize(
    ("attempts", "max_attempts", "started", "expected"),
    [(1, 3, False, Refund()), (3, 3, False, Refund()),  # never charged without a start record
     (1, 3, True, Retry(2)), (2, 3, True, Retry(4)), (3, 3, True, Fail()), (5, 3, True, Fail())],
)
def test_a_lost_lease_is_refunded_unless_its_start_was_recorded(attempts, max_attempts, started,
                                                                expected):
    assert after_lost_lease(attempts, max_attempts, NO_JITTER, started=started) == expected
