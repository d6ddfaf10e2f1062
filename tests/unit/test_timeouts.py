"""Time limits: HandlerTimeout stops a handler that overruns, and keeps stopping one that
catches it (SIGALRM: run in the main thread, where pytest runs tests)."""

from __future__ import annotations

import sys
import time

import pytest

from pgdrain.errors import HandlerTimeout
from pgdrain.timeouts import GRACE_SECONDS, TimeLimits, alarm_deferred, can_interrupt

pytestmark = pytest.mark.skipif(not can_interrupt(), reason="needs SIGALRM in the main thread")


def _run(handler, seconds=0.2, **limits_options):
    """Run ``handler`` under a limit; (how it ended, whether the limit fired, seconds)."""
    with TimeLimits(**limits_options) as limits:
        started = time.monotonic()
        try:
            try:
                with limits.limit(seconds) as limit:
                    result = handler()
            finally:
                limits.disarm()
            ended = f"returned {result!r}"
        except HandlerTimeout:
            ended = "HandlerTimeout"
        return ended, limit.fired, time.monotonic() - started


def test_a_handler_within_its_limit_is_untouched():
    assert _run(lambda: "ok", 1)[:2] == ("returned 'ok'", False)


def test_an_overrun_is_stopped_inside_a_blocking_call():
    ended, fired, seconds = _run(lambda: time.sleep(5))
    assert (ended, fired) == ("HandlerTimeout", True)
    assert seconds < 1


def test_an_alarm_during_a_deferred_block_is_raised_as_the_block_ends():
    # The drain's own I/O inside a handler (a checkpoint): the limit runs out meanwhile, the
    # block finishes (its write recorded), and HandlerTimeout comes right after it.
    steps = []

    def handler():
        with alarm_deferred():
            time.sleep(0.4)  # a statement waiting for its answer, past the 0.2 s limit
            steps.append("answered")
        steps.append("went on")  # never: the limit stops it first

    ended, fired, seconds = _run(handler)
    assert (ended, fired, steps) == ("HandlerTimeout", True, ["answered"])
    assert seconds < 1


def test_a_deferred_block_within_the_limit_changes_nothing():
    def handler():
        with alarm_deferred():
            pass
        return "ok"

    assert _run(handler, 1)[:2] == ("returned 'ok'", False)
    assert _run(lambda: time.sleep(5))[0] == "HandlerTimeout"  # nothing left held off


def test_finally_blocks_get_a_grace_to_run():
    cleaned = []

    def handler():
        try:
            time.sleep(5)
        finally:
            time.sleep(GRACE_SECONDS / 2)
            cleaned.append(True)

    assert _run(handler)[0] == "HandlerTimeout"
    assert cleaned == [True]


def test_a_handler_that_swallows_it_once_and_returns_is_seen_to_have_overrun():
    def handler():
        try:
            time.sleep(5)
        except BaseException:
            return "done, it says"

    assert _run(handler)[:2] == ("returned 'done, it says'", True)


@pytest.mark.parametrize("body", ["sleep", "busy"])
def test_a_handler_that_swallows_it_in_a_loop_is_stopped(body):
    def handler():
        while True:
            try:
                if body == "sleep":
                    time.sleep(1)
                else:
                    sum(range(10**5))
            except BaseException:
                pass

    ended, fired, seconds = _run(handler)
    assert (ended, fired) == ("HandlerTimeout", True)
    assert seconds < 0.2 + GRACE_SECONDS + 0.5
    assert sys.gettrace() is None


def test_one_it_cannot_stop_is_reported_once_as_stuck():
    # Swallowing at two levels defeats the trace function (Python removes one that raises);
    # this handler gives up by itself after 1.5 s.
    stuck = []

    def handler():
        until = time.monotonic() + 1.5
        while time.monotonic() < until:
            try:
                try:  # noqa: SIM105 (written as users write it: the point of the test)
                    time.sleep(0.05)
                except BaseException:
                    pass
            except BaseException:
                pass
        return "gave up"

    ended, fired, _ = _run(handler, on_stuck=stuck.append, stuck_after=0.5)
    assert fired and ended in ("returned 'gave up'", "HandlerTimeout")
    assert len(stuck) == 1 and stuck[0] >= 0.5


def _limited(limits, seconds, handler):
    """One handler call under ``limits`` as a drain makes it: how it ended."""
    try:
        try:
            with limits.limit(seconds):
                handler()
        finally:
            limits.disarm()
        return "returned"
    except HandlerTimeout:
        return "HandlerTimeout"


def test_jobs_in_a_row_each_get_their_own_limit():
    # A later job is stopped at its own limit, not at the first job's, and a job that ends
    # before its limit leaves nothing set after the drain.
    import signal
    with TimeLimits() as limits:
        assert _limited(limits, 0.3, lambda: None) == "returned"
        time.sleep(0.2)
        started = time.monotonic()
        assert _limited(limits, 0.3, lambda: time.sleep(5)) == "HandlerTimeout"
        assert 0.25 <= time.monotonic() - started < 1
        assert _limited(limits, 5, lambda: time.sleep(0.4)) == "returned"  # the early alarm
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # nothing left after the drain


def test_a_handler_that_resets_the_timer_does_not_lift_the_next_jobs_limit():
    import signal
    with TimeLimits() as limits:
        assert _limited(limits, 0.2, lambda: signal.setitimer(signal.ITIMER_REAL, 0)) == \
            "returned"
        time.sleep(0.25)  # past when its alarm was due
        started = time.monotonic()
        assert _limited(limits, 0.2, lambda: time.sleep(5)) == "HandlerTimeout"
        assert time.monotonic() - started < 1
