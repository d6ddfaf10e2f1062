"""The store: one function per statement of the query catalogue, on a connection the caller
passes in (a pg8000 native connection, a DB-API connection, or a ``Session``).

Typed values in, typed rows out; no policy (what a failure means is ``policy``'s), no registry
(which job types exist is the caller's business). Every finishing write goes through
``finish_many``, guarded by the claim (status ``running`` and the claim's lease token), and
reports the writes that were stale.
"""

from __future__ import annotations

import contextlib
import json
import weakref
from collections.abc import Sequence
from typing import Any

from .claimed import claimed_job, claimed_jobs_from_document, decode_json
from .db import Session, as_session
from .errors import InvalidJobId
from .flow_values import ControlledClaim as ControlledClaim  # drain.py's name for it
from .flow_values import Rate
from .models import (
    MAX_ERROR_CHARS,
    MAX_JOB_ID,
    Backlog,
    ExpiredLease,
    Finish,
    Job,
    NewJob,
    Outcome,
    QueueBacklog,
    QueueBacklogs,
    QueueStats,
    TableHealth,
    Written,
)

# Lock ids for pg_advisory_xact_lock; arbitrary but fixed ("pgdrain" in ASCII, then a number).
JANITOR_LOCK_KEY = 0x70676472_61696E01
MIGRATION_LOCK_KEY = 0x70676472_61696E02
# The Backlog metric counts due jobs up to this many: enough for an alarm, and a bounded read.
BACKLOG_CAP = 10_000


# --- enqueue ------------------------------------------------------------------------------------


def insert_jobs(conn: Any, rows: Sequence[NewJob]) -> list[dict[str, Any]]:
    """Insert ``rows`` in the given order, skipping any whose dedupe key a live job (or an
    earlier row) holds: ``{"id", "dedupe_key", "due"}`` per inserted row, in no set order."""
    if not rows:
        return []
    params = {
        "job_types": [j.job_type for j in rows],
        "payloads": [j.payload_json for j in rows],
        "queues": [j.queue for j in rows],
        "priorities": [j.priority for j in rows],
        "max_attempts": [j.max_attempts for j in rows],
        "run_ats": [j.run_at for j in rows],
        "delays": [j.delay_seconds for j in rows],
        "expires_ats": [j.expires_at for j in rows],
        "ttls": [j.ttl_seconds for j in rows],
        # None when unused: unnest pads a missing array with NULLs, and 100 NULLs need not
        # be sent and parsed for every batch.
        "ordering_keys": [j.ordering_key for j in rows] if any(j.ordering_key for j in rows)
        else None,
        "tenants": [j.tenant for j in rows] if any(j.tenant for j in rows) else None,
        "tags": [j.tags and ",".join(j.tags) for j in rows] if any(j.tags for j in rows)
        else None,  # a tag holds no comma (models.TAG_PATTERN)
        "metas": [j.meta_json for j in rows] if any(j.meta_json for j in rows) else None,
        "trace_contexts": [j.trace_context for j in rows]
        if any(j.trace_context for j in rows) else None,
    }
    session = as_session(conn)
    if any(j.dedupe_key is not None for j in rows):
        return session.rows("job_enqueue_batch", **params,
                            dedupe_keys=[j.dedupe_key for j in rows])
    # No dedupe key in the batch: no conflict to skip (see the catalogue).
    return session.rows("job_enqueue_batch_unkeyed", **params, dedupe_keys=None)


def mark_parents(conn: Any, ids: Sequence[int]) -> dict[int, tuple[str, str | None]]:
    """Lock the jobs ``ids`` and mark them as parents (job_parents_mark): how each stands,
    its status and (done) its result as JSON text. A missing id does not come back."""
    if not ids:
        return {}
    rows = as_session(conn).rows("job_parents_mark", ids=list(ids))
    return {r["id"]: (r["status"], r["result"]) for r in rows}


def set_dependencies(conn: Any, edges: Sequence[tuple[int, int, str | None, str | None]],
                     starts: Sequence[tuple[int, str, int, str, int | None, str | None]]
                     ) -> None:
    """Write a batch's edges (parent, child, the parent's end if it had one, its result)
    and its children's starts (id, status, parents left, after, cancelled_by, error)."""
    e = list(zip(*edges, strict=True)) or [(), (), (), ()]
    c = list(zip(*starts, strict=True))
    as_session(conn).rows("job_dependencies_set", edge_parents=list(e[0]),
                          edge_children=list(e[1]), edge_statuses=list(e[2]),
                          edge_results=list(e[3]), ids=list(c[0]), statuses=list(c[1]),
                          lefts=list(c[2]), afters=list(c[3]), cancelled_by=list(c[4]),
                          errors=list(c[5]))


