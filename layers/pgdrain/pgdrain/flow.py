"""Flow control's decisions, pure: rate limits (``"100/min"``) and their sliding windows, and
which of a controlled claim's candidates start under the queues' and types' room. No I/O,
no clock of its own: the planner (``pgdrain.claiming``) passes the database's time in, so
tests pass a fake one. Migration 0018 writes the window rules once more in SQL, for the
one-statement claim of capped and rate-limited queues: these are its spec
(tests/integration/test_flow_sql.py checks that both agree).

A rate of N per period allows at most N starts in any window of that length (a sliding
window, exact: it remembers the starts of the last period, a pair per claim), not N per
calendar minute.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Defined with the other values (the store reads and writes rates without these rules).
from .flow_values import Candidate as Candidate
from .flow_values import Rate as Rate

MAX_RATE_LIMIT = 10_000
"""Most starts a rate may allow per period (the window trims to what can still limit: at most
this many pairs)."""
MIN_RATE_PERIOD = 1.0
"""The shortest period a rate may have: a second (the docs' range is a second to a day)."""
MAX_RATE_PERIOD = 86_400.0
NO_LIMIT = 2**31 - 1
"""The room of a queue or type with neither a cap nor a rate (an int column's largest)."""

PERIODS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
           "h": 3600.0, "hour": 3600.0, "d": 86_400.0, "day": 86_400.0}
# Compiled at the first use (re caches it), not at import: every function's init imports this.
# ASCII digits only: \d takes any script's digits, and int() reads Arabic-Indic "10" as 10.
_RATE = r"\s*([0-9]+)\s*/\s*([0-9]+(?:\.[0-9]+)?)?\s*([a-z]+)\s*"


class RateError(ValueError):
    """A rate that is not ``N/period``; the message says what is wrong."""


def parse_rate(text: Any) -> Rate:
    """``"10/s"``, ``"100/min"``, ``"5/h"``, ``"1000/day"``, ``"3/10s"`` (a period of 10 s).
    Raise RateError saying what is wrong: the count is a whole number from 1 to 10,000 (a rate
    of 0 would stop the queue: pause it instead), the period from a second to a day."""
    if isinstance(text, Rate):
        return text
    if not isinstance(text, str):
        raise RateError(f"must be text like '10/s' or '100/min', not {type(text).__name__}")
    match = re.fullmatch(_RATE, text.lower())
    if match is None:
        raise RateError(f"{_shown(text)} is not a rate: write N/period, e.g. '10/s', "
                        "'100/min', '5/h', '3/10s'")
    count, multiple, unit = match.groups()
    if unit not in PERIODS:
        raise RateError(f"{_shown(text)}: unknown period {_shown(unit)} (use s, min, h or "
                        "day)")
    # Measured before int(): past 4,300 digits int() raises a ValueError of its own.
    digits = count.lstrip("0")
    if not digits or len(digits) > len(str(MAX_RATE_LIMIT)) or int(digits) > MAX_RATE_LIMIT:
        raise RateError(f"{_shown(text)}: the count must be from 1 to {MAX_RATE_LIMIT} (to "
                        "stop a queue, pause it)")
    period = PERIODS[unit] * (float(multiple) if multiple else 1.0)
    # Shorter than a second, a window would hold starts of one claim only: the drains claim
    # about once a second at the least, so such a rate could not be what it says.
    if not MIN_RATE_PERIOD <= period <= MAX_RATE_PERIOD:
        raise RateError(f"{_shown(text)}: the period must be from a second to a day (1/s to "
                        "1/day, or a multiple such as 3/10s); "
                        + ("this one is longer" if period > MAX_RATE_PERIOD else
                           f"{period:g} s is shorter"))
    return Rate(int(digits), period)


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut short (a rate may be 5,000 characters long)."""
    shown = repr(text)
    return shown if len(shown) <= 40 else shown[:39] + "…'"


MIN_START_SLACK_SECONDS = 0.05
MAX_START_SLACK_SECONDS = 1.0
START_SLACK_SHARE = 0.05


def start_slack(rate: Rate) -> float:
    """How long after its claim a job under ``rate`` may still start: a twentieth of the
    period, from 50 ms (``10/s``) to a second (``100/min`` and longer periods).

    A claim's starts are counted for the period plus this, and the drain hands back, unstarted
    and uncharged, a job it could not start within this of its claim: so the handlers' starts,
    not only the claims, are at most N in any window of the period (a start lies within the
    slack after its claim, so the starts of any window come from claims within the period plus
    the slack). The price: a rate that binds runs at N per period plus the slack, at most 5 %
    below N per period (5/s: 4.76 a second)."""
    return min(MAX_START_SLACK_SECONDS,
               max(MIN_START_SLACK_SECONDS, rate.period * START_SLACK_SHARE))


def rate_room(starts: Sequence[float], now: float, rate: Rate, *, slack: float = 0.0) -> int:
    """How many more jobs may start at ``now`` given the recorded ``starts`` (a window: see
    ``rate_record``), counting each recorded start for the period plus ``slack``."""
    recent = sum(count for at, count in _pairs(starts) if at > now - rate.period - slack)
    return max(0, rate.limit - recent)


def room(*, max_running: int | None, running: int, rate: Rate | None,
         starts: Sequence[float], now: float, slack: float = 0.0) -> int:
    """How many more jobs a queue or type may start now: the smaller of its cap's room
    (``max_running`` less ``running``) and its rate's, each if set; NO_LIMIT if neither."""
    left = NO_LIMIT if max_running is None else max(0, max_running - running)
    return left if rate is None else min(left, rate_room(starts, now, rate, slack=slack))


