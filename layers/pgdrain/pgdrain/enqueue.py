"""Enqueueing: validate jobs (``new_job``) and insert them on the caller's connection.

Enqueueing works on the caller's connection and inside the caller's transaction, so an
application inserts its row and its job atomically. A job type registered in this process
contributes its defaults (``max_attempts``) and its payload model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from . import store, trace_context
from .db import DEADLOCK_DETECTED, Session, as_session, sqlstate
from .errors import DedupeContention, InvalidJobError
from .graph import FINISHED, Graph, dependent_start, resolve
from .models import (
    AFTER_CHOICES,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    JOB_FIELD_NAMES,
    MAX_DEDUPE_KEY,
    MAX_DELAY_SECONDS,
    MAX_INT,
    MAX_JOB_ID,
    MAX_META_BYTES,
    MAX_PARENTS,
    MAX_TAG,
    MAX_TAGS,
    MAX_TEXT,
    SMALLINT,
    TAG_PATTERN,
    EnqueueResult,
    NewJob,
    ParentIndex,
)
from .registry import REGISTRY

# A JSON-escaped NUL that is not itself an escaped backslash followed by "u0000".
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


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
    expires_at: Any = None,
    ttl_seconds: Any = None,
    unique_for: Any = None,
    debounce: Any = None,
    ordering_key: Any = None,
    tenant: Any = None,
    name: Any = None,
    depends_on: Any = None,
    after: Any = None,
    tags: Any = None,
    meta: Any = None,
    index: int | None = None,
) -> NewJob:
    """Validate one job's fields (``models.JOB_FIELDS``); raise InvalidJobError naming the field
    that is wrong (and ``index``, a batch item's position)."""
    check = _Checker(index)
    if run_at is not None and delay_seconds is not None:
        raise check.bad("run_at", "give run_at or delay_seconds, not both")
    if expires_at is not None and ttl_seconds is not None:
        raise check.bad("expires_at", "give expires_at or ttl_seconds, not both")
    due, delay = check.run_at(run_at), check.delay(delay_seconds)
    expires = check.run_at(expires_at, "expires_at")
    ttl = None if ttl_seconds is None else check.delay(ttl_seconds, "ttl_seconds")
    if ttl is not None and not ttl > delay:
        raise check.bad("ttl_seconds", "must be more than 0 and more than delay_seconds (the "
                                       "job would expire before it is due)")
    if expires is not None and due is not None and not expires > due:
        raise check.bad("expires_at", "must be after run_at (the job would expire before it "
                                      "is due)")
    window, wait = _windows(check, dedupe_key, unique_for, debounce, run_at, delay_seconds)
    if wait is not None:
        delay = wait
    parents = check.parents(depends_on)
    if parents and dedupe_key is not None:
        raise check.bad("depends_on", "not with dedupe_key (nor with an Idempotency-Key "
                                      "header, which keys each job): a job with parents is "
                                      "always inserted")
    if after is not None and after not in AFTER_CHOICES:
        raise check.bad("after", f"must be one of {', '.join(AFTER_CHOICES)}")
    if after is not None and not parents:
        raise check.bad("after", "needs depends_on (the parents it waits for)")
    return NewJob(
        name=None if name is None else check.text("name", name, MAX_TEXT),
        depends_on=parents, after=after or "done",
        expires_at=expires, ttl_seconds=ttl, unique_for=window, debounce=wait,
        job_type=check.text("job_type", job_type, MAX_TEXT),
        payload_json=check.payload(payload),
        queue=check.text("queue", queue, MAX_TEXT),
        priority=check.integer("priority", priority, *SMALLINT),
        max_attempts=check.integer("max_attempts", max_attempts, 1, MAX_INT),
        run_at=due,
        delay_seconds=delay,
        dedupe_key=None if dedupe_key is None else check.text("dedupe_key", dedupe_key,
                                                               MAX_DEDUPE_KEY),
        ordering_key=None if ordering_key is None else check.text("ordering_key", ordering_key,
                                                                   MAX_DEDUPE_KEY),
        tenant=None if tenant is None else check.text("tenant", tenant, MAX_TEXT),
        tags=None if tags is None else tag_list(tags, check.bad),
        meta_json=None if meta is None else meta_text(meta, check.bad),
    )


def _invalid(name: str, message: str) -> InvalidJobError:
    return InvalidJobError(message, field=name)


def tag_list(tags: Any, bad: Callable[[str, str], Exception] = _invalid
             ) -> tuple[str, ...] | None:
    """``tags`` checked (``models.TAG_PATTERN``, at most MAX_TAGS of MAX_TAG characters), each
    once in the order first given; None for none. ``bad(field, message)`` makes the error."""
    if isinstance(tags, str | bytes | Mapping) or not isinstance(tags, Iterable):
        raise bad("tags", "must be a list of tags (strings)")
    kept: dict[str, None] = {}
    for tag in tags:
        problem = tag_problem(tag)
        if problem is not None:
            raise bad("tags", problem)
        kept[tag] = None
        if len(kept) > MAX_TAGS:
            raise bad("tags", f"must be at most {MAX_TAGS} tags")
    return tuple(kept) or None


def tag_problem(tag: Any) -> str | None:
    """Why ``tag`` cannot be a tag (None: it can)."""
    if not isinstance(tag, str):
        return f"each tag must be a string, not {type(tag).__name__}"
    if not 1 <= len(tag) <= MAX_TAG:
        return f"each tag must be 1 to {MAX_TAG} characters, not {len(tag):,}"
    if not _TAG.fullmatch(tag):
        return (f"{tag!r:.80} is not a tag: ASCII letters, digits and _ . : / @ + = -, "
                "beginning with a letter or a digit")
    return None


_TAG = re.compile(TAG_PATTERN.removeprefix("^").removesuffix("$"))


def meta_text(meta: Any, bad: Callable[[str, str], Exception] = _invalid
              ) -> str | None:
    """``meta`` as compact JSON text (None for none or ``{}``): a JSON object of at most
    MAX_META_BYTES, without NUL. ``bad(field, message)`` makes the error."""
    if not isinstance(meta, Mapping):
        raise bad("meta", f"must be a JSON object, not {type(meta).__name__}")
    if not meta:
        return None
    try:
        text = json.dumps(dict(meta), allow_nan=False, separators=(",", ":"),
                          ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise bad("meta", f"must be JSON-serialisable ({exc})"[:300]) from None
    if "\x00" in text or _JSON_NUL.search(text):
        raise bad("meta", "must not contain NUL characters (PostgreSQL jsonb rejects them)")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise bad("meta", "must be valid Unicode (it holds a lone surrogate)") from None
    if size > MAX_META_BYTES:
        raise bad("meta", f"is {size:,} bytes as JSON; the limit is {MAX_META_BYTES:,}")
    return text


def text_field(name: str, value: Any, limit: int) -> str:
    """``value`` if it is what a job's text field ``name`` may hold, else InvalidJobError
    naming the field (the check ``new_job`` runs; pgdrain.control names queues with it)."""
    return _Checker(None).text(name, value, limit)


def _windows(check: _Checker, dedupe_key: Any, unique_for: Any, debounce: Any, run_at: Any,
             delay_seconds: Any) -> tuple[float | None, float | None]:
    """``unique_for`` and ``debounce``, checked: each needs a dedupe_key and a positive
    number of seconds; they exclude each other, and debounce sets the delay itself."""
    if unique_for is None and debounce is None:
        return None, None  # most jobs: nothing to check
    for name, value in (("unique_for", unique_for), ("debounce", debounce)):
        if value is not None:
            if dedupe_key is None:
                raise check.bad(name, "needs a dedupe_key (the key it applies to)")
            if not check.delay(value, name) > 0:
                raise check.bad(name, "must be more than 0 seconds")
    if unique_for is not None and debounce is not None:
        raise check.bad("debounce", "give unique_for or debounce, not both")
    if debounce is not None and (run_at is not None or delay_seconds is not None):
        raise check.bad("debounce", "sets when the job is due: not with run_at or "
                                    "delay_seconds")
    return (None if unique_for is None else float(unique_for),
            None if debounce is None else float(debounce))


class _Checker:
    """The field checks of ``new_job``; each returns the value or raises naming the field."""

    def __init__(self, index: int | None):
        self.index = index

    def bad(self, name: str, message: str) -> InvalidJobError:
        return InvalidJobError(message, field=name, index=self.index)

    def text(self, name: str, value: Any, limit: int) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.bad(name, "must be a non-empty string")
        if len(value) > limit:
            raise self.bad(name, f"must be at most {limit} characters")
        if "\x00" in value:
            raise self.bad(name, "must not contain NUL characters")
        if not _is_utf8(value):
            raise self.bad(name, "must be valid Unicode (it holds a lone surrogate)")
        return value

    def integer(self, name: str, value: Any, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.bad(name, "must be an integer")
        if not low <= value <= high:
            raise self.bad(name, f"must be between {low} and {high}")
        return value

    def payload(self, payload: Any) -> str:
        try:
            text = json.dumps({} if payload is None else payload, allow_nan=False,
                              separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise self.bad("payload", f"must be JSON-serialisable ({exc})") from None
        if _JSON_NUL.search(text):
            raise self.bad("payload",
                           "must not contain NUL characters (PostgreSQL jsonb rejects them)")
        if "\\ud" in text and not _is_utf8(json.dumps(payload, ensure_ascii=False)):
            raise self.bad("payload", "must be valid Unicode (it holds a lone surrogate)")
        return text

    def parents(self, depends_on: Any) -> tuple[int | str | ParentIndex, ...]:
        """``depends_on``: job ids, names of the batch's jobs, or ``{"index": n}``."""
        if depends_on is None:
            return ()
        if isinstance(depends_on, str | bytes | Mapping) or not isinstance(depends_on,
                                                                            Iterable):
            raise self.bad("depends_on", "must be a list of parents")
        parents: list[int | str | ParentIndex] = []
        for item in depends_on:
            if len(parents) == MAX_PARENTS:
                raise self.bad("depends_on", f"must name at most {MAX_PARENTS:,} parents")
            parents.append(self.parent(item))
        return tuple(dict.fromkeys(parents))  # each parent once, in the order given

    def parent(self, item: Any) -> int | str | ParentIndex:
        if isinstance(item, ParentIndex):
            item = {"index": item.position}
        if isinstance(item, bool):
            raise self.bad("depends_on", "must hold job ids, names or {\"index\": n}, not "
                                         "true or false")
        if isinstance(item, int):
            if not 1 <= item <= MAX_JOB_ID:
                raise self.bad("depends_on", f"job id {item} is out of range")
            return item
        if isinstance(item, str):
            return self.text("depends_on", item, MAX_TEXT)
        if isinstance(item, Mapping) and set(item) == {"index"}:
            position = item["index"]
            if isinstance(position, int) and not isinstance(position, bool) and position >= 0:
                return ParentIndex(position)
        raise self.bad("depends_on", f"{item!r:.60} is not a parent: give a job id, the name "
                                     "of a job of the batch, or {\"index\": n}")

    def run_at(self, run_at: Any, name: str = "run_at") -> datetime | None:
        if run_at is None:
            return None
        if not isinstance(run_at, datetime):
            raise self.bad(name, "must be a datetime")
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise self.bad(name, "must carry a timezone (a naive time is ambiguous)")
        try:
            run_at.astimezone(UTC)
        except OverflowError:
            raise self.bad(name, "is out of range (years 1 to 9999 in UTC)") from None
        return run_at

    def delay(self, delay_seconds: Any, name: str = "delay_seconds") -> float:
        if delay_seconds is None:
            return 0.0
        if isinstance(delay_seconds, bool) or not isinstance(delay_seconds, int | float):
            raise self.bad(name, "must be a number")
        # Compared before any float(): an int of 400 digits does not fit in one.
        if not (0 <= delay_seconds <= MAX_DELAY_SECONDS):  # NaN fails this too
            raise self.bad(name, f"must be between 0 and {MAX_DELAY_SECONDS} (ten years)")
        return float(delay_seconds)


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def enqueue(conn: Any, job_type: str, payload: Any = None, **options: Any) -> EnqueueResult:
    """Insert one job on ``conn`` (inside its open transaction, if any) and return its id.

    Options: ``queue``, ``priority`` (lower runs first), ``max_attempts``, ``run_at`` (an aware
    datetime) or ``delay_seconds``, ``dedupe_key``, ``depends_on`` (parent job ids: the job
    waits until they have ended) with ``after`` (``"done"``, ``"finished"``), and the rest of
    ``models.JOB_FIELDS``. If a live (pending, running or waiting) job holds the same
    ``dedupe_key``, nothing is inserted and its id comes back with ``created=False``. Raises
    InvalidJobError, inserting nothing, when a field is invalid or a parent does not exist.
    """
    return enqueue_many(conn, [{"job_type": job_type, "payload": payload, **options}])[0]


def enqueue_many(conn: Any, jobs: Iterable[Mapping[str, Any] | NewJob]) -> list[EnqueueResult]:
    """Insert a batch of jobs in one statement; results are in input order.

    Every job is validated first: one invalid job raises InvalidJobError (with its index) and
    nothing is inserted. Jobs are dicts with ``new_job``'s fields, or ``NewJob`` values. A
    batch with ``depends_on`` is a graph: its items name their parents by id, by another
    item's ``name`` or by ``{"index": n}``, and it goes in in one transaction (the caller's,
    or its own), refused whole on a cycle or an unknown parent (pgdrain.graph).
    """
    batch = [_validated(job, i) for i, job in enumerate(jobs)]
    if not batch:
        return []
    session = as_session(conn)
    if any(job.depends_on or job.name for job in batch):
        graph = resolve(batch)  # refused here, before anything is written
    if any(job.depends_on for job in batch):
        if not session.autocommitting():
            return _enqueue_graph(session, batch, graph)
        with session.transaction():
            return _enqueue_graph(session, batch, graph)
    if any(_windowed(job) for job in batch) and session.autocommitting():
        # A unique window or a debounce holds its key's lock until the commit: here, its own.
        return enqueue_atomically(session, batch)
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
    if not any(job.dedupe_key for job in batch) or any(job.depends_on for job in batch):
        return enqueue_many(session, batch)  # a graph is its own transaction there
    for attempt in range(_DEADLOCK_ROUNDS + 1):
        try:
            with session.transaction():
                return _enqueue_validated(session, batch)
        except Exception as exc:
            if attempt == _DEADLOCK_ROUNDS or sqlstate(exc) != DEADLOCK_DETECTED:
                raise
    raise AssertionError("unreachable")


def _windowed(job: NewJob) -> bool:
    return job.unique_for is not None or job.debounce is not None


def _enqueue_validated(session: Session, batch: list[NewJob]) -> list[EnqueueResult]:
    """The batch's results in order: unique windows and debounces one at a time under their
    key's lock (in one fixed order, so two batches cannot deadlock on them), the rest in one
    insert. Runs inside a transaction when any job is windowed."""
    if not any(_windowed(job) for job in batch):
        return _enqueue_plain(session, batch)
    windowed = [i for i in _insertion_order(batch) if _windowed(batch[i])]
    results: list[EnqueueResult | None] = [None] * len(batch)
    for i in windowed:
        # The first job of a key in the batch wins, as if the jobs came one by one: plain jobs
        # of this key listed before it go in first, under the key's lock.
        key = batch[i].dedupe_key
        session.rows("job_key_lock", lock_key=KEY_LOCK, dedupe_key=key)
        before = [j for j in range(i) if results[j] is None and batch[j].dedupe_key == key]
        for j, result in zip(before, _enqueue_plain(session, [batch[j] for j in before]),
                             strict=True):
            results[j] = result
        results[i] = _enqueue_windowed(session, batch[i])
    rest = [i for i in range(len(batch)) if results[i] is None]
    for i, result in zip(rest, _enqueue_plain(session, [batch[i] for i in rest]), strict=True):
        results[i] = result
    return results  # type: ignore[return-value]


def _enqueue_graph(session: Session, batch: list[NewJob], graph: Graph) -> list[EnqueueResult]:
    """A batch with ``depends_on``, in one transaction: the parents named by id locked and
    checked first (one that does not exist refuses the batch before anything is inserted),
    then the jobs inserted, then the batch's own parents locked, and the edges and each
    child's start written. Until the commit, a parent's finishing write waits for it."""
    known = store.mark_parents(session, sorted({p for ps in graph.parents.values()
                                                for p in ps.by_id}))
    for child, ps in graph.parents.items():
        for parent in ps.by_id:
            if parent not in known:
                raise InvalidJobError(f"parent job {parent} does not exist", field="depends_on",
                                      index=child)
    results = _enqueue_validated(session, batch)
    wanted = {child: tuple(dict.fromkeys([results[p].id for p in ps.in_batch] + list(ps.by_id)))
              for child, ps in graph.parents.items()}
    known.update(store.mark_parents(session, sorted(
        {p for ps in wanted.values() for p in ps} - set(known))))
    edges, starts = [], []
    for child, parents in wanted.items():
        child_id = results[child].id
        start = dependent_start(batch[child].after, {p: known[p][0] for p in parents})
        starts.append((child_id, start.status, start.parents_left, batch[child].after,
                       start.cancelled_by, start.error))
        for parent in parents:
            status, result = known[parent]
            ended = status if status in FINISHED else None
            edges.append((parent, child_id, ended, result if ended == "done" else None))
        if start.status != "pending":
            results[child] = EnqueueResult(child_id, results[child].created, False)
    store.set_dependencies(session, edges, starts)
    return results


def _enqueue_windowed(session: Session, job: NewJob) -> EnqueueResult:
    """A job with ``unique_for`` or ``debounce``: under its key's lock, the recent job of the
    key answers (unique window), or the pending one takes the payload and is put off
    (debounce); else it is inserted like any job (a live holder still answers)."""
    key = job.dedupe_key
    assert key is not None
    session.rows("job_key_lock", lock_key=KEY_LOCK, dedupe_key=key)
    if job.unique_for is not None:
        row = session.one("job_key_recent", dedupe_key=key, seconds=job.unique_for)
    else:
        row = session.one("job_debounce", dedupe_key=key, payload=job.payload_json,
                          seconds=job.debounce)
    if row is not None:
        return EnqueueResult(row["id"], False)
    return _enqueue_plain(session, [job])[0]


KEY_LOCK = 0x7067646B
"""The first advisory-lock key of a dedupe key's lock ("pgdk"); the second is its hash."""


def _enqueue_plain(session: Session, batch: list[NewJob]) -> list[EnqueueResult]:
    results = _insert(session, batch)
    # Items skipped because a live job held their dedupe_key get that job's id. A holder can
    # finish between the insert and the lookup: its key is free again, so insert those anew.
    for _ in range(_DEDUPE_ROUNDS):
        waiting = [i for i, r in enumerate(results) if r is None]
        if not waiting:
            return results  # type: ignore[return-value]
        holders = store.live_ids(session, {batch[i].dedupe_key for i in waiting})
        freed = []
        for i in waiting:
            holder = holders.get(batch[i].dedupe_key)  # type: ignore[arg-type]
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


def traced(rows: list[NewJob], headers: Mapping[str, str] | None = None) -> list[NewJob]:
    """``rows`` with the caller's trace context where they carry none (``headers``: an API
    request's, by lower-case name); as they are when the caller is not traced, which is the
    usual case."""
    context = trace_context.capture(headers)
    if context is None:
        return rows
    text = json.dumps(context, separators=(",", ":"))
    return [row if row.trace_context is not None else replace(row, trace_context=text)
            for row in rows]


def _insert(session: Session, batch: list[NewJob]) -> list[EnqueueResult | None]:
    """Insert ``batch`` in one statement: a result per item, None where a live job held its
    dedupe key (or an earlier item of the batch took it)."""
    if not batch:
        return []
    order = _insertion_order(batch)
    inserted = store.insert_jobs(session, traced([batch[i] for i in order]))
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
    unknown = sorted(set(job) - set(JOB_FIELD_NAMES))
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
