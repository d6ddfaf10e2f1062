"""The ledger of drains launched and not yet started (pgdrain.fanout; drain_slot_reserve,
drain_slot_take, drain_slot_unreserve, migration 0019), on PostgreSQL.

A drain that started drains counted the slots taken, not the drains launched a moment before
that held none yet: each drain of a burst launched again for the same free slots and the
surplus answered "busy". These are the statements that make every launch count."""

from __future__ import annotations

import threading
import time

import pgdrain
from pgdrain import store
from pgdrain.drain import drain
from pgdrain.registry import Registry
from tests.support.drains import clock, connector_to


def on_their_way(sql) -> int:
    return sql("SELECT cardinality(launched) AS n FROM pgdrain_drain_launches")[0]["n"]


def test_a_burst_launches_each_free_slot_once(connect_to):
    first = connect_to()
    assert store.take_drain_slot(first, 4) == 0
    assert store.reserve_drain_launches(first, 15, 4, lapse_seconds=60) == 3
    # The first of the three starts and fans out too: its siblings are on their way.
    second = connect_to()
    assert store.take_drain_slot(second, 4) == 1
    assert store.reserve_drain_launches(second, 15, 4, lapse_seconds=60) == 0
    # The first drain stops and gives its slot back: that one slot is free again.
    store.give_back_drain_slot(first, 0)
    assert store.reserve_drain_launches(first, 15, 4, lapse_seconds=60) == 1
    assert store.reserve_drain_launches(first, 1, 4, lapse_seconds=60) == 0


def test_a_drain_that_finds_every_slot_taken_has_arrived_too(connect_to, sql):
    holder, late = connect_to(), connect_to()
    assert store.take_drain_slot(holder, 1) == 0
    store.give_back_drain_slot(holder, 0)
    assert store.reserve_drain_launches(holder, 1, 1, lapse_seconds=60) == 1
    assert store.take_drain_slot(holder, 1) == 0           # someone else took the slot
    assert on_their_way(sql) == 0                          # ...and the launch's room with it
    assert store.take_drain_slot(late, 1) is None          # the launch arrives: busy
    assert on_their_way(sql) == 0


def test_a_lost_launch_holds_its_room_only_until_it_lapses(conn):
    assert store.reserve_drain_launches(conn, 2, 2, lapse_seconds=0.5) == 2
    assert store.reserve_drain_launches(conn, 2, 2, lapse_seconds=0.5) == 0
    time.sleep(0.7)
    assert store.reserve_drain_launches(conn, 2, 2, lapse_seconds=0.5) == 2


def test_failed_invokes_give_their_room_back_at_once(conn):
    assert store.reserve_drain_launches(conn, 3, 4, lapse_seconds=60) == 3
    assert store.unreserve_drain_launches(conn, 2) == 1
    assert store.reserve_drain_launches(conn, 9, 4, lapse_seconds=60) == 3
    assert store.unreserve_drain_launches(conn, 10) == 0


def test_concurrent_fan_outs_never_reserve_past_the_slots(connect_to, sql):
    conns = [connect_to() for _ in range(8)]
    granted: list[int] = []
    start = threading.Barrier(len(conns))

    def fan_out(conn) -> None:
        start.wait()
        for _ in range(5):
            granted.append(store.reserve_drain_launches(conn, 3, 5, lapse_seconds=60))

    threads = [threading.Thread(target=fan_out, args=(c,)) for c in conns]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(granted) == 40
    assert sum(granted) == 5 and on_their_way(sql) == 5


class Launcher:
    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    def launch(self, count: int, reason: str) -> int:
        self.calls.append((count, reason))
        return count  # accepted: the drains are on their way (this test starts them itself)

    def prepare(self) -> None:
        pass


def test_a_drain_of_a_burst_launches_only_for_the_slots_no_sibling_will_take(database_url,
                                                                          conn):
    registry = Registry()

    @pgdrain.job("quick", registry=registry)
    def quick(job):
        pass

    settings = pgdrain.Settings(max_drains=4, concurrency=10, safety_margin_seconds=0.5)
    launches = []
    for _ in range(2):      # the first drain, then one of those it launched
        conn.run("INSERT INTO jobs (job_type) SELECT 'quick' FROM generate_series(1, 35)")
        launcher, connector = Launcher(), connector_to(database_url)
        try:
            drain(connector, registry, settings, time_left=clock(30), launcher=launcher)
        finally:
            connector.discard()
        launches.append(launcher.calls)
    # 35 due at 10 a drain want 4 drains: the first launched 3. The second is one of them,
    # with two still on their way: of the 4 slots, one is left for a launch, not three.
    assert launches == [[(3, "fan-out")], [(1, "fan-out")]]