def job_parents(conn: Any, ids: Sequence[int]) -> dict[int, dict[int, tuple[str, str | None]]]:
    """The parents of jobs ``ids``: for each child, each parent's end (None: not yet) and
    its result as JSON text."""
    parents: dict[int, dict[int, tuple[str, str | None]]] = {}
    for r in as_session(conn).rows("job_parents", ids=list(ids)):
        parents.setdefault(r["child_id"], {})[r["parent_id"]] = (r["parent_status"],
                                                                 r["parent_result"])
    return parents


def live_ids(conn: Any, keys: set[str | None]) -> dict[str, int]:
    """Ids of the live (pending, running or waiting) jobs holding ``keys``, read by a fresh
    statement (which also sees a holder committed after an earlier statement's snapshot)."""
    rows = as_session(conn).rows("job_get_live_by_dedupe_keys",
                                 dedupe_keys=sorted(k for k in keys if k is not None))
    return {r["dedupe_key"]: r["id"] for r in rows}


def live_job_with_key(conn: Any, dedupe_key: str) -> int | None:
    """The id of the live (pending, running or waiting) job holding ``dedupe_key``, if any."""
    return live_ids(conn, {dedupe_key}).get(dedupe_key)


# --- claim and finish ---------------------------------------------------------------------------


def claim(
    conn: Any,
    *,
    batch_size: int,
    lease_seconds: float,
    queues: Sequence[str] | None = None,
    limited_types: Sequence[str] = (),
    fair: bool = False,
    by_queue: bool = False,
) -> list[Job]:
    """Claim up to ``batch_size`` due jobs for ``lease_seconds``, in (priority, run_at, id) order.

    One statement, committed at once (run it outside a transaction): the jobs are ``running``,
    their attempt spent, and each carries the ``lease_token`` its finishing write must present.
    A job whose claim was lost before comes alone (see the catalogue). Payloads are decoded
    job by job: one Python cannot hold has ``payload_error`` set instead. Jobs of
    ``limited_types`` (rate-limited: ``claim_controlled`` takes them) and of capped or
    rate-limited queues are left alone, and so are an ordering key's later jobs. ``fair``:
    take from each tenant in turn (job_claim_fair); else jobs naming a tenant are left alone.
    ``by_queue``: read queue by queue (job_claim_batch_by_queue), the faster claim beside a
    paused, capped or rate-limited queue's backlog; the same jobs either way.
    """
    session = as_session(conn)
    params = {"batch_size": batch_size, "lease_seconds": lease_seconds,
              "queues": list(queues) if queues else None,
              "limited_types": list(limited_types) or None}
    if fair:
        rows = session.rows("job_claim_fair", **params,
                            after_tenant=_fair_after(session.conn))
        # Where the next fair claim on this connection starts: after the last tenant this
        # one served (the statement says, in the database's order of names), or at the first.
        _remember_fair_after(session.conn, rows[0]["fair_after"] if rows else None)
        for row in rows:
            del row["fair_after"]
        return [claimed_job(row) for row in rows]
    if by_queue:
        [[document]] = session.values("job_claim_batch_by_queue", **params)
    else:
        [[document]] = session.values("job_claim_batch", **params)
    return claimed_jobs_from_document(document)


# Per connection, the last tenant a fair claim served: the next starts after it, and so every
# tenant is served within a lap of claims (job_claim_fair). Only where to start: a cursor
# left by another database's claims is as good as any other. Weak: it goes with its
# connection.
_FAIR_AFTER: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


def _fair_after(conn: Any) -> str | None:
    try:
        return _FAIR_AFTER.get(conn)
    except TypeError:  # a driver's connection that takes no weak reference: from the first
        return None


def _remember_fair_after(conn: Any, tenant: str | None) -> None:
    with contextlib.suppress(TypeError):  # a driver's connection that takes no weak reference
        _FAIR_AFTER[conn] = tenant


def tenanted(conn: Any) -> bool:
    """Whether pending jobs name tenants (then ``claim(..., fair=True)``)."""
    row = as_session(conn).one("jobs_tenanted")
    return bool(row and row["tenants"])


