"""The controlled claim's planner: claims of capped and rate-limited queues and of rate-limited
job types, run as the store's statements, every decision asked of ``pgdrain.flow`` (pure).

Two ways, by what the drain declares:

- No rate-limited job type: one statement (job_claim_controlled, migration 0018) locks the
  queues' rows, reads their room, claims what fits and writes the windows; the planner turns
  what it returned into the drain's ``ControlledClaim`` (each rated job's start slack, and,
  when a rate held due work back, when it frees).
- Rated job types: one short transaction of the store's statements: lock the queues' and the
  types' rows (flow_lock), read their limits (flow_rooms), compute each room (``flow.room``),
  read the candidates (job_claim_candidates), pick (``flow.choose``), claim the picked
  (job_claim_ids) and write the windows (``flow.rate_record``, flow_starts_write).

Jobs over a limit stay pending, uncharged. Precedence of the controls: docs/queue.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import flow, flow_store
from .db import Session, as_session
from .flow_values import ControlledClaim, FlowLimits, Rate, RateWindow
from .models import Job


def declare_type_rates(conn: Any, rates: Mapping[str, Rate]) -> None:
    """Record the job types' rate limits as the code declares them (a row already so is not
    written), so that every drain counts the same window."""
    flow_store.declare_type_rates(conn, rates)


def claim_controlled(conn: Any, *, batch_size: int, lease_seconds: float,
                     queues: Sequence[str] | None = None,
                     type_rates: Mapping[str, Rate] | None = None) -> ControlledClaim:
    """Claim up to ``batch_size`` due jobs of capped or rate-limited queues and of
    rate-limited job types (``type_rates``, as declared by ``declare_type_rates``), never more
    running in a queue than its ``max_running`` nor more starts in a window than a rate
    allows, across all drains. A queue or type whose row another drain holds is left alone
    this time. Needs a connection pgdrain owns, outside any transaction."""
    if type_rates:
        return _claim_with_types(as_session(conn), batch_size, lease_seconds, queues,
                                 sorted(type_rates))
    got = flow_store.claim_controlled_queues(conn, batch_size=batch_size,
                                          lease_seconds=lease_seconds, queues=queues)
    rated = {job_id: flow.start_slack(rate) for job_id, rate in got.rates.items()}
    wait = None
    if not got.jobs:
        wait = _rate_wait(conn, got.windows, queues)
    return ControlledClaim(got.jobs, wait, rated)


def _rate_wait(conn: Any, windows: Sequence[RateWindow], queues: Sequence[str] | None
               ) -> float | None:
    """Seconds until a full window lets one more start, when one holds due work back (None:
    no rate held anything back)."""
    full = {(w.scope, w.name): flow.rate_free_in(w.starts, w.now, w.rate,
                                                  slack=flow.start_slack(w.rate))
            for w in windows
            if flow.rate_room(w.starts, w.now, w.rate, slack=flow.start_slack(w.rate)) == 0}
    if full and flow_store.limited_due(conn, queues=[n for s, n in full if s == "queue"],
                                    job_types=[n for s, n in full if s == "type"],
                                    only_queues=queues):
        return min(full.values())
    return None


class _Rooms:
    """Each queue's and type's room, and their rate windows by (scope, name), from what
    flow_rooms read."""

    def __init__(self, limits: Sequence[FlowLimits], types: Sequence[str]):
        self.queue_room: dict[str, int] = {}
        self.type_room: dict[str, int] = {}
        self.windows: dict[tuple[str, str], RateWindow] = {}
        self.limited = bool(limits)
        self.fair = any(lim.tenants for lim in limits)
        for lim in limits:
            slack = 0.0 if lim.rate is None else flow.start_slack(lim.rate)
            if lim.rate is not None:
                self.windows[lim.scope, lim.name] = RateWindow(lim.scope, lim.name, lim.rate,
                                                               lim.starts, lim.now)
            (self.queue_room if lim.scope == "queue" else self.type_room)[lim.name] = \
                flow.room(max_running=lim.max_running, running=lim.running, rate=lim.rate,
                          starts=lim.starts, now=lim.now, slack=slack)
        # A rated type whose row another drain holds (or that is not declared) has no room,
        # so that no job of it starts here, in its own queue or a capped one.
        self.type_room = {t: 0 for t in types} | self.type_room

    def chosen(self, conn: Any, batch_size: int, queues: Sequence[str] | None, *,
               fair: bool = True) -> list[int]:
        """The ids of the due jobs a claim would take within the rooms (``fair``: from each
        tenant in turn while pending jobs name tenants)."""
        if not self.limited:
            return []
        candidates = flow_store.claim_candidates(conn, batch_size=batch_size, queues=queues,
                                              queue_room=self.queue_room,
                                              type_room=self.type_room,
                                              fair=fair and self.fair)
        return flow.choose(candidates, batch_size=batch_size, queue_room=self.queue_room,
                           type_room=self.type_room)


def _claim_with_types(session: Session, batch_size: int, lease_seconds: float,
                      queues: Sequence[str] | None, types: list[str]) -> ControlledClaim:
    with session.transaction():
        locked_queues, locked_types = flow_store.lock_flow(session, types)
        if not locked_queues and not locked_types:
            return ControlledClaim([])
        rooms = _Rooms(flow_store.flow_limits(session, locked_queues, locked_types), types)
        jobs = flow_store.claim_ids(session, rooms.chosen(session, batch_size, queues),
                                 lease_seconds=lease_seconds)
        started, rated = _starts(jobs, rooms.windows)
        if started:
            _write_windows(session, rooms.windows, started)
        wait = None
        if not jobs:
            wait = _rate_wait(session, [w for key, w in rooms.windows.items()
                                        if key not in started], queues)
    return ControlledClaim(jobs, wait, rated)


def _starts(jobs: Sequence[Job], windows: Mapping[tuple[str, str], RateWindow]
            ) -> tuple[dict[tuple[str, str], int], dict[int, float]]:
    """How many of ``jobs`` start in each window, and each rated job's start slack (the
    tighter of its queue's and its type's)."""
    started: dict[tuple[str, str], int] = {}
    rated: dict[int, float] = {}
    for job in jobs:
        for key in (("queue", job.queue), ("type", job.job_type)):
            if key in windows:
                started[key] = started.get(key, 0) + 1
                slack = flow.start_slack(windows[key].rate)
                rated[job.id] = min(slack, rated.get(job.id, slack))
    return started, rated


def _write_windows(session: Session, windows: Mapping[tuple[str, str], RateWindow],
                   started: Mapping[tuple[str, str], int]) -> None:
    written: dict[str, dict[str, list[float]]] = {"queue": {}, "type": {}}
    for (scope, name), count in sorted(started.items()):
        w = windows[scope, name]
        written[scope][name] = flow.rate_record(w.starts, w.now, count, w.rate,
                                                slack=flow.start_slack(w.rate))
    flow_store.write_windows(session, written["queue"], written["type"])


def controlled_due(conn: Any, *, limit: int, queues: Sequence[str] | None = None,
                   type_rates: Mapping[str, Rate] | None = None) -> int:
    """Due jobs of capped or rate-limited queues and of rate-limited types (``type_rates``)
    that a controlled claim could take now, up to ``limit``: each within its room, as
    ``claim_controlled`` would choose them, read without a lock."""
    types = sorted(type_rates or ())
    rooms = _Rooms(flow_store.flow_limits(conn, None, types), types)
    # How many, not which: the claim order (by tenant or not) changes no room's count.
    return len(rooms.chosen(conn, limit, queues, fair=False))
