"""Queue operations: one named query each, on a connection the caller passes in.

Enqueueing works on the caller's connection and inside the caller's transaction, so an
application inserts its row and its job atomically. Claim, finish, release and the janitor are
the drain's operations; every finishing write is guarded by the claim (status ``running`` and
the claim's lease token) and reports writes that were stale.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .db import DEADLOCK_DETECTED, UNIQUE_VIOLATION, Session, array_literal, as_session, sqlstate
from .errors import MAX_DELAY_SECONDS, DedupeContention, InvalidJobError, InvalidJobId
from .models import Backlog, EnqueueResult, JanitorResult, Job, QueueStats, Written
from .policy import Backoff, Fail, Refund, Retry, after_failure, after_lost_lease
from .registry import REGISTRY
from .settings import Settings

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 3
MAX_TEXT = 200
MAX_DEDUPE_KEY = 500
MAX_ERROR_CHARS = 4000
SMALLINT = (-32768, 32767)
MAX_INT = 2**31 - 1
# Lock ids for pg_advisory_xact_lock; arbitrary but fixed ("pgdrain" in ASCII, then a number).
JANITOR_LOCK_KEY = 0x70676472_61696E01
MIGRATION_LOCK_KEY = 0x70676472_61696E02

MAX_JOB_ID = 2**63 - 1
# The Backlog metric counts due jobs up to this many: enough for an alarm, and a bounded read.
BACKLOG_CAP = 10_000

_JOB_FIELDS = frozenset({"job_type", "payload", "queue", "priority", "max_attempts", "run_at",
                         "delay_seconds", "dedupe_key"})
# A JSON-escaped NUL that is not itself an escaped backslash followed by "u0000".
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


@dataclass(frozen=True, slots=True)
class NewJob:
    """A validated job to insert. Build it with ``new_job()``, which checks every field."""

    job_type: str
    payload_json: str
    queue: str
    priority: int
    max_attempts: int
    run_at: datetime | None
    delay_seconds: float
    dedupe_key: str | None


def new_job(
    job_type: Any,
    payload: Any = None,
    *,
    queue: Any = DEFAULT_QUEUE,
    priority: Any = 0,
    max_attempts: Any = DEFAULT_MAX_ATTEMPTS,
    run_at: Any = None,
    delay_seconds: Any = None,
    dedupe_key: Any = None,
    index: int | None = None,
) -> NewJob:
    """Validate one job's fields; raise InvalidJobError naming the field that is wrong."""

    def bad(name: str, message: str) -> InvalidJobError:
        return InvalidJobError(message, field=name, index=index)

    def text(name: str, value: Any, limit: int) -> str:
        if not isinstance(value, str) or not value.strip():
            raise bad(name, "must be a non-empty string")
        if len(value) > limit:
            raise bad(name, f"must be at most {limit} characters")
        if "\x00" in value:
            raise bad(name, "must not contain NUL characters")
        if not _is_utf8(value):
            raise bad(name, "must be valid Unicode (it holds a lone surrogate)")
        return value

    def integer(name: str, value: Any, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad(name, "must be an integer")
        if not low <= value <= high:
            raise bad(name, f"must be between {low} and {high}")
        return value

    job_type = text("job_type", job_type, MAX_TEXT)
    try:
        payload_json = json.dumps({} if payload is None else payload, allow_nan=False,
                                  separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise bad("payload", f"must be JSON-serialisable ({exc})") from None
    if _JSON_NUL.search(payload_json):
        raise bad("payload", "must not contain NUL characters (PostgreSQL jsonb rejects them)")
    if "\\ud" in payload_json and not _is_utf8(json.dumps(payload, ensure_ascii=False)):
        raise bad("payload", "must be valid Unicode (it holds a lone surrogate)")
    queue = text("queue", queue, MAX_TEXT)
    priority = integer("priority", priority, *SMALLINT)
    max_attempts = integer("max_attempts", max_attempts, 1, MAX_INT)
    if run_at is not None and delay_seconds is not None:
        raise bad("run_at", "give run_at or delay_seconds, not both")
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise bad("run_at", "must be a datetime")
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise bad("run_at", "must carry a timezone (a naive time is ambiguous)")
        try:
            run_at.astimezone(UTC)
        except OverflowError:
            raise bad("run_at", "is out of range (years 1 to 9999 in UTC)") from None
    delay = 0.0
    if delay_seconds is not None:
        if isinstance(delay_seconds, bool) or not isinstance(delay_seconds, int | float):
            raise bad("delay_seconds", "must be a number")
        # Compared before any float(): an int of 400 digits does not fit in one.
        if not (0 <= delay_seconds <= MAX_DELAY_SECONDS):  # NaN fails this too
            raise bad("delay_seconds", f"must be between 0 and {MAX_DELAY_SECONDS} (ten years)")
        delay = float(delay_seconds)
    if dedupe_key is not None:
        dedupe_key = text("dedupe_key", dedupe_key, MAX_DEDUPE_KEY)
    return NewJob(job_type, payload_json, queue, priority, max_attempts, run_at, delay,
                  dedupe_key)


def enqueue(conn: Any, job_type: str, payload: Any = None, **options: Any) -> EnqueueResult:
    """Insert one job on ``conn`` (inside its open transaction, if any) and return its id.

    Options: ``queue``, ``priority`` (lower runs first), ``max_attempts``, ``run_at`` (an aware
    datetime) or ``delay_seconds``, ``dedupe_key``. If a live (pending or running) job holds
    the same ``dedupe_key``, nothing is inserted and its id comes back with ``created=False``.
    Raises InvalidJobError, inserting nothing, when a field is invalid.
    """
    return enqueue_many(conn, [{"job_type": job_type, "payload": payload, **options}])[0]


def enqueue_many(conn: Any, jobs: Iterable[Mapping[str, Any] | NewJob]) -> list[EnqueueResult]:
    """Insert a batch of jobs in one statement; results are in input order.

    Every job is validated first: one invalid job raises InvalidJobError (with its index) and
    nothing is inserted. Jobs are dicts with ``new_job``'s fields, or ``NewJob`` values.
    """
    batch = [_validated(job, i) for i, job in enumerate(jobs)]
    if not batch:
        return []
    session = as_session(conn)
    for attempt in range(_DEADLOCK_ROUNDS):
        try:
            return _enqueue_validated(session, batch)
        except Exception as exc:
            # Inserts take their dedupe keys in one fixed order, so two pgdrain batches cannot
            # deadlock each other; a deadlock with the application's own transactions can
            # still happen. Retried where nothing else was lost with the statement: on a
            # connection in autocommit. Inside a transaction, the error is the caller's.
            if (attempt + 1 == _DEADLOCK_ROUNDS or sqlstate(exc) != DEADLOCK_DETECTED
                    or not session.autocommitting()):
                raise
    raise AssertionError("unreachable")


# A deadlock is retried once in autocommit: the server already chose this statement to fail.
_DEADLOCK_ROUNDS = 2


def enqueue_atomically(session: Session, jobs: Iterable[Mapping[str, Any] | NewJob]
                       ) -> list[EnqueueResult]:
    """``enqueue_many`` on a connection pgdrain owns, all-or-nothing.

    A batch without dedupe keys is one statement. With keys it is a transaction (the lookup
    of live duplicates, and the re-insert of a holder that finished meanwhile, commit with the
    insert), run again from the start if the server breaks a deadlock by failing it.
    """
    batch = [_validated(job, i) for i, job in enumerate(jobs)]
    if not any(job.dedupe_key for job in batch):
        return enqueue_many(session, batch)
    for attempt in range(_DEADLOCK_ROUNDS + 1):
        try:
            with session.transaction():
                return _enqueue_validated(session, batch)
        except Exception as exc:
            if attempt == _DEADLOCK_ROUNDS or sqlstate(exc) != DEADLOCK_DETECTED:
                raise
    raise AssertionError("unreachable")


def _enqueue_validated(session: Session, batch: list[NewJob]) -> list[EnqueueResult]:
    results = _insert(session, batch)
    # Items skipped because a live job held their dedupe_key get that job's id. A holder can
    # finish between the insert and the lookup: its key is free again, so insert those anew.
    for _ in range(_DEDUPE_ROUNDS):
        waiting = [i for i, r in enumerate(results) if r is None]
        if not waiting:
            return results  # type: ignore[return-value]
        holders = _live_ids(session, {batch[i].dedupe_key for i in waiting})
        freed = []
        for i in waiting:
            holder = holders.get(batch[i].dedupe_key)
            if holder is None:
                freed.append(i)
            else:
                results[i] = EnqueueResult(holder, False)
        for i, result in zip(freed, _insert(session, [batch[i] for i in freed]), strict=True):
            results[i] = result
    if None not in results:
        return results  # type: ignore[return-value]
    raise DedupeContention(
        "the jobs holding these dedupe keys kept finishing and being replaced while this "
        "enqueue ran; retry it")


# Lookups and re-inserts for a batch's duplicate keys before giving up (each round needs a
# holder to finish in the instant between two statements; a second round is already rare).
_DEDUPE_ROUNDS = 5


def _insertion_order(batch: list[NewJob]) -> list[int]:
    """The order to insert ``batch`` in: jobs without a dedupe key first, as given, then the
    keyed ones by (length, key).

    Two transactions inserting the same keys in opposite orders each wait for the other's
    uncommitted key: a deadlock. One fixed order for every batch makes that impossible
    between pgdrain's own inserts. Length first keeps the ``<key>:0``, ``<key>:1``, ...,
    ``<key>:10`` keys of an Idempotency-Key batch in their given order.
    """
    def key(i: int) -> tuple[int, int, str, int]:
        dedupe_key = batch[i].dedupe_key
        if dedupe_key is None:
            return (0, 0, "", i)
        return (1, len(dedupe_key), dedupe_key, i)

    return sorted(range(len(batch)), key=key)


def _insert(session: Session, batch: list[NewJob]) -> list[EnqueueResult | None]:
    """Insert ``batch`` in one statement: a result per item, None where a live job held its
    dedupe key (or an earlier item of the batch took it)."""
    if not batch:
        return []
    order = _insertion_order(batch)
    rows = [batch[i] for i in order]
    inserted = session.rows(
        "job_enqueue_batch",
        job_types=[j.job_type for j in rows],
        payloads=[j.payload_json for j in rows],
        queues=[j.queue for j in rows],
        priorities=[j.priority for j in rows],
        max_attempts=[j.max_attempts for j in rows],
        run_ats=[j.run_at for j in rows],
        delays=[j.delay_seconds for j in rows],
        dedupe_keys=[j.dedupe_key for j in rows],
    )
    # Identity values are drawn in insertion order (ORDER BY ord), so the inserted rows sorted
    # by id line up with the rows, in insertion order, that were not duplicates.
    fresh = iter(sorted(inserted, key=lambda r: r["id"]))
    pending_row = next(fresh, None)
    results: list[EnqueueResult | None] = [None] * len(batch)
    for i in order:
        if pending_row is not None and pending_row["dedupe_key"] == batch[i].dedupe_key:
            results[i] = EnqueueResult(pending_row["id"], True, pending_row["due"])
            pending_row = next(fresh, None)
    return results


def _validated(job: Mapping[str, Any] | NewJob, index: int) -> NewJob:
    if isinstance(job, NewJob):
        return job
    if not isinstance(job, Mapping):
        raise InvalidJobError("must be an object with job_type and payload", index=index)
    unknown = sorted(set(job) - _JOB_FIELDS)
    if unknown:
        raise InvalidJobError(f"unknown field(s): {', '.join(unknown)}", index=index)
    if "job_type" not in job:
        raise InvalidJobError("is required", field="job_type", index=index)
    # A handler registered in this process may declare its type's max_attempts and payload
    # model: enqueueing from application code applies them as the enqueue function does.
    handler = REGISTRY.get(job["job_type"]) if isinstance(job["job_type"], str) else None
    if job.get("max_attempts") is None:
        default = handler.max_attempts if handler and handler.max_attempts else None
        job = {**job, "max_attempts": default or DEFAULT_MAX_ATTEMPTS}
    if handler is not None and handler.payload_model is not None:
        from .payload import dump, parse

        payload = job.get("payload")
        if not isinstance(payload, handler.payload_model):
            payload = parse(handler.payload_model, {} if payload is None else payload,
                            index=index)
        job = {**job, "payload": dump(payload)}
    return new_job(**job, index=index)


def _live_ids(session: Session, keys: set[str | None]) -> dict[str, int]:
    """Ids of the live (pending or running) jobs holding ``keys``, read by a fresh statement.

    A fresh statement also sees a holder that a transaction committed after the insert's
    snapshot was taken, which that insert waited for and then skipped.
    """
    rows = session.rows("job_get_live_by_dedupe_keys",
                        dedupe_keys=sorted(k for k in keys if k is not None))
    return {r["dedupe_key"]: r["id"] for r in rows}


def claim(
    conn: Any,
    *,
    batch_size: int,
    lease_seconds: float,
    queues: Sequence[str] | None = None,
) -> list[Job]:
    """Claim up to ``batch_size`` due jobs for ``lease_seconds``, in (priority, run_at, id) order.

    One statement, committed at once (run it outside a transaction): the jobs are ``running``,
    their attempt spent, and each carries the ``lease_token`` its finishing write must present.
    """
    rows = as_session(conn).rows(
        "job_claim_batch", batch_size=batch_size, lease_seconds=lease_seconds,
        queues=list(queues) if queues else None,
    )
    return [_claimed_job(row) for row in rows]


def _claimed_job(row: dict[str, Any]) -> Job:
    # Decoded here, one job at a time: a payload that cannot be decoded is that job's problem.
    payload, row["payload_error"] = decode_json(row["payload"])
    row["payload"] = payload
    return Job(**row)


def decode_json(text: str | None) -> tuple[Any, str | None]:
    """A JSON column read as text, decoded: ``(value, None)``, or ``(None, why)`` when
    Python cannot hold it (PostgreSQL's jsonb accepts numbers of any size and any depth)."""
    if text is None:
        return None, None
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "the stored JSON is nested too deeply to decode"
    except MemoryError:
        return None, (f"the stored JSON ({len(text):,} characters) does not fit in this "
                      "process's memory once decoded")
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        return None, f"the stored JSON cannot be decoded: {str(exc)[:200]}"


def _written(asked: Sequence[Job], rows: list[dict[str, Any]]) -> Written:
    done = {r["id"] for r in rows}
    return Written(ids=tuple(j.id for j in asked if j.id in done),
                   stale=tuple(j.id for j in asked if j.id not in done))


def _claims(jobs: Sequence[Job]) -> dict[str, str]:
    return {"ids": array_literal([j.id for j in jobs]),
            "tokens": array_literal([j.lease_token for j in jobs])}


def complete(conn: Any, jobs: Sequence[Job]) -> Written:
    """Mark claimed jobs ``done`` in one statement; ``stale`` lists those whose claim was lost."""
    if not jobs:
        return Written()
    return _written(jobs, as_session(conn).rows("job_complete_batch", **_claims(jobs)))


def release(conn: Any, jobs: Sequence[Job]) -> Written:
    """Hand claimed jobs that never started back to ``pending``, refunding their attempt."""
    if not jobs:
        return Written()
    return _written(jobs, as_session(conn).rows("job_release_batch", **_claims(jobs)))


def snooze(conn: Any, job: Job, delay_seconds: float) -> bool:
    """Put a claimed job back to ``pending`` after ``delay_seconds``, refunding its attempt."""
    return as_session(conn).one("job_snooze", id=job.id, token=job.lease_token,
                                delay_seconds=delay_seconds) is not None


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def error_text(error: str) -> str:
    """An error message fit to store: valid UTF-8 without NUL, at most MAX_ERROR_CHARS."""
    error = error.replace("\x00", "\\0").encode("utf-8", "backslashreplace").decode("utf-8")
    return error if len(error) <= MAX_ERROR_CHARS else error[: MAX_ERROR_CHARS - 1] + "…"


def retry(conn: Any, job: Job, error: str, delay_seconds: float) -> bool:
    """Put a claimed job back to ``pending`` after ``delay_seconds``; False if stale."""
    return as_session(conn).one("job_retry", id=job.id, token=job.lease_token,
                                error=error_text(error), delay_seconds=delay_seconds) is not None


def fail(conn: Any, job: Job, error: str) -> bool:
    """Dead-letter a claimed job with its error; False if the write was stale."""
    return as_session(conn).one("job_fail", id=job.id, token=job.lease_token,
                                error=error_text(error)) is not None


def record_failure(
    conn: Any, job: Job, error: str, backoff: Backoff, *, retryable: bool = True
) -> tuple[str, bool]:
    """Retry or dead-letter a job whose attempt failed, as ``policy.after_failure`` decides.

    Returns the resulting status (``pending`` or ``failed``) and whether the write took effect.
    """
    decision = after_failure(job.attempts, job.max_attempts, backoff, retryable=retryable)
    if isinstance(decision, Fail):
        return "failed", fail(conn, job, error)
    return "pending", retry(conn, job, error, decision.delay_seconds)


def run_janitor(conn: Any, settings: Settings) -> JanitorResult:
    """Reclaim expired leases and purge old ``done`` jobs, in one short transaction.

    Takes a transaction-scoped advisory lock without waiting: if another drain is running the
    janitor, this returns ``ran=False`` at once instead of queueing behind it. An expired job
    goes back to ``pending`` with backoff, or to ``failed`` when it is out of attempts, so a
    job that kills its worker on every attempt cannot loop forever. Needs a connection pgdrain
    owns (pg8000 native), since it commits.
    """
    session = as_session(conn)
    with session.transaction():
        if not session.one("janitor_try_lock", lock_key=JANITOR_LOCK_KEY)["locked"]:
            return JanitorResult(ran=False)
        expired = session.rows("janitor_select_expired", limit=settings.reclaim_batch_size)
        reclaimed = failed = refunded = 0
        if expired:
            decisions = [after_lost_lease(r["attempts"], r["max_attempts"], settings.backoff,
                                          started=r["started"]) for r in expired]
            changed = session.rows(
                "janitor_reclaim_batch",
                ids=[r["id"] for r in expired],
                tokens=[r["lease_token"] for r in expired],
                actions=[_action(d) for d in decisions],
                delays=[d.delay_seconds if isinstance(d, Retry) else 0.0 for d in decisions],
                error=LEASE_EXPIRED_ERROR,
            )
            failed = sum(1 for r in changed if r["action"] == "fail")
            refunded = sum(1 for r in changed if r["action"] == "refund")
            reclaimed = len(changed) - failed
        purged = 0
        for _ in range(settings.purge_max_batches):
            deleted = _purge_batch(session, settings)
            purged += deleted
            if deleted < settings.purge_batch_size:
                break
    return JanitorResult(ran=True, reclaimed=reclaimed, failed=failed, purged=purged,
                         refunded=refunded)


LEASE_EXPIRED_ERROR = ("lease expired: the drain died while running this job (out of memory, "
                       "killed at the function's timeout, or crashed) after recording its start")


def _action(decision: Retry | Fail | Refund) -> str:
    return "refund" if isinstance(decision, Refund) else \
        "fail" if isinstance(decision, Fail) else "retry"


def vacuum_if_due(conn: Any, settings: Settings) -> bool:
    """Vacuum ``jobs`` when dead row versions have piled up; True if a vacuum ran.

    Every claim and finish leaves a dead version of its row and a dead entry at the front of
    the claim's index, and autovacuum wakes only every ``autovacuum_naptime`` (60 s by
    default): at thousands of jobs a second the claim then reads thousands of dead entries
    (docs/benchmarks.md, growth). Run it outside any transaction. A role that may not vacuum
    the table (not its owner, nor granted PostgreSQL 17's MAINTAIN) never finds it due.
    """
    if settings.vacuum_dead_tuples <= 0:
        return False
    session = as_session(conn)
    row = session.one("jobs_vacuum_due", dead_tuples=settings.vacuum_dead_tuples,
                      interval_seconds=settings.vacuum_interval_seconds)
    if not (row and row["due"]):
        return False
    session.rows("jobs_vacuum")
    return True


def _purge_batch(session: Session, settings: Settings) -> int:
    row = session.one("job_purge_done_batch", retention_seconds=settings.retention_seconds,
                      limit=settings.purge_batch_size)
    return row["purged"] if row else 0


def requeue_failed(
    conn: Any,
    *,
    ids: Sequence[int] | None = None,
    job_type: str | None = None,
    queue: str | None = None,
) -> list[int]:
    """Give failed jobs a fresh set of attempts, due now; returns the requeued ids.

    Filters combine; with none, every failed job is requeued. A failed job whose
    ``dedupe_key`` a live job holds stays failed (``live_job_with_key`` names the holder); of
    failed jobs sharing a free key, only the newest is requeued.
    """
    session = as_session(conn)
    params = {"ids": None if ids is None else [job_id(i) for i in ids], "job_type": job_type,
              "queue": queue}
    for attempt in range(_REQUEUE_ROUNDS):
        try:
            rows = session.rows("job_requeue_failed", **params)
            return sorted(r["id"] for r in rows)
        except Exception as exc:
            # A concurrent enqueue or requeue made a key live after this statement's snapshot
            # (unique violation): a fresh statement sees it and skips that job. Only on a
            # connection in autocommit: inside the caller's transaction, the error is theirs.
            if (attempt + 1 == _REQUEUE_ROUNDS or sqlstate(exc) != UNIQUE_VIOLATION
                    or not session.autocommitting()):
                raise
    raise AssertionError("unreachable")


_REQUEUE_ROUNDS = 3


def live_job_with_key(conn: Any, dedupe_key: str) -> int | None:
    """The id of the live (pending or running) job holding ``dedupe_key``, if any."""
    return _live_ids(as_session(conn), {dedupe_key}).get(dedupe_key)


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
    for column in ("payload", "errors"):
        row[column], problem = decode_json(row[column])
        if problem:
            row[f"{column}_error"] = problem
    return row


def backlog(conn: Any, *, cap: int = BACKLOG_CAP) -> Backlog:
    """Due pending jobs (counted up to ``cap``) and the age of the oldest, through the claim's
    index: a bounded read whatever the size of the finished history."""
    row = as_session(conn).one("job_backlog", cap=cap)
    return Backlog(due=row["due"], oldest_due_seconds=row["oldest_due_seconds"])


def stats(conn: Any) -> QueueStats:
    """Counts by queue and status, and how long the oldest due pending job has waited."""
    session = as_session(conn)
    counts: dict[str, dict[str, int]] = {}
    for row in session.rows("job_stats_by_status"):
        counts.setdefault(row["queue"], {})[row["status"]] = row["jobs"]
    lag = session.one("job_oldest_due_age")
    return QueueStats(counts=counts, due=lag["due"], oldest_due_seconds=lag["oldest_due_seconds"])
