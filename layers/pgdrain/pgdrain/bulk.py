"""Actions on every job a filter selects: cancel, requeue, delete, run now. One implementation
for the library (``pgdrain.bulk``), the ``pgdrain cancel|requeue|delete`` commands, the API's
``POST /jobs/cancel|requeue|delete`` and the console's bulk actions.

An action is two steps. ``count`` counts the jobs the filter selects among those the action
applies to (cancel: pending, running or waiting; requeue: failed; delete: all but running; run
now: pending) and names the highest id it counted (``upto``). ``act`` then acts on those jobs
and no others: ids up to ``upto`` (a job enqueued after the count is never touched), newest
first, ``batch`` at a time. Each batch is its own short transaction, its lock waits bounded by
``lock_ms`` (below the server's deadlock_timeout, so that in a lock cycle with a drain this
side gives up first): a drain never waits behind a bulk action for longer than one batch's
statement, and a claim, which skips locked rows, not at all. A batch that cannot get its locks
is tried again a few times, then the action stops and says where, to be run again from there.
A running job is never deleted (its drain holds it); cancelling it asks it to stop, as
``pgdrain cancel`` does. ``act`` also stops after ``seconds`` (an API call's time left), with
the id to go on from.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from . import browse, operator_store
from .browse import JobFilter
from .db import DEADLOCK_DETECTED, UNIQUE_VIOLATION, as_session, sqlstate
from .enqueue import meta_text, tag_list, tag_problem
from .errors import PgdrainError
from .models import MAX_DELAY_SECONDS, MAX_TEXT, Status

BATCH = 1000
"""Jobs per statement (and per transaction) of an action."""
LOCK_MS = 200
"""How long one batch's statement waits for a row lock before the batch is tried again."""
STATEMENT_MS = 10_000
"""How long one batch's statement may run."""
ROUNDS = 5
"""Tries of a batch that cannot get its locks before the action stops there."""
_LOCK_NOT_AVAILABLE = "55P03"
_QUERY_CANCELED = "57014"


class InvalidFilter(PgdrainError, ValueError):
    """A filter that cannot select jobs; ``field`` names what is wrong. Nothing was done."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


__all__ = ["ACTIONS", "Acted", "Action", "Counted", "InvalidFilter", "JobFilter", "act",
           "action_named", "count", "job_filter", "tag_problem"]

FILTER_FIELDS = ("status", "job_type", "queue", "tenant", "tags", "meta",
                 "older_than_seconds", "newer_than_seconds")
"""What a bulk action's filter may hold (the API's ``filter``; the CLI's options)."""
STATUSES = tuple(s.value for s in Status)


def job_filter(values: Mapping[str, Any]) -> JobFilter:
    """A filter from ``values`` (FILTER_FIELDS; None or absent matches all), each checked:
    InvalidFilter naming the first that is wrong. ``tags``: jobs with all of them; ``meta``:
    jobs whose meta contains this JSON object."""
    unknown = sorted(set(values) - set(FILTER_FIELDS))
    if unknown:
        raise InvalidFilter(f"unknown; a filter has {', '.join(FILTER_FIELDS)}",
                            field=str(unknown[0])[:60])
    given = {k: v for k, v in values.items() if v is not None}
    status = given.get("status")
    if status is not None and status not in STATUSES:
        raise InvalidFilter(f"is one of {', '.join(STATUSES)}", field="status")
    for name in ("job_type", "queue", "tenant"):
        value = given.get(name)
        if value is not None and (not isinstance(value, str) or not value
                                  or len(value) > MAX_TEXT or "\x00" in value):
            raise InvalidFilter(f"is text of 1 to {MAX_TEXT} characters without NUL",
                                field=name)
    for name in ("older_than_seconds", "newer_than_seconds"):
        value = given.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not 0 <= value <= MAX_DELAY_SECONDS):
            raise InvalidFilter(f"is a number of seconds from 0 to {MAX_DELAY_SECONDS}",
                                field=name)
    if "tags" in given:
        given["tags"] = _filter_tags(given["tags"])
    if "meta" in given:
        given["meta"] = _filter_meta(given["meta"])
    return JobFilter(**given)


def _filter_tags(tags: Any) -> tuple[str, ...] | None:
    def bad(name: str, message: str) -> InvalidFilter:
        return InvalidFilter(message, field=name)

    return tag_list(tags, bad)


def _filter_meta(meta: Any) -> dict[str, Any] | None:
    def bad(name: str, message: str) -> InvalidFilter:
        return InvalidFilter(message, field=name)

    text = meta_text(meta, bad)
    return None if text is None else dict(meta)


def _requeue(conn: Any, ids: Sequence[int]) -> dict[int, str]:
    requeued = set(operator_store.requeue_failed(conn, ids=list(ids)))
    return {i: "requeued" if i in requeued else "not_requeued" for i in ids}


@dataclass(frozen=True)
class Action:
    name: str
    statuses: tuple[str, ...]
    """The statuses it applies to: what ``count`` counts and ``act`` takes."""
    run: Callable[[Any, Sequence[int]], dict[int, str]]
    """It, on some ids: each id's outcome (operator_store's words)."""


