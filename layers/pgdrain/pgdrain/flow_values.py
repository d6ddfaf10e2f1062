"""Flow control's values, as the store reads and writes them: a rate, a claim's candidates, a
queue's and a type's limits, a rate's window, a controlled claim. The rules are pgdrain.flow's.
Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from .models import Job


class Rate(NamedTuple):
    """At most ``limit`` starts in any ``period`` seconds."""

    limit: int
    period: float

    def __str__(self) -> str:
        for unit, seconds in (("day", 86_400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0)):
            if self.period == seconds:
                return f"{self.limit}/{unit}"
        return f"{self.limit}/{self.period:g}s"


class Candidate(NamedTuple):
    """A due job a controlled claim may start: what its rooms depend on."""

    id: int
    queue: str
    job_type: str


@dataclass(frozen=True, slots=True)
class FlowLimits:
    """What limits a queue's or a rated job type's next starts (``scope`` "queue" or
    "type"), read under its row's lock: its cap and running jobs (a queue's), its rate and
    window, and the database's clock."""

    scope: str
    name: str
    max_running: int | None
    running: int
    rate: Rate | None
    starts: list[float]
    now: float
    tenants: bool = False
    """Whether pending jobs name tenants (the same on every row): then the claim takes from
    each tenant in turn."""


@dataclass(frozen=True, slots=True)
class RateWindow:
    """A rate limit's window as a controlled claim read it under its row's lock: the queue's or
    job type's (``scope``, ``name``) rate, its recorded starts (flat ``[at, count, ...]``
    pairs, see ``flow.rate_record``) and the database's clock when read."""

    scope: str
    name: str
    rate: Rate
    starts: list[float]
    now: float


@dataclass(frozen=True, slots=True)
class ControlledClaim:
    """What a controlled claim took, and, when a rate limit held due work back, the seconds
    until that limit lets one more start (None: no rate held anything back). ``rated``: the
    jobs it took under a rate limit (their queue's or type's), each with the seconds from the
    claim within which it must start or be handed back (``flow.start_slack``)."""

    jobs: list[Job]
    rate_free_in: float | None = None
    rated: Mapping[int, float] = field(default_factory=dict)
