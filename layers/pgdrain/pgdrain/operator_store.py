"""The operator's statements on jobs, one function each, deciding nothing: requeue failed
jobs, count and purge finished ones, cancel, delete, make pending ones due now (the
``pgdrain`` command, the API's job routes and the library's ``requeue_failed`` and
``cancel``). Each is one statement of the catalogue, or a loop of one in batches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .db import UNIQUE_VIOLATION, Session, as_session, sqlstate
from .sql import schema_in_use
from .store import job_id


def requeue_failed(
    conn: Any,
    *,
    ids: Sequence[int] | None = None,
    job_type: str | None = None,
    queue: str | None = None,
    batch_size: int = 1000,
) -> list[int]:
    """Give failed jobs a fresh set of attempts, due now; returns the requeued ids.

    Filters combine; with none, every failed job is requeued, ``batch_size`` per statement (on
    a connection in autocommit, each batch commits on its own). A failed job whose
    ``dedupe_key`` a live job holds stays failed (``live_job_with_key`` names the holder); of
    failed jobs sharing a free key, only the newest is requeued.
    """
    params = {"ids": None if ids is None else [job_id(i) for i in ids], "job_type": job_type,
              "queue": queue, "limit": batch_size}
    requeued: list[int] = []
    while True:
        batch = _requeue_batch(as_session(conn), params)
        requeued.extend(batch)
        if len(batch) < batch_size:
            return sorted(requeued)


def _requeue_batch(session: Session, params: dict[str, Any]) -> list[int]:
    for attempt in range(_REQUEUE_ROUNDS):
        try:
            return [r["id"] for r in session.rows("job_requeue_failed", **params)]
        except Exception as exc:
            # A concurrent enqueue or requeue made a key live after this statement's snapshot
            # (unique violation): a fresh statement sees it and skips that job. Only on a
            # connection in autocommit: inside the caller's transaction, the error is theirs.
            if (attempt + 1 == _REQUEUE_ROUNDS or sqlstate(exc) != UNIQUE_VIOLATION
                    or not session.autocommitting()):
                raise
    raise AssertionError("unreachable")


_REQUEUE_ROUNDS = 3


def count_purgeable(conn: Any, *, status: str, older_than_seconds: float) -> int:
    """How many ``status`` jobs finished more than ``older_than_seconds`` ago."""
    row = as_session(conn).one("job_count_purgeable", status=status,
                               older_than_seconds=older_than_seconds)
    return int(row["jobs"]) if row else 0


def purge_finished_batch(conn: Any, *, status: str, older_than_seconds: float,
                         limit: int) -> int:
    """Delete up to ``limit`` ``status`` jobs finished more than ``older_than_seconds`` ago."""
    row = as_session(conn).one("job_purge_finished_batch", status=status,
                               older_than_seconds=older_than_seconds, limit=limit)
    return int(row["purged"]) if row else 0


def purge_finished(conn: Any, *, status: str, older_than_seconds: float,
                   batch_size: int = 1000) -> int:
    """Delete ``status`` jobs (done or failed) finished more than ``older_than_seconds`` ago,
    ``batch_size`` per statement, until none is left; how many went."""
    if status not in PURGEABLE_STATUSES:
        raise ValueError(f"only {' and '.join(PURGEABLE_STATUSES)} jobs are purged, "
                         f"not {status!r}")
    purged = 0
    while True:
        batch = purge_finished_batch(conn, status=status,
                                     older_than_seconds=older_than_seconds, limit=batch_size)
        purged += batch
        if batch < batch_size:
            return purged


PURGEABLE_STATUSES = ("done", "failed", "cancelled")


def cancel(conn: Any, ids: Sequence[int], *, statuses: Sequence[str] | None = None
           ) -> dict[int, str]:
    """Cancel jobs by id (see the catalogue's job_cancel): for each id, ``cancelled`` (it was
    pending and will never run), ``cancel_requested`` (it is running: its attempt ends
    cancelled rather than retried), ``already_done``, ``already_failed``,
    ``already_cancelled`` (nothing changed), its status when it is not in ``statuses``
    (None: any; untouched), or ``not_found``."""
    wanted = sorted({job_id(i) for i in ids})
    if not wanted:
        return {}
    found = {r["id"]: r["outcome"] for r in as_session(conn).rows(
        "job_cancel", ids=wanted, statuses=None if statuses is None else list(statuses))}
    return {i: found.get(i, "not_found") for i in wanted}


def delete_jobs(conn: Any, ids: Sequence[int], *, statuses: Sequence[str] | None = None
                ) -> dict[int, str]:
    """Delete jobs by id (job_delete): for each id, ``deleted``, ``running`` (not deleted: its
    drain holds it), another status not in ``statuses`` (None: any), or ``not_found``."""
    wanted = sorted({job_id(i) for i in ids})
    rows = as_session(conn).rows("job_delete", ids=wanted, statuses=None if statuses is None
                                 else list(statuses)) if wanted else []
    return {r["id"]: r["outcome"] for r in rows}


def run_now(conn: Any, ids: Sequence[int]) -> dict[int, str]:
    """Make pending jobs due now (job_run_now): for each id, ``due_now``, ``already_due``, its
    status when it is not pending, or ``not_found``."""
    wanted = sorted({job_id(i) for i in ids})
    rows = as_session(conn).rows("job_run_now", ids=wanted) if wanted else []
    return {r["id"]: r["outcome"] for r in rows}


def count_failed(conn: Any, *, job_type: str | None = None, queue: str | None = None
                 ) -> dict[str, Any]:
    """``{"failed", "type_known", "queue_known"}``: failed jobs matching the filters, and
    whether the type and the queue named exist at all (job_count_failed)."""
    row = as_session(conn).one("job_count_failed", job_type=job_type, queue=queue)
    assert row is not None
    return row


GRANT_PARTS = ("app", "enqueue", "drain")
"""Whose privileges ``grants_needed`` lists: both functions on one role, or one function's."""


def grants_needed(conn: Any, role: str, part: str = "app") -> list[str]:
    """The GRANT statements ``role`` needs to run ``part`` (grants_needed), its name quoted."""
    if part not in GRANT_PARTS:
        raise ValueError(f"grants are for one of {', '.join(GRANT_PARTS)}, not {part!r}")
    in_schema = schema_in_use() is not None
    return [r["statement"] for r in as_session(conn).rows("grants_needed", role=role,
                                                          part=part, in_schema=in_schema)]


def grant(conn: Any, statements: Sequence[str]) -> None:
    """Run ``statements`` (from grants_needed) in one transaction: all of them, or none."""
    session = as_session(conn)
    with session.transaction():
        for statement in statements:
            session.run_script(statement)
