"""Moving the queue's clock without sleeping: ``advance(conn, seconds)``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..db import as_session
from ..registry import REGISTRY, Registry, Schedule


@dataclass(frozen=True)
class Advanced:
    """What ``advance`` moved: job rows, schedule entries made due, other rows (rate
    windows, signals, launches)."""

    jobs: int
    schedules: int
    others: int


def schedule_rewinds(entries: Sequence[Schedule], last_ticks: dict[str, datetime],
                     now: datetime, seconds: float) -> list[tuple[str, datetime]]:
    """Which entries a tick of which falls within the next ``seconds`` (after the last tick
    taken) must become due now, and the last tick that makes the drain take one: just before
    its latest tick at ``now``. Pure.

    Cron ticks sit on the wall clock, which moving rows back cannot move: an entry whose next
    tick comes within ``seconds`` is made due (once, as the catch-up rule runs a missed tick
    once), the others are left as they are. A never-seen entry (no drain yet) is left to the
    drain's first sight."""
    rewinds = []
    later = now + timedelta(seconds=seconds)
    for entry in entries:
        last = last_ticks.get(entry.name)
        if last is None:
            continue
        latest_now = entry.cron.latest_at_or_before(now)
        if latest_now is not None and latest_now > last:
            continue  # due already
        latest_later = entry.cron.latest_at_or_before(later)
        if latest_later is None or latest_later <= last or latest_now is None:
            continue
        rewinds.append((entry.name, latest_now - timedelta(microseconds=1)))
    return rewinds


def advance(conn: Any, seconds: float, *, registry: Registry | None = None) -> Advanced:
    """Make the queue as it would be ``seconds`` from now, without waiting: every time the
    drain compares with the database's clock (jobs' run_at, so delays, backoffs, snoozes and
    waits; leases; expiry; unique windows; rate windows; retention; signals) moves back by
    ``seconds``, in one statement. Schedules of ``registry`` (default: pgdrain's) whose next
    tick falls within those seconds become due (see ``schedule_rewinds``).

    ``conn`` is any connection (in the test's transaction if one is open: then the drain sees
    the change once it commits). Returns what it moved.
    """
    if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"advance: seconds must be a finite number >= 0, not {seconds!r}")
    session = as_session(conn)
    entries = (REGISTRY if registry is None else registry).schedules()
    rewinds: list[tuple[str, datetime]] = []
    if entries:
        rows = session.rows("schedule_states", names=[e.name for e in entries])
        last = {r["name"]: r["last_tick"] for r in rows if r["name"] is not None
                and isinstance(r["last_tick"], datetime)}
        rewinds = schedule_rewinds(entries, last, rows[0]["now"], float(seconds))
    row = session.one("clock_advance", seconds=float(seconds),
                      names=[name for name, _ in rewinds], ticks=[tick for _, tick in rewinds])
    assert row is not None
    return Advanced(jobs=row["jobs"], schedules=row["schedules"], others=row["others"])