def claim_alone(conn: Any, *, lease_seconds: float, queues: Sequence[str] | None = None,
                limited_types: Sequence[str] = ()) -> Job | None:
    """Claim alone, its start recorded, a due job that lost a claim before (or None)."""
    row = as_session(conn).one("job_claim_alone", lease_seconds=lease_seconds,
                               queues=list(queues) if queues else None,
                               limited_types=list(limited_types) or None)
    return None if row is None else claimed_job(row)


def finish_many(conn: Any, finishes: Sequence[Finish], *, hooked: Sequence[str] = ()
                ) -> Written:
    """Write how claims ended, in one statement; ``stale`` lists those whose claim was lost.
    A job that ends failed gets its on_failed hook's job, inserted in the same transaction,
    when a drain declared a hook for its type (``declare_hooked_types``) or its type is in
    ``hooked``: whichever process fails it (pgdrain.hooks)."""
    if not finishes:
        return Written()
    waits = [f for f in finishes if f.outcome is Outcome.WAIT]
    if waits:  # waits for signals: their own statement (see the catalogue)
        rows = as_session(conn).rows("job_wait_batch", ids=[f.id for f in waits],
                                     tokens=[f.lease_token for f in waits],
                                     names=[f.signal for f in waits],
                                     timeouts=[f.delay_seconds for f in waits])
        waited = _written([f.id for f in waits], rows)
        if len(waits) == len(finishes):
            return waited
        rest = finish_many(conn, [f for f in finishes if f.outcome is not Outcome.WAIT],
                           hooked=hooked)
        return Written(ids=waited.ids + rest.ids, stale=waited.stale + rest.stale)
    forgotten = [f for f in finishes if f.forget]
    if forgotten:  # done rows not kept: those jobs' rows go (see the catalogue)
        stale = as_session(conn).values("job_complete_forget_batch",
                                        ids=[f.id for f in forgotten],
                                        tokens=[f.lease_token for f in forgotten])
        gone = _written_but([f.id for f in forgotten], {row[0] for row in stale})
        if len(forgotten) == len(finishes):
            return gone
        rest = finish_many(conn, [f for f in finishes if not f.forget], hooked=hooked)
        return Written(ids=gone.ids + rest.ids, stale=gone.stale + rest.stale)
    if all(f.outcome is Outcome.DONE and f.result is None and f.error is None
           for f in finishes):  # the fast path: see the catalogue
        rows = as_session(conn).rows("job_complete_batch", ids=[f.id for f in finishes],
                                     tokens=[f.lease_token for f in finishes])
        return _written([f.id for f in finishes], rows)
    session = as_session(conn)
    params = {"ids": [f.id for f in finishes], "tokens": [f.lease_token for f in finishes],
              "outcomes": [f.outcome.value for f in finishes],
              "delays": [f.delay_seconds for f in finishes],
              "errors": [None if f.error is None else error_text(f.error) for f in finishes],
              "results": [f.result for f in finishes]}
    if not any(f.outcome is Outcome.FAIL for f in finishes):
        return _written([f.id for f in finishes], session.rows("job_finish_batch", **params))

    def write() -> list[dict[str, Any]]:
        rows = session.rows("job_finish_batch", **params)
        insert_hooks(session, [r for r in rows if r["status"] == "failed"], hooked)
        return rows

    # A failure: the statement says whether its type is hooked, and the hook's job must commit
    # with it or neither does, so a batch with a failure (never the common case) costs a
    # transaction even when no hook is declared.
    if session.autocommitting():
        with session.transaction():
            rows = write()
    else:
        rows = write()
    return _written([f.id for f in finishes], rows)


def insert_hooks(conn: Any, failed: Sequence[dict[str, Any]], hooked: Sequence[str] = ()
                 ) -> None:
    """Enqueue the dead-letter hooks of ``failed`` jobs (``id``, ``job_type``, ``queue``,
    ``last_error`` or ``error``, and ``hooked`` as the failing statement read it from
    pgdrain_hooked_types) whose type is hooked there or in ``hooked``; run it in the
    transaction that failed them. No statement when none is (see job_hooks_insert)."""
    rows = [r for r in failed if r.get("hooked") or r["job_type"] in hooked]
    if rows:
        as_session(conn).rows("job_hooks_insert", ids=[r["id"] for r in rows],
                              job_types=[r["job_type"] for r in rows],
                              queues=[r["queue"] for r in rows],
                              errors=[r.get("last_error", r.get("error")) for r in rows])


