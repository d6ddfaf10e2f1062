"""What an operator browses (``pgdrain console``): the queues at a glance, jobs done and failed
per minute, the last failures, and pages of jobs matching filters.

Every read is bounded whatever the table holds. Counts stop at a cap. A page of jobs is keyset-
paged by id, newest first, and read one window of ids at a time (``job_page``), so a filter that
matches nothing costs a window, not the table: a page that runs out of time before it is full
says how far down it looked, and the next page goes on from there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import Any

from .db import as_session
from .store import queue_rate

BOARD_CAP = 10_000
"""Each count on the overview stops here (shown as "10,000+")."""
BOARD_QUEUES = 200
"""The queues the overview lists at most, in name order."""
BOARD_PRIORITIES = 32
"""The priorities of a queue whose pending jobs the overview counts (the lowest, which run
first): a queue whose jobs use more counts those first ones only."""
WINDOW_IDS = 50_000
"""The ids one statement of a page looks at: a primary-key range, a few tens of milliseconds."""
PAGE_SECONDS = 0.15
"""How long a page may keep moving its window down before it answers with what it found."""


@dataclass(frozen=True)
class JobFilter:
    """What a page of jobs selects; None matches all. ``search`` is a piece of the payload as
    JSON text, any case; ages are seconds since the job was enqueued. ``tags``: jobs with all
    of them; ``meta``: jobs whose meta contains this object (``{"k": "v"}`` matches a meta
    with ``"k": "v"`` among its keys). ``statuses`` narrows to the statuses an action applies
    to (a bulk action), within ``status``."""

    status: str | None = None
    waiting_for: str | None = None
    job_type: str | None = None
    queue: str | None = None
    tenant: str | None = None
    ordering_key: str | None = None
    dedupe_key: str | None = None
    older_than_seconds: float | None = None
    newer_than_seconds: float | None = None
    search: str | None = None
    tags: tuple[str, ...] | None = None
    meta: dict[str, Any] | None = None
    statuses: tuple[str, ...] | None = None

    def params(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["statuses"] = None if self.statuses is None else list(self.statuses)
        values["tags"] = list(self.tags) if self.tags else None
        values["meta"] = json.dumps(self.meta, separators=(",", ":")) if self.meta else None
        return values

    def given(self) -> dict[str, Any]:
        """The filters set, by name (what a page says it shows)."""
        return {k: v for k, v in self.params().items() if v is not None and k != "statuses"}


@dataclass(frozen=True)
class JobPage:
    """One page of jobs, newest first."""

    jobs: list[dict[str, Any]]
    next_before: int | None
    """Where the next, older page starts (its ids are below this); None: there is none."""
    searched_down_to: int | None
    """Set when the page stopped short of full for time: the lowest id it looked at."""


def id_range(conn: Any) -> tuple[int | None, int | None]:
    """The lowest and highest job id, or (None, None) for an empty table."""
    row = as_session(conn).one("job_id_range")
    assert row is not None
    return row["low"], row["high"]


def job_page(conn: Any, match: JobFilter, *, before: int | None = None, limit: int = 50,
             seconds: float = PAGE_SECONDS, window: int = WINDOW_IDS,
             clock: Callable[[], float] = time.monotonic) -> JobPage:
    """Up to ``limit`` jobs matching ``match`` with ids below ``before`` (None: from the newest),
    newest first: windows of ``window`` ids, moving down until the page is full, the ids run out
    or ``seconds`` have passed (then the page says how far it looked)."""
    session = as_session(conn)
    low, high = id_range(conn)
    if low is None or high is None:
        return JobPage([], None, None)
    top = high + 1 if before is None else min(before, high + 1)
    started = clock()
    jobs: list[dict[str, Any]] = []
    while top > low and len(jobs) < limit:
        floor = max(low, top - window)
        rows = session.rows("job_page", **match.params(), before_id=top, floor_id=floor,
                            limit=limit - len(jobs))
        jobs.extend(rows)
        top = rows[-1]["id"] if len(jobs) == limit else floor
        if len(jobs) < limit and top > low and clock() - started >= seconds:
            return JobPage(jobs, top, top)
    return JobPage(jobs, top if top > low else None, None)


def matching_ids(conn: Any, match: JobFilter, *, upto: int, batch: int = 1000,
                 window: int = WINDOW_IDS) -> Iterator[list[int]]:
    """Every id up to ``upto`` that ``match`` selects, newest first, ``batch`` at a time (a
    bulk action's jobs: those enqueued after it was confirmed are not among them)."""
    session = as_session(conn)
    low, _ = id_range(conn)
    top = upto + 1
    while low is not None and top > low:
        floor = max(low, top - window)
        ids = [r["id"] for r in session.rows("job_page_ids", **match.params(), before_id=top,
                                             floor_id=floor, limit=batch)]
        if ids:
            yield ids
        top = ids[-1] if len(ids) == batch else floor


def count_matching(conn: Any, match: JobFilter, *, upto: int, seconds: float = 2.0,
                   clock: Callable[[], float] = time.monotonic) -> tuple[int, bool]:
    """How many jobs up to ``upto`` ``match`` selects, counted for at most ``seconds``: (the
    count, whether it is complete) — an incomplete one is "at least"."""
    started, count = clock(), 0
    batches = matching_ids(conn, match, upto=upto, batch=10_000)
    for ids in batches:
        count += len(ids)
        if clock() - started >= seconds:
            more = next(batches, None)  # the time is spent: is there more than counted?
            return count, more is None
    return count, True


def board(conn: Any, *, cap: int = BOARD_CAP, most_queues: int = BOARD_QUEUES,
          most_priorities: int = BOARD_PRIORITIES) -> list[dict[str, Any]]:
    """Every queue (up to ``most_queues``): its due, scheduled, running, waiting and failed
    jobs (each counted up to ``cap``; due as the index has it: a pending job expired or asked
    to stop counts until the janitor ends it), its oldest due job's wait, whether it is paused
    (for how many seconds, else None), its cap and rate (``"10/s"``, or None) (queue_board)."""
    rows = as_session(conn).rows("queue_board", cap=cap, most_queues=most_queues,
                                 most_priorities=most_priorities)
    return [queue_rate(r) for r in rows]


def minutes(conn: Any) -> list[dict[str, Any]]:
    """Jobs done and failed per minute over the last hour (job_minutes): ``minute`` (a
    timestamptz), ``done``, ``failed``; minutes with neither are absent."""
    return as_session(conn).rows("job_minutes")


def recent_failures(conn: Any, *, limit: int = 10) -> list[dict[str, Any]]:
    """The ``limit`` jobs that failed last, newest first (job_failures_recent)."""
    return as_session(conn).rows("job_failures_recent", limit=limit)