def rate_free_in(starts: Sequence[float], now: float, rate: Rate, *,
                 slack: float = 0.0) -> float:
    """Seconds from ``now`` until one more start is allowed (0: now)."""
    span = rate.period + slack
    recent = [(at, count) for at, count in _pairs(starts) if at > now - span]
    total = sum(count for _, count in recent)
    for at, count in recent:  # oldest first: the window frees as they leave it
        if total < rate.limit:
            break
        total -= count
        if total < rate.limit:
            return max(0.0, at + span - now)
    return 0.0


def rate_record(starts: Sequence[float], now: float, count: int, rate: Rate, *,
                slack: float = 0.0) -> list[float]:
    """``starts`` with ``count`` starts at ``now`` added. A window is flat pairs, ``[at,
    count, at, count, ...]`` oldest first: one pair per claim, not one number per job, so a
    limit of 10,000 a minute keeps a pair per claim in the last minute. Pairs that left the
    window (the period plus ``slack``), or that later ones make irrelevant (the newer pairs
    alone fill the limit), go."""
    recent = [(at, n) for at, n in _pairs(starts) if at > now - rate.period - slack]
    if count:
        recent.append((now, count))
    while recent and sum(n for _, n in recent[1:]) >= rate.limit:
        recent.pop(0)
    return [x for at, n in recent for x in (at, float(n))]


def _pairs(starts: Sequence[float]) -> list[tuple[float, int]]:
    return [(starts[i], int(starts[i + 1])) for i in range(0, len(starts) - 1, 2)]


def choose(candidates: Iterable[Candidate], *, batch_size: int, queue_room: Mapping[str, int],
           type_room: Mapping[str, int]) -> list[int]:
    """The ids to start, in the candidates' order (the claim's order), up to ``batch_size``:
    a job starts only while its queue and its type (each if limited) have room."""
    queues, types = dict(queue_room), dict(type_room)
    chosen: list[int] = []
    for c in candidates:
        if len(chosen) >= batch_size:
            break
        if queues.get(c.queue, math.inf) <= 0 or types.get(c.job_type, math.inf) <= 0:
            continue
        if c.queue in queues:
            queues[c.queue] -= 1
        if c.job_type in types:
            types[c.job_type] -= 1
        chosen.append(c.id)
    return chosen
