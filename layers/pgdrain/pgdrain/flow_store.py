"""The controlled claim's statements: one function per catalogue statement of capped and
rate-limited claims (flow_*, job_claim_candidates, job_claim_ids, job_claim_controlled), run on
the caller's connection. They decide nothing: ``pgdrain.claiming`` orders them and asks
``pgdrain.flow`` for every decision; like ``pgdrain.store``, this module imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .claimed import claimed_job
from .db import Session, array_literal, as_session
from .flow_values import Candidate, FlowLimits, Rate, RateWindow
from .models import Job


def declare_type_rates(conn: Any, rates: Mapping[str, Rate]) -> None:
    """Record the job types' rate limits as given (a row already so is not written)."""
    if rates:
        names = sorted(rates)
        as_session(conn).rows("flow_type_rates_declare", job_types=names,
                              limits=[rates[n].limit for n in names],
                              periods=[rates[n].period for n in names])


@dataclass(frozen=True, slots=True)
class QueueClaim:
    """What job_claim_controlled returned: the jobs claimed, in claim order, with the rate of
    each one's queue where it has one; when it claimed nothing, the windows of the locked
    rate-limited queues as it read them."""

    jobs: list[Job]
    rates: dict[int, Rate]
    windows: list[RateWindow]


def claim_controlled_queues(conn: Any, *, batch_size: int, lease_seconds: float,
                            queues: Sequence[str] | None = None) -> QueueClaim:
    """Claim due jobs of capped or rate-limited queues within their room, the windows
    written, in one statement (see the catalogue's job_claim_controlled); run it outside a
    transaction, on a connection pgdrain owns."""
    jobs: list[Job] = []
    rates: dict[int, Rate] = {}
    windows: list[RateWindow] = []
    for row in as_session(conn).rows("job_claim_controlled", batch_size=batch_size,
                                     lease_seconds=lease_seconds,
                                     queues=list(queues) if queues else None):
        limit, period = row.pop("rate_limit"), row.pop("rate_period")
        starts, now = row.pop("rate_starts"), row.pop("clock")
        rate = None if limit is None else Rate(limit, period)
        if row["id"] is None:
            if rate is not None:
                windows.append(RateWindow("queue", row["queue"], rate, list(starts or ()), now))
            continue
        job = claimed_job(row)
        jobs.append(job)
        if rate is not None:
            rates[job.id] = rate
    return QueueClaim(jobs, rates, windows)


def lock_flow(session: Session, job_types: Sequence[str]) -> tuple[list[str], list[str]]:
    """Lock the rows of the capped and rate-limited queues and of ``job_types`` until the
    transaction ends, skipping those another holds: (queues locked, types locked)."""
    locked: dict[str, list[str]] = {"queue": [], "type": []}
    for row in session.rows("flow_lock", job_types=list(job_types)):
        locked[row["scope"]].append(row["name"])
    return locked["queue"], locked["type"]


def flow_limits(conn: Any, queues: Sequence[str] | None, job_types: Sequence[str]
                ) -> list[FlowLimits]:
    """The caps, running jobs and rate windows of ``queues`` (None: every capped or
    rate-limited queue not paused) and of the rated ``job_types``, with the database's
    clock (flow_rooms)."""
    return [FlowLimits(scope=row["scope"], name=row["name"], max_running=row["max_running"],
                       running=row["running"] or 0,
                       rate=None if row["rate_limit"] is None
                       else Rate(row["rate_limit"], row["rate_period"]),
                       starts=list(row["rate_starts"] or ()), now=row["now"],
                       tenants=bool(row["tenants"]))
            for row in as_session(conn).rows("flow_rooms", queues=None if queues is None
                                              else list(queues), job_types=list(job_types))]


def claim_candidates(conn: Any, *, batch_size: int, queues: Sequence[str] | None,
                     queue_room: Mapping[str, int], type_room: Mapping[str, int],
                     fair: bool = False) -> list[Candidate]:
    """The due jobs a controlled claim may take within the rooms, in claim order (``fair``:
    each tenant in turn), read without a lock (job_claim_candidates)."""
    return [Candidate(r["id"], r["queue"], r["job_type"]) for r in as_session(conn).rows(
        "job_claim_candidates", batch_size=batch_size,
        room_queues=list(queue_room), queue_rooms=list(queue_room.values()),
        room_types=list(type_room), type_rooms=list(type_room.values()),
        queues=list(queues) if queues else None, fair=fair)]


def claim_ids(session: Session, ids: Sequence[int], *, lease_seconds: float) -> list[Job]:
    """Claim the jobs ``ids`` still pending, in claim order (job_claim_ids)."""
    if not ids:
        return []
    # In claim order as the statement returns them: sorted in Python, a run_at of -infinity
    # or of a BC date (text from the driver, not a datetime) raised after the claim.
    return [claimed_job(r) for r in session.rows("job_claim_ids", ids=list(ids),
                                                   lease_seconds=lease_seconds)]


def write_windows(session: Session, queues: Mapping[str, Sequence[float]],
                  job_types: Mapping[str, Sequence[float]]) -> None:
    """Write the rate windows of ``queues`` and ``job_types``, in one statement."""
    session.rows("flow_starts_write", queues=list(queues),
                 queue_starts=[array_literal(w) for w in queues.values()],
                 job_types=list(job_types),
                 type_starts=[array_literal(w) for w in job_types.values()])


def limited_due(conn: Any, *, queues: Sequence[str], job_types: Sequence[str],
                only_queues: Sequence[str] | None) -> bool:
    """Whether a job of ``queues`` or of ``job_types`` is due (among ``only_queues``, if
    given): a walk of the claim's index to the first one."""
    row = as_session(conn).one("flow_limited_due", queues=list(queues),
                               job_types=list(job_types),
                               only_queues=list(only_queues) if only_queues else None)
    return bool(row and row["due"])
