"""A drain's slot is held no longer than its invocation could (issue: faults in the seams,
item 1).

A slot (PGDRAIN_MAX_DRAINS) is a session-level advisory lock. A drain cut off by a partition
sends no FIN: its server session sits idle, holding the slot, until TCP keepalives give up
(two hours by default), and with PGDRAIN_MAX_DRAINS=1 every drain meanwhile answers "busy".
While it holds a slot the session carries ``idle_session_timeout`` = the invocation's time
left, which giving the slot back lifts, so a warm connection may idle between invocations.
"""

from __future__ import annotations

import time

from pgdrain import store
from pgdrain.drain import PostgresStore
from tests.support.drains import connector_to


def slot_holder(database_url: str, seconds: float) -> tuple[PostgresStore, int]:
    connector = connector_to(database_url)
    connector.open(time.monotonic() + seconds)
    holder = PostgresStore(connector)
    slot = holder.take_slot(1)
    assert slot == 0
    return holder, slot


def wait_until(check, seconds: float) -> bool:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if check():
            return True
        time.sleep(0.1)
    return check()


def test_a_slot_whose_drain_went_silent_frees_within_its_invocation(database_url, conn):
    holder, _ = slot_holder(database_url, 1.5)
    assert store.take_drain_slot(conn, 1) is None          # held: another drain is busy
    # The holder never speaks again (as behind a partition): its session ends by itself.
    assert wait_until(lambda: store.drains_running(conn) == 0, 6.0)
    assert store.take_drain_slot(conn, 1) == 0
    store.give_back_drain_slot(conn, 0)
    holder.discard()


def test_a_slot_given_back_leaves_the_warm_connection_free_to_idle(database_url):
    holder, slot = slot_holder(database_url, 1.5)
    holder.give_back_slot(slot)
    time.sleep(2.5)                                        # longer than the bound was
    # The next invocation's first statement finds its connection alive (not replaced).
    assert holder.connector.open(time.monotonic() + 5) is False
    holder.discard()