ACTIONS: dict[str, Action] = {a.name: a for a in (
    Action("cancel", ("pending", "running", "waiting"), operator_store.cancel),
    Action("requeue", ("failed",), _requeue),
    Action("delete", ("pending", "waiting", "done", "failed", "cancelled"),
           operator_store.delete_jobs),
    Action("run_now", ("pending",), operator_store.run_now),
)}


def action_named(name: str) -> Action:
    """The action ``name``, or ValueError listing them."""
    try:
        return ACTIONS[name]
    except KeyError:
        raise ValueError(f"the action is one of {', '.join(ACTIONS)}, not {name!r}") from None


def applying(action: Action, match: JobFilter) -> JobFilter:
    """``match`` narrowed to the statuses ``action`` applies to."""
    return replace(match, statuses=action.statuses)


@dataclass(frozen=True)
class Counted:
    """What ``count`` found: ``jobs`` (an at-least when not ``complete``: the count ran out
    of time), and ``upto``, the highest job id when it counted (0: no job), to act up to."""

    jobs: int
    complete: bool
    upto: int


@dataclass
class Acted:
    """What ``act`` did: how many jobs each outcome (``cancelled``, ``cancel_requested``,
    ``requeued``, ``deleted``, ...), and ``next_upto``: None when it went through every
    job, else the id to run it again up to (it stopped for time, or for locks it could not
    get: ``stopped``)."""

    outcomes: Counter[str] = field(default_factory=Counter)
    next_upto: int | None = None
    stopped: str | None = None

    @property
    def jobs(self) -> int:
        return sum(self.outcomes.values())


def count(conn: Any, action: Action | str, match: JobFilter, *,
          seconds: float = 2.0) -> Counted:
    """How many jobs ``match`` selects that ``action`` applies to, counted for at most
    ``seconds``, and the highest id counted up to."""
    action = action_named(action) if isinstance(action, str) else action
    _, high = browse.id_range(conn)
    if high is None:
        return Counted(0, True, 0)
    jobs, complete = browse.count_matching(conn, applying(action, match), upto=high,
                                           seconds=seconds)
    return Counted(jobs, complete, high)


def act(conn: Any, action: Action | str, match: JobFilter, *, upto: int, batch: int = BATCH,
        seconds: float | None = None, lock_ms: int = LOCK_MS,
        clock: Callable[[], float] = time.monotonic,
        pause: Callable[[float], None] = time.sleep) -> Acted:
    """Do ``action`` to the jobs ``match`` selects with ids up to ``upto`` (as ``count``
    gave it), ``batch`` at a time, newest first, for at most ``seconds`` (None: until done).

    On a native connection outside a transaction each batch commits on its own, its lock
    waits bounded by ``lock_ms``; inside the caller's transaction (or on a DB-API
    connection) the batches are the caller's to commit, under its own bounds."""
    action = action_named(action) if isinstance(action, str) else action
    if batch < 1:
        raise ValueError("batch must be at least 1")
    session = as_session(conn)
    if action.run in (operator_store.delete_jobs, operator_store.cancel):
        # A job selected as failed and requeued since is pending, one selected as pending and
        # claimed since is running: not what was counted, and left alone.
        allowed = action.statuses if match.status is None else (match.status,)
        action = replace(action, run=partial(action.run, statuses=allowed))
    started, done = clock(), Acted()
    for ids in browse.matching_ids(session, applying(action, match), upto=upto, batch=batch):
        # A batch's statements end within what is left of ``seconds`` (and a second): the
        # caller's time (an invocation's) bounds them, not only STATEMENT_MS.
        left_ms = STATEMENT_MS if seconds is None else \
            int(max(0.0, seconds - (clock() - started)) * 1000) + 1000
        outcomes = _batch(session, action, ids, lock_ms, pause, min(STATEMENT_MS, left_ms))
        if outcomes is None:
            done.next_upto, done.stopped = ids[0], "busy"
            return done
        done.outcomes.update(outcomes.values())
        if seconds is not None and clock() - started >= seconds:
            done.next_upto, done.stopped = ids[-1] - 1, "time"
            return done
    return done


def _batch(session: Any, action: Action, ids: list[int], lock_ms: int,
           pause: Callable[[float], None], statement_ms: int = STATEMENT_MS
           ) -> dict[int, str] | None:
    """One batch: its outcomes, or None when its locks could not be had in ROUNDS tries."""
    if not session.autocommitting():
        return action.run(session, ids)
    for attempt in range(ROUNDS):
        try:
            with session.transaction():
                session.rows("bulk_bounds", lock_ms=lock_ms, statement_ms=statement_ms)
                return action.run(session, ids)
        except Exception as exc:
            # A drain held a row (lock timeout), a lock cycle with one (deadlock), or a
            # requeued job's dedupe key went live meanwhile (unique violation): each batch
            # is all or nothing, so it is simply tried again, a moment later.
            if sqlstate(exc) not in (_LOCK_NOT_AVAILABLE, DEADLOCK_DETECTED,
                                     UNIQUE_VIOLATION):
                raise
            pause(0.05 * (attempt + 1))
    return None