def declare_hooked_types(conn: Any, job_types: Sequence[str]) -> None:
    """Record the job types that have an on_failed hook in this process's code, so that any
    process that fails their jobs enqueues the hook (a row already there is not written)."""
    if job_types:
        as_session(conn).rows("hooks_declare", job_types=sorted(set(job_types)))


def sync_controls(conn: Any, jobs: Sequence[Job], progress: Sequence[str | None]) -> set[int]:
    """Write running jobs' progress reports (None: none) and return the ids of those asked to
    stop; each guarded by its claim."""
    rows = as_session(conn).rows("job_control_sync", ids=[j.id for j in jobs],
                                 tokens=[j.lease_token for j in jobs], progress=list(progress))
    return {r["id"] for r in rows}


def job_states(conn: Any, ids: Sequence[int]) -> dict[int, str]:
    """The saved state (JSON text) of those of ``ids`` that have one (job_states)."""
    rows = as_session(conn).rows("job_states", ids=list(ids))
    return {r["id"]: r["state"] for r in rows}


def save_checkpoints(conn: Any, jobs: Sequence[Job], states: Sequence[str]) -> set[int]:
    """Save each job's checkpoint (JSON text), guarded by its claim; the ids saved."""
    rows = as_session(conn).rows("job_checkpoint_batch", ids=[j.id for j in jobs],
                                 tokens=[j.lease_token for j in jobs], states=list(states))
    return {r["id"] for r in rows}


def _written(ids: list[int], rows: list[dict[str, Any]]) -> Written:
    changed = {r["id"] for r in rows}
    return Written(ids=tuple(i for i in ids if i in changed),
                   stale=tuple(i for i in ids if i not in changed))


def _written_but(ids: list[int], stale: set[int]) -> Written:
    return Written(ids=tuple(i for i in ids if i not in stale),
                   stale=tuple(i for i in ids if i in stale))


def error_text(error: str) -> str:
    """An error message fit to store: valid UTF-8 without NUL, at most MAX_ERROR_CHARS."""
    error = error.replace("\x00", "\\0").encode("utf-8", "backslashreplace").decode("utf-8")
    return error if len(error) <= MAX_ERROR_CHARS else error[: MAX_ERROR_CHARS - 1] + "…"


def complete(conn: Any, jobs: Sequence[Job]) -> Written:
    """Mark claimed jobs ``done``; ``stale`` lists those whose claim was lost."""
    return finish_many(conn, [Finish.done(j) for j in jobs])


def release(conn: Any, jobs: Sequence[Job]) -> Written:
    """Hand claimed jobs that never started back to ``pending``, refunding their attempt."""
    return finish_many(conn, [Finish.release(j) for j in jobs])


def snooze(conn: Any, job: Job, delay_seconds: float) -> bool:
    """Put a claimed job back to ``pending`` after ``delay_seconds``, refunding its attempt."""
    return bool(finish_many(conn, [Finish.snooze(job, delay_seconds)]).ids)


def retry(conn: Any, job: Job, error: str, delay_seconds: float) -> bool:
    """Put a claimed job back to ``pending`` after ``delay_seconds``; False if stale."""
    return bool(finish_many(conn, [Finish.retry(job, error, delay_seconds)]).ids)


def fail(conn: Any, job: Job, error: str) -> bool:
    """Dead-letter a claimed job with its error; False if the write was stale."""
    return bool(finish_many(conn, [Finish.fail(job, error)]).ids)


# --- the janitor's statements ------------------------------------------------------------------


def try_janitor_lock(session: Session) -> dict[str, bool]:
    """Take the janitor's transaction-scoped lock without waiting (``locked`` False if another
    has it), and say whether a job to claim alone is due (``alone_due``), whether some queue
    is capped or rate-limited (``controlled``), whether some queue is paused, capped or
    rate-limited (``queues_set``), whether pending jobs name tenants (``tenants``) and whether
    a stored schedule entry's tick has come (``schedules_due``)."""
    row = session.one("janitor_try_lock", lock_key=JANITOR_LOCK_KEY)
    assert row is not None
    return {name: bool(value) for name, value in row.items()}


def expired_leases(session: Session, *, limit: int) -> list[ExpiredLease]:
    """Running jobs whose lease ran out, oldest first, locked (SKIP LOCKED)."""
    return [ExpiredLease(**row) for row in session.rows("janitor_select_expired", limit=limit)]


