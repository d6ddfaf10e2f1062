"""Operators' controls on a queue, kept in the database so that every drain obeys them at
once: pause and resume (``pgdrain pause``/``resume``, ``POST /queues/{queue}/pause``), and a
concurrency cap and a rate limit (``pgdrain queue set QUEUE --max-running N --rate 10/s``,
``PUT /queues/{queue}``).

A paused queue keeps accepting jobs; no claim that starts after the pause commits takes its
jobs, and jobs already running finish. A claim already under way when the pause commits may
still take some (its snapshot was taken before): the pause is in force for every claim that
starts after ``pause`` returns (on a DB-API connection: after the caller commits).
"""

from __future__ import annotations

from typing import Any

from . import store
from .db import as_session
from .enqueue import text_field
from .errors import InvalidJobError, UnknownQueue
from .models import MAX_INT, MAX_TEXT


def queue_name(queue: Any) -> str:
    """``queue`` if a job could name it (enqueue's own check: 1 to 200 characters, not blank,
    no NUL, valid Unicode), else InvalidJobError naming the field ``queue``."""
    return text_field("queue", queue, MAX_TEXT)


def pause(conn: Any, queue: str, *, new: bool = False) -> dict[str, Any]:
    """Pause ``queue``; returns ``{"queue", "paused", "paused_at"}``. A queue no job names and
    never set before raises UnknownQueue (a typo would otherwise pause nothing), unless ``new``
    (pause a queue before its first job)."""
    session = as_session(conn)
    name = queue_name(queue)
    if not new:
        _known(session, name, "pause")
    row = store.pause_queue(session, name)
    return {"queue": row["queue"], "paused": True, "paused_at": row["paused_at"]}


def resume(conn: Any, queue: str) -> dict[str, Any]:
    """Resume ``queue`` (a queue that is not paused stays as it is); returns
    ``{"queue", "paused": False, "paused_at": None}``. An unknown queue raises UnknownQueue."""
    session = as_session(conn)
    name = queue_name(queue)
    _known(session, name, "resume")
    store.resume_queue(session, name)
    return {"queue": name, "paused": False, "paused_at": None}


UNCHANGED: Any = object()
"""``set_queue``'s default: leave that setting as it is."""


def set_queue(conn: Any, queue: str, *, max_running: Any = UNCHANGED, rate: Any = UNCHANGED,
              new: bool = False) -> dict[str, Any]:
    """Cap ``queue`` at ``max_running`` jobs running across all drains, and/or limit it to
    ``rate`` starts per period (``"10/s"``, ``"100/min"``: at most that many in any such
    window, across all drains); None lifts either, a setting not given stays. Returns
    ``{"queue", "paused", "paused_at", "max_running", "rate"}``. A cap lower than what runs
    now lets those finish and starts no more until the queue is below it. An unknown queue
    raises UnknownQueue unless ``new``; a cap that is not a whole number from 1 up or a rate
    that is not ``N/period`` (N from 1), InvalidJobError naming the field; nothing changes."""
    if max_running is UNCHANGED and rate is UNCHANGED:
        raise InvalidJobError("give max_running, rate or both", field="max_running")
    if max_running not in (None, UNCHANGED) and (isinstance(max_running, bool) or
                                                 not isinstance(max_running, int) or
                                                 not 1 <= max_running <= MAX_INT):
        raise InvalidJobError(f"must be a whole number from 1 to {MAX_INT} (to stop the "
                              "queue, pause it), or none", field="max_running")
    limit = None
    if rate not in (None, UNCHANGED):
        from .flow import RateError, parse_rate

        try:
            limit = parse_rate(rate)
        except RateError as exc:
            raise InvalidJobError(str(exc), field="rate") from None
    session = as_session(conn)
    name = queue_name(queue)
    if not new:
        _known(session, name, "set")
    row = store.set_queue(session, name, set_cap=max_running is not UNCHANGED,
                          max_running=None if max_running is UNCHANGED else max_running,
                          set_rate=rate is not UNCHANGED, rate=limit)
    return {"queue": row["queue"], "paused": row["paused_at"] is not None,
            "paused_at": row["paused_at"], "max_running": row["max_running"],
            "rate": row["rate"]}


def paused_queues(conn: Any) -> dict[str, Any]:
    """The paused queues, by name: when each was paused (an aware datetime)."""
    return {r["queue"]: r["paused_at"] for r in store.queue_states(conn)
            if r["paused_at"] is not None}


_BEFORE_ITS_FIRST_JOB = {
    "pause": "to pause a queue before its first job: pgdrain.pause(conn, queue, new=True) or "
             "`pgdrain pause QUEUE --new`",
    "resume": "there is nothing to resume",
    "set": "to set a queue before its first job: pgdrain.set_queue(conn, queue, ..., "
           "new=True) or `pgdrain queue set QUEUE ... --new`",
}


def _known(session: Any, queue: str, action: str) -> None:
    if not store.queue_known(session, queue):
        raise UnknownQueue(f"no queue {queue!r}: no job names it and it was never set "
                           f"(a typo?); {_BEFORE_ITS_FIRST_JOB[action]}")
