"""The model's checks that need no database: intervals and windows over handler executions."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

from tests.model.model_jobs import Execution


def end_of(execution: Execution) -> float:
    """When an execution ended; one still running has not (it overlaps all that follows)."""
    return math.inf if execution.ended is None else execution.ended


def most_at_once(executions: Iterable[Execution]) -> int:
    """The most executions running at one instant (an end at t comes before a start at t)."""
    events = sorted([(e.started, 1) for e in executions] +
                    [(end_of(e), -1) for e in executions], key=lambda x: (x[0], x[1]))
    most = running = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most


def most_in_any_window(starts: Sequence[float], period: float) -> int:
    """The most starts in any half-open window [t, t + period)."""
    ordered = sorted(starts)
    most, first = 0, 0
    for last, at in enumerate(ordered):
        while at - ordered[first] >= period:
            first += 1
        most = max(most, last - first + 1)
    return most


def overlapping(executions: Sequence[Execution]) -> list[tuple[Execution, Execution]]:
    """Pairs of executions (in start order) where the later started before the earlier
    ended."""
    ordered = sorted(executions, key=lambda e: e.started)
    return [(a, b) for a, b in itertools.pairwise(ordered)
            if b.started < end_of(a)]
