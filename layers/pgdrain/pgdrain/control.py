"""Operators' controls on a queue, kept in the database so that every drain obeys them at
once: pause and resume (``pgdrain pause``/``resume``, ``POST /queues/{queue}/pause``), and a
concurrency cap (``pgdrain queue set QUEUE --max-running N``, ``PUT /queues/{queue}``).

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
        _known(session, name)
    row = store.pause_queue(session, name)
    return {"queue": row["queue"], "paused": True, "paused_at": row["paused_at"]}


def resume(conn: Any, queue: str) -> dict[str, Any]:
    """Resume ``queue`` (a queue that is not paused stays as it is); returns
    ``{"queue", "paused": False, "paused_at": None}``. An unknown queue raises UnknownQueue."""
    session = as_session(conn)
    name = queue_name(queue)
    _known(session, name)
    store.resume_queue(session, name)
    return {"queue": name, "paused": False, "paused_at": None}


def set_queue(conn: Any, queue: str, *, max_running: Any, new: bool = False
              ) -> dict[str, Any]:
    """Cap ``queue`` at ``max_running`` jobs running across all drains (None: no cap);
    returns ``{"queue", "paused", "paused_at", "max_running"}``. A cap lower than what runs
    now lets those finish and starts no more until the queue is below it. An unknown queue
    raises UnknownQueue unless ``new``; a cap that is not a whole number from 1 up,
    InvalidJobError (field ``max_running``)."""
    if max_running is not None and (isinstance(max_running, bool) or
                                    not isinstance(max_running, int) or
                                    not 1 <= max_running <= MAX_INT):
        raise InvalidJobError(f"must be a whole number from 1 to {MAX_INT} (to stop the "
                              "queue, pause it), or none", field="max_running")
    session = as_session(conn)
    name = queue_name(queue)
    if not new:
        _known(session, name)
    row = store.set_queue(session, name, max_running=max_running)
    return {"queue": row["queue"], "paused": row["paused_at"] is not None,
            "paused_at": row["paused_at"], "max_running": row["max_running"]}


def paused_queues(conn: Any) -> dict[str, Any]:
    """The paused queues, by name: when each was paused (an aware datetime)."""
    return {r["queue"]: r["paused_at"] for r in store.queue_states(conn)
            if r["paused_at"] is not None}


def _known(session: Any, queue: str) -> None:
    if not store.queue_known(session, queue):
        raise UnknownQueue(f"no queue {queue!r}: no job names it and it was never paused "
                           "(a typo?); to pause a queue before its first job: pgdrain.pause(conn, "
                           "queue, new=True) or `pgdrain pause QUEUE --new`")
