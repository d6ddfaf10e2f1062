"""How many drains a drain starts, and the ledger of launches on their way.

A drain starts more drains twice: at its start when the backlog is more than it runs at once
(fan-out, one drain per PGDRAIN_CONCURRENCY due jobs), and after giving its slot back when due
work is left (continuation, one). Counting only the slots taken (PGDRAIN_MAX_DRAINS) was not
enough: a drain launched a moment ago holds no slot until its invocation starts, so every
drain of a burst launched again for the same free slots, and the surplus started only to find
every slot taken (``stopped: "busy"``: a Lambda request and a start for nothing; 96 launches
for 15 free slots on the 10,000-job backlog bench).

So a launch first reserves its room (``drain_slot_reserve``): within the slots, minus those
taken, minus the launches still on their way, in one statement that serializes on one row. A
drain takes one reservation off as it tries for its slot (``drain_slot_take``), slot or not;
launches that fail are given back at once (``drain_slot_unreserve``); and a reservation lapses
``LAPSE_SECONDS`` after its launch, so a launch Lambda lost holds its room that long at most.

Continuation goes through the ledger too: a drain that finds no room leaves the work to the
drains that hold every slot or are on their way to one. Each of those looks for due work once
more at its end (as for a ring the doorbell skips), so no work waits for the schedule unless
a launch was lost, which the schedule covers as it covers a failed invoke.

This module holds the arithmetic, without I/O: ``wanted`` and ``room``, which
``drain_slot_reserve`` computes in SQL, and ``Ledger``, the same rules in memory for the
drain's unit tests (tests/support/fake_store.py).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, field

LAPSE_SECONDS = 60.0
"""How long a launch holds its room without its drain starting: the drain function's
MaximumEventAgeInSeconds (template.yaml), after which Lambda drops an asynchronous event it
has not run (throttled, or lost), so that a launch not started by then never will be. Most
start within seconds; but a cold start on a loaded host took up to a minute in the local
stand-in (bench/backlog.py, 16 drains on two cores), and a reservation that lapses before its
drain starts lets the next fan-out launch for the same slot again (busy: one request, never a
slot over the cap). Meanwhile a lost launch keeps one slot empty: the other drains run, and
the schedule ticks within the same minute."""


def wanted(due: int, per_drain: int) -> int:
    """Drains to start besides this one for ``due`` jobs at ``per_drain`` each."""
    if due <= 0 or per_drain <= 0:
        return 0
    return max(0, math.ceil(due / per_drain) - 1)


def room(wanted: int, slots: int, taken: int, on_their_way: int) -> int:
    """Launches to make of ``wanted``: never more than the slots neither taken nor about to
    be taken by a launch on its way."""
    return max(0, min(wanted, slots - taken - on_their_way))


@dataclass
class Ledger:
    """The launches on their way, each the time it lapses (``drain_slot_reserve``'s
    ``pgdrain_drain_launches`` in memory)."""

    clock: Callable[[], float]
    lapses: list[float] = field(default_factory=list)

    def on_their_way(self) -> int:
        self._forget_lapsed()
        return len(self.lapses)

    def reserve(self, wanted: int, slots: int, taken: int,
                lapse_seconds: float = LAPSE_SECONDS) -> int:
        granted = room(wanted, slots, taken, self.on_their_way())
        self.lapses.extend([self.clock() + lapse_seconds] * granted)
        return granted

    def arrived(self) -> None:
        """A drain tried for its slot: the oldest launch on its way came."""
        self._forget_lapsed()
        del self.lapses[:1]

    def unreserve(self, count: int) -> None:
        """``count`` launches did not happen: their room goes back (the newest)."""
        self._forget_lapsed()
        del self.lapses[max(0, len(self.lapses) - count):]

    def _forget_lapsed(self) -> None:
        self.lapses.sort()
        del self.lapses[:bisect.bisect_right(self.lapses, self.clock())]
