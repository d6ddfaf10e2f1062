"""The fan-out arithmetic and the ledger of launches on their way (pgdrain.fanout), the rules
drain_slot_reserve and drain_slot_take apply in SQL (tests/integration/test_drain_launches.py
runs the same story against PostgreSQL)."""

from __future__ import annotations

import pytest

from pgdrain.fanout import LAPSE_SECONDS, Ledger, room, wanted


@pytest.mark.parametrize(("due", "per_drain", "more"), [
    (0, 10, 0), (1, 10, 0), (10, 10, 0), (11, 10, 1), (160, 10, 15), (35, 10, 3),
    (5, 0, 0), (-1, 10, 0)])
def test_wanted_is_one_drain_per_concurrency_besides_this_one(due, per_drain, more):
    assert wanted(due, per_drain) == more


@pytest.mark.parametrize(("want", "slots", "taken", "on_their_way", "launches"), [
    (15, 16, 1, 0, 15),
    (15, 16, 2, 13, 1),     # the burst's second drain: its siblings are on their way
    (15, 16, 16, 0, 0),
    (3, 16, 1, 0, 3),
    (1, 4, 3, 1, 0),        # continuation while the last slot is about to be taken
    (5, 4, 6, 0, 0),        # never negative, even with more taken than the cap (it changed)
])
def test_room_is_the_slots_neither_taken_nor_on_their_way(want, slots, taken, on_their_way,
                                                          launches):
    assert room(want, slots, taken, on_their_way) == launches


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_launches_each_free_slot_once():
    clock = Clock()
    ledger, taken, launches = Ledger(clock), 1, []
    launches.append(ledger.reserve(15, 16, taken))        # the first drain's fan-out
    for _ in range(15):                                   # each launched drain starts...
        ledger.arrived()
        taken += 1
        launches.append(ledger.reserve(15, 16, taken))    # ...and fans out in turn
    assert launches == [15] + [0] * 15
    assert (taken, ledger.on_their_way()) == (16, 0)


def test_a_lost_launch_holds_its_room_until_it_lapses():
    clock = Clock()
    ledger = Ledger(clock)
    assert ledger.reserve(3, 4, 1) == 3
    clock.now += LAPSE_SECONDS - 1
    assert ledger.reserve(3, 4, 1) == 0
    clock.now += 1
    assert ledger.on_their_way() == 0
    assert ledger.reserve(3, 4, 1) == 3


def test_a_start_takes_the_oldest_launch_and_a_failed_invoke_gives_back_the_newest():
    clock = Clock()
    ledger = Ledger(clock)
    assert ledger.reserve(1, 8, 0) == 1
    clock.now += 5
    assert ledger.reserve(2, 8, 0) == 2
    ledger.unreserve(1)                                   # one of the two invokes failed
    assert ledger.lapses == [1000.0 + LAPSE_SECONDS, 1005.0 + LAPSE_SECONDS]
    ledger.arrived()
    assert ledger.lapses == [1005.0 + LAPSE_SECONDS]
    ledger.unreserve(5)
    ledger.arrived()                                      # a drain nobody launched
    assert ledger.on_their_way() == 0