def purge_dead(session: Session, *, retention_seconds: float, limit: int) -> int:
    """Delete up to ``limit`` failed and ``limit`` cancelled jobs older than the retention."""
    row = session.one("job_purge_dead_batch", retention_seconds=retention_seconds, limit=limit)
    return row["purged"] if row else 0


def expire_pending(session: Session, *, limit: int, hooked: Sequence[str] = ()
                   ) -> list[dict[str, Any]]:
    """End up to ``limit`` pending jobs past their ``expires_at``: failed, error ``expired``
    (with their on_failed hook's job when their type is hooked: declared by a drain, or in
    ``hooked``; run it inside a transaction). ``{"id", "job_type", "queue", "hooked"}`` of
    each."""
    expired = session.rows("janitor_expire_batch", limit=limit)
    insert_hooks(session, [{**r, "error": "expired"} for r in expired], hooked)
    return expired


def cancel_requested_pending(session: Session, *, limit: int) -> list[dict[str, Any]]:
    """End up to ``limit`` pending jobs asked to stop cancelled (only plain SQL makes such a
    job pending); ``{"id", "job_type", "queue"}`` of each."""
    return session.rows("janitor_cancel_requested_batch", limit=limit)


def purge_done(session: Session, *, retention_seconds: float, limit: int) -> int:
    """Delete up to ``limit`` done jobs older than the retention; how many went."""
    row = session.one("job_purge_done_batch", retention_seconds=retention_seconds, limit=limit)
    return row["purged"] if row else 0


def vacuum_due(session: Session, *, dead_tuples: int, interval_seconds: float) -> bool:
    """Whether enough dead row versions piled up to vacuum, for a role that may."""
    row = session.one("jobs_vacuum_due", dead_tuples=dead_tuples,
                      interval_seconds=interval_seconds)
    return bool(row and row["due"])


def vacuum(session: Session) -> None:
    """``VACUUM (SKIP_LOCKED) jobs``; outside any transaction."""
    session.rows("jobs_vacuum")


# --- operators' reads and writes ---------------------------------------------------------------


def job_id(value: Any) -> int:
    """``value`` (an int, or a string of ASCII digits) as a job id, or InvalidJobId."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_JOB_ID:
        return int(value)  # an IntEnum too, as a plain int
    raise InvalidJobId(f"a job id is an integer from 1 to {MAX_JOB_ID}, not {_shown(value)}")


def _shown(value: Any) -> str:
    # repr() of an int past 4,300 digits raises ValueError; a long string is cut short.
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def get_job(conn: Any, ident: int) -> dict[str, Any] | None:
    """One job with its status, lease and error history, or None.

    ``payload`` and ``errors`` are decoded; one that Python cannot hold (plain SQL may store
    a 5,000-digit number) is None, with ``payload_error`` / ``errors_error`` saying why.
    """
    row = as_session(conn).one("job_get", id=job_id(ident))
    if row is None:
        return None
    for column in ("payload", "errors", "result", "progress", "state", "wait_result", "meta",
                   "trace_context"):
        row[column], problem = decode_json(row[column])
        if problem:
            row[f"{column}_error"] = problem
    row["parents"] = json.loads(row["parents"] or "[]")
    row["children"] = json.loads(row["children"] or "[]")
    return row


def backlog(conn: Any, *, cap: int = BACKLOG_CAP) -> Backlog:
    """Due pending jobs (counted up to ``cap``) and the age of the oldest, through the claim's
    index: a bounded read whatever the size of the finished history."""
    row = as_session(conn).one("job_backlog", cap=cap, queues=None)
    assert row is not None
    return Backlog(due=row["due"], oldest_due_seconds=row["oldest_due_seconds"],
                   queues_paused=row["queues_paused"])


BACKLOG_PAIRS = 100
"""The (queue, priority) pairs of pending jobs ``backlog_by_queue`` reads at most, in name
order: with the cap, at most a million index entries once per invocation, and that only
when a hundred pairs each hold 10,000 due jobs."""


def backlog_by_queue(conn: Any, *, cap: int = BACKLOG_CAP, most_pairs: int = BACKLOG_PAIRS
                     ) -> QueueBacklogs:
    """Per queue with due jobs: how many (up to ``cap``), the oldest one's wait, whether the
    queue is paused; the oldest waits first (job_backlog_by_queue: bounded index reads)."""
    row = as_session(conn).one("job_backlog_by_queue", cap=cap, most_pairs=most_pairs,
                               queues=None)
    assert row is not None
    queues = row["queues"]
    if isinstance(queues, str):  # a DB-API connection may leave json as text
        queues = decode_json(queues)[0]
    return QueueBacklogs(
        queues=tuple(QueueBacklog(queue=q["queue"], due=int(q["due"]),
                                  oldest_due_seconds=float(q["oldest_due_seconds"]),
                                  paused=bool(q["paused"])) for q in queues),
        queues_paused=row["queues_paused"])


def table_health(conn: Any) -> TableHealth:
    """The jobs table's size, dead rows and last vacuum (see the catalogue)."""
    row = as_session(conn).one("jobs_table_health")
    assert row is not None
    return TableHealth(**row)


