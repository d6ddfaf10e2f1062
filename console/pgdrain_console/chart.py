"""The overview's chart of the last hour, as numbers for an SVG, decided without I/O: one column
a minute, done below and failed stacked on it, scaled to the busiest minute."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

MINUTES = 60


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    done_y: float
    done_height: float
    failed_y: float
    failed_height: float
    label: str
    """``18:02: 120 done, 3 failed``: the bar's tooltip."""


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    bars: tuple[Bar, ...]
    peak: int
    done: int
    failed: int
    start: str
    end: str


def per_minute(rows: Iterable[Mapping[str, Any]], now: datetime
               ) -> list[tuple[datetime, int, int]]:
    """The last ``MINUTES`` minutes up to ``now``'s, oldest first: (minute, done, failed);
    minutes nothing finished in count zero."""
    this_minute = now.replace(second=0, microsecond=0)
    minutes = [this_minute - timedelta(minutes=MINUTES - 1 - i) for i in range(MINUTES)]
    done = dict.fromkeys(minutes, 0)
    failed = dict.fromkeys(minutes, 0)
    for row in rows:
        minute = row["minute"]
        if minute in done:
            done[minute] += int(row["done"])
            failed[minute] += int(row["failed"])
    return [(m, done[m], failed[m]) for m in minutes]


def chart(rows: Iterable[Mapping[str, Any]], now: datetime, *, width: int = 720,
          height: int = 140) -> Chart:
    series = per_minute(rows, now)
    peak = max((d + f for _, d, f in series), default=0)
    scale = (height - 4) / peak if peak else 0.0
    step = width / MINUTES
    bars = []
    for i, (minute, done, failed) in enumerate(series):
        done_h, failed_h = done * scale, failed * scale
        bars.append(Bar(x=round(i * step + 1, 2), width=round(step - 2, 2),
                        done_y=round(height - done_h, 2), done_height=round(done_h, 2),
                        failed_y=round(height - done_h - failed_h, 2),
                        failed_height=round(failed_h, 2),
                        label=f"{minute:%H:%M} UTC: {done:,} done, {failed:,} failed"))
    return Chart(width=width, height=height, bars=tuple(bars), peak=peak,
                 done=sum(d for _, d, _ in series), failed=sum(f for _, _, f in series),
                 start=f"{series[0][0]:%H:%M}", end=f"{series[-1][0]:%H:%M}")
