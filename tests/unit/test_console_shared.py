"""The console's shared overview (connections.Shared): one read per interval whatever the
number of requests, none of which waits once there is a value, and a failed read that neither
hides the last value nor is retried by every tab."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("jinja2", reason="the console's dependencies: pip install -e console/")

from pgdrain_console.connections import Shared


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_read_is_waited_for_then_a_stale_value_is_served_while_one_read_replaces_it():
    clock, reads, gate = Clock(), [], threading.Event()

    def read() -> int:
        reads.append(clock.now)
        if len(reads) > 1:
            gate.wait(10)  # the background read takes its time
        return len(reads)

    shared = Shared(read, seconds=5, clock=clock)
    assert shared.get() == (1, 0.0)
    clock.now += 3
    assert shared.get() == (1, 3.0) and len(reads) == 1  # fresh: no read
    clock.now += 3
    for _ in range(20):  # stale: served at once, one read started for all of them
        assert shared.get() == (1, 6.0)
    gate.set()
    for _ in range(100):
        if shared.reads == 2:
            break
        threading.Event().wait(0.01)
    assert shared.reads == 2 and len(reads) == 2
    assert shared.get() == (2, 0.0)


def test_a_failed_background_read_keeps_the_last_value_and_says_why():
    clock, answers = Clock(), iter([1, ConnectionResetError("reset"), 3])

    def read() -> int:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    shared = Shared(read, seconds=5, clock=clock)
    assert shared.get()[0] == 1
    clock.now += 6
    assert shared.get()[0] == 1
    _wait_for(lambda: shared.reads == 2)
    assert isinstance(shared.error, ConnectionResetError)
    assert shared.get() == (1, 6.0)  # the value read at 100, not the failed attempt's time
    clock.now += 6
    shared.get()
    _wait_for(lambda: shared.reads == 3)
    assert shared.error is None and shared.get()[0] == 3


def test_without_a_value_a_failure_is_raised_and_not_retried_within_the_interval():
    clock, calls = Clock(), []

    def read() -> int:
        calls.append(clock.now)
        raise ConnectionRefusedError("refused")

    shared = Shared(read, seconds=5, clock=clock)
    for _ in range(3):
        with pytest.raises(ConnectionRefusedError):
            shared.get()
    assert len(calls) == 1
    clock.now += 5
    with pytest.raises(ConnectionRefusedError):
        shared.get()
    assert len(calls) == 2


def test_at_zero_seconds_every_request_reads():
    values = iter(range(1, 10))
    shared = Shared(lambda: next(values), seconds=0)
    assert [shared.get()[0] for _ in range(3)] == [1, 2, 3]


def _wait_for(condition) -> None:
    for _ in range(500):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError("the background read did not end")