def stats(conn: Any) -> QueueStats:
    """Counts by queue and status, and how long the oldest due pending job has waited (a scan
    of the whole table: for operators, not for every drain)."""
    session = as_session(conn)
    counts: dict[str, dict[str, int]] = {}
    for row in session.rows("job_stats_by_status"):
        counts.setdefault(row["queue"], {})[row["status"]] = row["jobs"]
    lag = session.one("job_oldest_due_age", queues=None)
    assert lag is not None
    return QueueStats(counts=counts, due=lag["due"], oldest_due_seconds=lag["oldest_due_seconds"])


def overview(conn: Any) -> list[dict[str, Any]]:
    """Per queue and job type: due, scheduled, running and failed jobs, the oldest due job's
    wait, and what finished in the last minute and hour (see the catalogue)."""
    return as_session(conn).rows("job_overview_by_queue_type", queues=None)


def list_jobs(conn: Any, *, status: str | None = None, job_type: str | None = None,
              queue: str | None = None, since_seconds: float | None = None,
              waiting_for: str | None = None, limit: int = 50, tags: Sequence[str] | None = None,
              meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The newest ``limit`` jobs matching the filters (None matches all), newest first;
    ``waiting_for``: the jobs waiting for their ``parents`` or for a ``signal``; ``tags``: all
    of them; ``meta``: contained in the job's."""
    return as_session(conn).rows("job_list", status=status, job_type=job_type, queue=queue,
                                 since_seconds=since_seconds, waiting_for=waiting_for,
                                 limit=limit, tags=None if tags is None else list(tags),
                                 meta=None if meta is None else json.dumps(meta))


# --- queues set at run time (see pgdrain.control) -------------------------------------------


def queue_known(conn: Any, queue: str) -> bool:
    """Whether ``queue`` was set before or a job names it (may read the whole table)."""
    return bool(as_session(conn).rows("queue_known", queue=queue)[0]["known"])


def pause_queue(conn: Any, queue: str) -> dict[str, Any]:
    """Pause ``queue``: ``{"queue", "paused_at"}`` (the first pause's time when it was paused
    already)."""
    row = as_session(conn).one("queue_pause", queue=queue)
    assert row is not None
    return row


def set_queue(conn: Any, queue: str, *, set_cap: bool = False, max_running: int | None = None,
              set_rate: bool = False, rate: Rate | None = None) -> dict[str, Any]:
    """Set ``queue``'s concurrency cap (if ``set_cap``; None: none) and rate limit (if
    ``set_rate``; None: none): ``{"queue", "paused_at", "max_running", "rate"}``."""
    row = as_session(conn).one(
        "queue_set", queue=queue, set_cap=set_cap, max_running=max_running, set_rate=set_rate,
        rate_limit=None if rate is None else rate.limit,
        rate_period=None if rate is None else rate.period)
    assert row is not None
    return queue_rate(row)


def queue_rate(row: dict[str, Any]) -> dict[str, Any]:
    """A queue's row with its ``rate_limit`` and ``rate_period`` as one ``rate`` (``"10/s"``, or
    None)."""
    limit, period = row.pop("rate_limit"), row.pop("rate_period")
    row["rate"] = None if limit is None else str(Rate(limit, period))
    return row


def resume_queue(conn: Any, queue: str) -> None:
    """Resume ``queue`` (nothing to do for a queue never set)."""
    as_session(conn).rows("queue_resume", queue=queue)


def queue_states(conn: Any) -> list[dict[str, Any]]:
    """Every queue set at run time: ``queue``, ``paused_at``, ``paused_seconds``,
    ``max_running``, ``rate`` (``"10/s"``, or None)."""
    return [queue_rate(r) for r in as_session(conn).rows("queue_states")]


# --- drain slots and the backlog -----------------------------------------------------------

DRAIN_SLOT_LOCK_KEY = 0x70676472
"""The first advisory-lock key of the drains' slots ("pgdr"); the second is the slot."""


def take_drain_slot(conn: Any, slots: int, *, idle_ms: int = 0) -> int | None:
    """Hold one of ``slots`` drain slots for this session; None when all are taken. With
    ``idle_ms``, the server ends the session if it idles that long while holding it."""
    row = as_session(conn).one("drain_slot_take", slots=slots, lock_key=DRAIN_SLOT_LOCK_KEY,
                               idle_ms=idle_ms)
    return None if row is None else int(row["slot"])


def give_back_drain_slot(conn: Any, slot: int) -> None:
    as_session(conn).one("drain_slot_give_back", lock_key=DRAIN_SLOT_LOCK_KEY, slot=slot)


def reserve_drain_launches(conn: Any, wanted: int, slots: int, *, lapse_seconds: float
                           ) -> int:
    """Reserve room for up to ``wanted`` drains about to be launched, within ``slots`` minus
    the slots taken minus the launches on their way; how many to launch. Each reservation
    lapses after ``lapse_seconds`` unless a drain's start (take_drain_slot) takes it first."""
    row = as_session(conn).one("drain_slot_reserve", wanted=wanted, slots=slots,
                               lock_key=DRAIN_SLOT_LOCK_KEY, seconds=lapse_seconds)
    return 0 if row is None else int(row["reserved"])


def unreserve_drain_launches(conn: Any, count: int) -> int:
    """Take ``count`` reservations of launches that did not happen off; how many are left."""
    row = as_session(conn).one("drain_slot_unreserve", count=count)
    return 0 if row is None else int(row["on_its_way"])


def running_jobs(conn: Any, *, limit: int) -> list[dict[str, Any]]:
    """The running jobs that have run longest, at most ``limit`` (job_running_list)."""
    return as_session(conn).rows("job_running_list", limit=limit)


def drain_slots_held(conn: Any) -> list[dict[str, Any]]:
    """The drain slots taken now: ``slot``, ``pid``, ``connected_seconds``, ``state``,
    ``state_seconds``, ``application_name`` of the session holding each."""
    return as_session(conn).rows("drain_slots_held", lock_key=DRAIN_SLOT_LOCK_KEY)


def drains_running(conn: Any) -> int:
    """How many drains hold a slot in this database now."""
    return int(as_session(conn).rows("drain_slots_taken",
                                     lock_key=DRAIN_SLOT_LOCK_KEY)[0]["taken"])


def due_count(conn: Any, *, limit: int, queues: Sequence[str] | None = None,
              limited_types: Sequence[str] = (), by_queue: bool = False) -> tuple[int, bool]:
    """Due jobs the plain and lone claims could take, counted up to ``limit`` (an index scan
    of at most that many entries; not those of capped or rate-limited queues and of
    ``limited_types``: ``controlled_due`` counts those), and whether some queue is capped or
    rate-limited. ``by_queue``: counted queue by queue, as ``claim(by_queue=True)`` reads."""
    params = {"limit": limit, "queues": list(queues) if queues else None,
              "limited_types": list(limited_types) or None}
    session = as_session(conn)
    row = session.rows("jobs_due_count_by_queue", **params)[0] if by_queue else \
        session.rows("jobs_due_count", **params)[0]
    return int(row["due"]), bool(row["controlled"])


# --- the doorbell's shared state (see pgdrain.aws.doorbell) ---------------------------------


def doorbell_state(conn: Any, *, window_seconds: float) -> tuple[int, bool]:
    """(drains holding a slot now, whether a ring younger than the window is on its way)."""
    row = as_session(conn).rows("doorbell_state", lock_key=DRAIN_SLOT_LOCK_KEY,
                                window_seconds=window_seconds)[0]
    return int(row["drains"]), bool(row["ring_on_its_way"])


def doorbell_rung(conn: Any) -> None:
    """A ring is about to invoke the drain: rings until a drain answers it may be skipped."""
    as_session(conn).rows("doorbell_rung")


def drain_started(conn: Any) -> None:
    """A drain is about to try for a slot: every ring before now has been answered."""
    as_session(conn).rows("doorbell_drain_started")
