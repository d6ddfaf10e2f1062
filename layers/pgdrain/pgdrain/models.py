"""The values pgdrain passes around: job states, the one list of a job's fields, claimed jobs,
finishing outcomes and operation results. Pure: no I/O."""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from .results import decode_meta, encode_checkpoint, encode_progress


class Status(enum.StrEnum):
    """A job's ``status``; the words are the seed article's and users' SQL relies on them."""

    PENDING = "pending"
    """Waiting until ``run_at``; the claim moves it to running."""
    RUNNING = "running"
    """Claimed under a lease; its worker finishes it, or the janitor reclaims it at expiry."""
    DONE = "done"
    """Finished; the janitor purges it after the retention period."""
    FAILED = "failed"
    """Dead-lettered with its last error, out of attempts or discarded; requeue to run again."""
    CANCELLED = "cancelled"
    """Stopped by ``pgdrain.cancel`` (or plain SQL) before it ran, or asked to stop while
    running and then ended instead of retried; never runs again. Purged with failed jobs.
    Also a job whose parent (``depends_on``) ended failed or cancelled (``cancelled_by``)."""
    WAITING = "waiting"
    """Enqueued with ``depends_on``: waits until its parents have finished (``after``), then
    becomes pending; or raised ``pgdrain.WaitFor``: waits for a signal (``wait_signal``) or
    its timeout. No claim reads it."""


AFTER_CHOICES = ("done", "finished")
"""What a job with parents waits for (``after``): every parent done (the default; a parent
that fails or is cancelled cancels it), or every parent finished, whatever its end (a
batch's callback)."""
MAX_PARENTS = 100_000
"""The most parents one job may name (``depends_on``)."""


# --- a job's fields: every reader (validation, the HTTP API, its OpenAPI document) uses these --

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 3
MAX_TEXT = 200
"""Longest job_type and queue (the table's CHECK constraints say the same)."""
MAX_DEDUPE_KEY = 500
MAX_ERROR_CHARS = 4000
SMALLINT = (-32768, 32767)
MAX_INT = 2**31 - 1
MAX_JOB_ID = 2**63 - 1
MAX_DELAY_SECONDS = 10 * 365 * 86400
"""The longest a job can be put off, by enqueue's delay_seconds or by Snooze: ten years."""
MAX_SIGNAL_NAME = 500
"""Longest signal name (``WaitFor``, ``pgdrain.signal``)."""
DEFAULT_SIGNAL_KEEP_SECONDS = 7 * 86400
"""How long a signal sent is kept for the jobs that wait for it later: a week."""
MAX_TAGS = 16
"""The most tags one job may have (``tags``)."""
MAX_TAG = 64
"""Longest tag."""
TAG_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.:/@+=-]*$"
"""What a tag is: ASCII letters, digits and ``_ . : / @ + = -``, beginning with a letter or a
digit (never an option on a command line; no comma, no space), compared exactly (case too)."""
MAX_META_BYTES = 4096
"""Largest ``meta``, as compact JSON in UTF-8."""
NO_NUL = "^[^\\u0000]*$"
"""A JSON schema pattern: text without NUL (PostgreSQL's text cannot hold one)."""
DATE_TIME = {"type": "string", "format": "date-time"}


def _text(limit: int, *, nullable: bool = False) -> dict[str, Any]:
    """The schema of a text field: 1 to ``limit`` characters, no NUL (null too if
    ``nullable``)."""
    schema = {"type": "string", "minLength": 1, "maxLength": limit, "pattern": NO_NUL}
    return {"anyOf": [schema, {"type": "null"}]} if nullable else schema


@dataclass(frozen=True, slots=True)
class JobField:
    """One field of a job as callers give it: its name, JSON schema and meaning."""

    name: str
    schema: dict[str, Any]
    description: str
    required: bool = False


JOB_FIELDS: tuple[JobField, ...] = (
    JobField("job_type", _text(MAX_TEXT), "A registered job type.", required=True),
    JobField("payload", {"type": "object"}, "The job's input, a JSON object. Default {}."),
    JobField("run_at", {"anyOf": [DATE_TIME, {"type": "null"}]},
             "When the job becomes due: an ISO 8601 date-time with a timezone "
             "(e.g. 2030-01-31T09:00:00Z). Default: now. Not together with delay_seconds."),
    JobField("delay_seconds", {"anyOf": [{"type": "number", "minimum": 0,
                                          "maximum": MAX_DELAY_SECONDS}, {"type": "null"}]},
             "Seconds from now (by the database's clock) until the job is due. "
             "Not together with run_at."),
    JobField("priority", {"type": "integer", "minimum": SMALLINT[0], "maximum": SMALLINT[1],
                          "default": 0},
             "Lower runs first."),
    JobField("queue", {**_text(MAX_TEXT), "default": DEFAULT_QUEUE},
             "A drain may be limited to some queues. Not blank."),
    JobField("max_attempts", {"type": "integer", "minimum": 1, "maximum": MAX_INT,
                              "default": DEFAULT_MAX_ATTEMPTS},
             "Attempts before the job lands in failed."),
    JobField("expires_at", {"anyOf": [DATE_TIME, {"type": "null"}]},
             "For a job worthless if late: not started by this ISO 8601 date-time (with a "
             "timezone), it never runs and ends failed with the error `expired`. After run_at; "
             "not together with ttl_seconds."),
    JobField("ttl_seconds", {"anyOf": [{"type": "number", "exclusiveMinimum": 0,
                                        "maximum": MAX_DELAY_SECONDS}, {"type": "null"}]},
             "Like expires_at, in seconds from now (the database's clock): not started within "
             "them, the job never runs. More than delay_seconds."),
    JobField("dedupe_key", _text(MAX_DEDUPE_KEY, nullable=True),
             "At most one live (pending, running or waiting) job holds a key: a duplicate "
             "answers the live job's id instead of inserting. Not blank."),
    JobField("unique_for", {"anyOf": [{"type": "number", "exclusiveMinimum": 0,
                                       "maximum": MAX_DELAY_SECONDS}, {"type": "null"}]},
             "Seconds: with dedupe_key, a job of that key created within this window (pending, "
             "running or done) answers its id instead of inserting. Not with debounce."),
    JobField("debounce", {"anyOf": [{"type": "number", "exclusiveMinimum": 0,
                                     "maximum": MAX_DELAY_SECONDS}, {"type": "null"}]},
             "Seconds: with dedupe_key, the pending job of that key takes this payload and is "
             "put off to this many seconds from now (a burst runs once, after it); else a job "
             "due then is inserted. Not with run_at, delay_seconds or unique_for."),
    JobField("ordering_key", _text(MAX_DEDUPE_KEY, nullable=True),
             "Jobs with the same ordering_key run one at a time, in enqueue order, across all "
             "drains; a retrying job holds its key. Not blank."),
    JobField("tenant", _text(MAX_TEXT, nullable=True),
             "Who the job is for: while jobs name tenants, the claim takes from each tenant in "
             "turn, so one tenant's flood does not hold another's jobs back. Not blank."),
    JobField("name", _text(MAX_TEXT, nullable=True),
             "A name for this job within its batch, for another job of the batch to name in "
             "depends_on. Not stored. Not blank; unique within the batch."),
    JobField("depends_on", {"anyOf": [{"type": "array", "maxItems": MAX_PARENTS, "items": {
                 "anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_JOB_ID},
                           _text(MAX_TEXT),
                           {"type": "object", "required": ["index"],
                            "additionalProperties": False,
                            "properties": {"index": {"type": "integer", "minimum": 0}}}]}},
                 {"type": "null"}]},
             "The job's parents: it waits (status waiting) until they have finished, then "
             "runs. Each is a job id, the name of a job of the same batch, or {\"index\": n} "
             "for the batch's n-th job (from 0). A cycle or an unknown parent is refused and "
             "nothing is inserted. Not with dedupe_key."),
    JobField("after", {"anyOf": [{"type": "string", "enum": list(AFTER_CHOICES)},
                                 {"type": "null"}]},
             "With depends_on: `done` (the default) runs the job once every parent is done, "
             "and cancels it if one ends failed or cancelled; `finished` runs it once every "
             "parent has ended, whatever the end (a batch's callback)."),
    JobField("tags", {"anyOf": [{"type": "array", "maxItems": MAX_TAGS, "items": {
                 "type": "string", "minLength": 1, "maxLength": MAX_TAG,
                 "pattern": TAG_PATTERN}}, {"type": "null"}]},
             f"Up to {MAX_TAGS} tags to find the job by (pgdrain list --tag, the bulk actions' "
             f"filters): each 1 to {MAX_TAG} ASCII letters, digits and _ . : / @ + = -, "
             "beginning with a letter or a digit, kept exactly as given; a repeated tag is "
             "kept once, in the order first given."),
    JobField("meta", {"anyOf": [{"type": "object"}, {"type": "null"}]},
             f"A small JSON object about the job (at most {MAX_META_BYTES} bytes as compact "
             "JSON), shown with it and matched by the filters' meta containment. Not the "
             "payload: the handler gets it as job.meta."),
)
JOB_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in JOB_FIELDS)
JOB_OPTION_NAMES: tuple[str, ...] = tuple(n for n in JOB_FIELD_NAMES
                                          if n not in ("job_type", "payload"))


@dataclass(frozen=True, slots=True)
class NewJob:
    """A validated job to insert (``JOB_FIELDS``, the payload as JSON text). Build it with
    ``pgdrain.new_job()``, which checks every field."""

    job_type: str
    payload_json: str
    queue: str
    priority: int
    max_attempts: int
    run_at: datetime | None
    delay_seconds: float
    dedupe_key: str | None
    expires_at: datetime | None = None
    ttl_seconds: float | None = None
    unique_for: float | None = None
    """With dedupe_key: a job of the key created this recently (not failed or cancelled)
    answers instead."""
    debounce: float | None = None
    """With dedupe_key: the key's pending job takes this payload, due this long from now."""
    ordering_key: str | None = None
    """Jobs of one key run one at a time, in enqueue order (pgdrain.flow)."""
    tenant: str | None = None
    """The claim takes from each tenant in turn (job_claim_fair)."""
    name: str | None = None
    """Its name within the batch, for another item's ``depends_on``."""
    depends_on: tuple[int | str | ParentIndex, ...] = ()
    """Its parents: job ids, names of batch items, or batch positions."""
    after: str = "done"
    """What it waits for of its parents (AFTER_CHOICES)."""
    tags: tuple[str, ...] | None = None
    """Its tags (None: none), each once, in the order given."""
    meta_json: str | None = None
    """Its meta as compact JSON text (None: none, or an empty object)."""
    trace_context: str | None = None
    """The enqueuer's sampled trace context as JSON text (pgdrain.trace_context); None: the
    enqueue captures it."""


def signal_name_problem(name: Any) -> str | None:
    """Why ``name`` cannot name a signal (None: it can): text of 1 to MAX_SIGNAL_NAME
    characters without NUL, which PostgreSQL's text cannot hold."""
    if not isinstance(name, str):
        return f"must be text, not {type(name).__name__}"
    if not name or len(name) > MAX_SIGNAL_NAME:
        return f"must be 1 to {MAX_SIGNAL_NAME} characters, not {len(name):,}"
    if "\x00" in name:
        return "must not contain NUL (U+0000)"
    return None


class ParentIndex(NamedTuple):
    """A parent named by its position in the same batch (``{"index": n}``)."""

    position: int


class JobControl:
    """What a running job's handler and its drain share: the drain sets ``cancel_requested``
    when it learns the job was asked to stop; ``job.progress()`` leaves its latest report here
    for the drain to write. Neither side waits for the other. A checkpoint
    (``job.checkpoint``) is the exception: its handler waits until it is saved, through
    ``saver``, which the drain sets for a job of a resumable type."""

    __slots__ = ("_lock", "_progress", "cancel_requested", "checkpoints_saved", "parents",
                 "resumable", "saver", "signal", "state")

    def __init__(self) -> None:
        self.cancel_requested = False
        self._progress: str | None = None
        self._lock = threading.Lock()
        self.state: Any = None
        """The last state saved (``job.state``): read when the run began, then each saved."""
        self.checkpoints_saved = 0
        """Checkpoints saved during this run."""
        self.saver: Callable[[str, Any], None] | None = None
        """Saves a checkpoint (its JSON text, its state) and calls ``saved`` with the state
        once the database has it, or raises CheckpointNotSaved."""
        self.resumable: bool | None = None
        """Whether the job's type is resumable, as the drain running it knows; None outside a
        drain (a handler called by a test: checkpoints are kept in memory only)."""
        self.parents: dict[int, tuple[str, Any]] = {}
        """Of a job with parents: each parent's id, its end and (done) its result, as the
        drain read them before the run."""
        self.signal: Signal | None = None
        """What the job's last wait for a signal got (``job.signal``)."""

    def report(self, progress: str) -> None:
        with self._lock:
            self._progress = progress

    @property
    def has_progress(self) -> bool:
        return self._progress is not None

    def take_progress(self) -> str | None:
        """The latest report not yet written (None if none), and forget it."""
        with self._lock:
            progress, self._progress = self._progress, None
        return progress

    def save(self, text: str, state: Any) -> None:
        """Save a checkpoint; return once it is saved (``saver`` raises if it is not)."""
        if self.resumable is False:
            raise TypeError("job.checkpoint() needs a resumable type: declare it with "
                            "@pgdrain.job(..., resumable=True), so that its runs read the "
                            "state back (job.state)")
        if self.saver is None:
            self.saved(state)
        else:
            self.saver(text, state)

    def saved(self, state: Any) -> None:
        """A checkpoint is saved: recorded by the saver as soon as the database answered, so
        that a time limit that interrupts the handler right after still finds it counted."""
        self.state = state
        self.checkpoints_saved += 1


@dataclass(frozen=True, slots=True)
class Signal:
    """What a job's wait for a signal got (``job.signal``)."""

    name: str
    received: bool
    """True: the signal was sent (``payload`` is what the sender passed); False: the wait
    timed out, with no payload."""
    payload: Any = None
    at: str | None = None
    """When it was sent, or when the wait timed out (ISO 8601, the database's clock)."""

    @property
    def timed_out(self) -> bool:
        return not self.received


@dataclass(frozen=True, slots=True)
class Job:
    """A claimed job, as the claim returned it. ``lease_token`` identifies this claim."""

    id: int
    job_type: str
    payload: Any
    attempts: int
    max_attempts: int
    queue: str
    priority: int
    run_at: datetime | str
    """When the job became due. Text where Python has no datetime for it: plain SQL may store
    ``-infinity`` or a BC date, which pg8000 returns as PostgreSQL writes it."""
    created_at: datetime | str
    """When the job was inserted (text too, as ``run_at``: ``-infinity``, ``infinity``, a BC
    date or a year past 9999, stored by plain SQL)."""
    claimed_at: datetime
    lease_expires_at: datetime
    lease_token: str
    dedupe_key: str | None = None
    lost_claims: int = 0
    """How often a drain died holding this job before it was known to have started; when
    above 0 the job is claimed alone, its start recorded (see policy.after_lost_lease)."""
    tenant: str | None = None
    """The tenant the job was enqueued for (``enqueue(..., tenant=)``), if any."""
    after_parents: str | None = None
    """Of a job enqueued with ``depends_on``: what it waited for (``"done"``, ``"finished"``);
    its parents are then in ``parents`` and ``parent_results``."""
    wait_result: str | None = None
    """What its last wait for a signal got, as the claim read it (JSON text): ``signal``."""
    tag_list: list[str] | None = None
    """The tags it was enqueued with, as the claim read them (None: none): ``tags``."""
    meta_json: str | None = None
    """The meta it was enqueued with, as JSON text (None: none): ``meta``."""
    trace_context: str | None = None
    """The enqueuer's trace context as the claim read it (JSON text; pgdrain.trace_context):
    the drain runs the job in a span under it."""
    payload_error: str | None = None
    """Why the stored payload could not be decoded (``payload`` is then None): the drain
    fails the job with this reason instead of running it."""
    control: JobControl = field(default_factory=JobControl, compare=False, repr=False)
    """Shared with the drain: see ``cancel_requested`` and ``progress``."""

    @property
    def cancel_requested(self) -> bool:
        """Whether the job was asked to stop (``pgdrain cancel``) while it runs: a handler that
        checks it may return early. Read from memory (the drain learns of a request within
        about a second while jobs run). Whatever the handler does, an attempt that would have
        been retried ends ``cancelled``."""
        return self.control.cancel_requested

    @property
    def parents(self) -> dict[int, str]:
        """Of a job enqueued with ``depends_on``: each parent's id and how it ended (``done``,
        ``failed`` or ``cancelled``), in id order. A batch's callback (``after="finished"``)
        counts its outcomes here. Empty for a job without parents."""
        return {parent: end for parent, (end, _) in self.control.parents.items()}

    @property
    def parent_results(self) -> dict[int, Any]:
        """Of a job enqueued with ``depends_on``: each parent that ended done, by id, with the
        result its handler returned (None if it returned none). Kept with the job even when
        the parents' rows were purged."""
        return {parent: result for parent, (end, result) in self.control.parents.items()
                if end == "done"}

    @property
    def signal(self) -> Signal | None:
        """What the job's last wait (``raise pgdrain.WaitFor(name, timeout=...)``) got: the
        signal's ``name``, whether it was ``received`` and its ``payload``, or a timeout
        (``timed_out``, no payload). None if the job never waited. Kept until it waits again,
        so a retried run sees it too."""
        return self.control.signal

    @property
    def state(self) -> Any:
        """The state the job's last checkpoint saved (``checkpoint``), None if none: where a
        run of a resumable job (``@pgdrain.job(..., resumable=True)``) resumes from, whether
        the run before it continued (``pgdrain.Continue``), ran out of time or was killed."""
        return self.control.state

    def checkpoint(self, state: Any) -> None:
        """Save ``state`` (JSON, at most MAX_CHECKPOINT_BYTES) as where this job resumes from,
        durably: it returns once the database has it, in a few milliseconds. The
        write is guarded by this run's lease: a run whose job was reclaimed saves nothing
        and gets CheckpointNotSaved. A job that saved a checkpoint in a run that then ran out
        of time continues (due again, no attempt spent) instead of failing that attempt.
        Only for a resumable type; ValueError for state that is not JSON or too big."""
        self.control.save(encode_checkpoint(state), state)

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report how far the job got (``fraction`` from 0 to 1, an optional message of up to
        500 characters): shown by ``GET /jobs/{id}`` and ``pgdrain show``. Returns at once; the
        drain writes the latest report about every second while the job runs."""
        self.control.report(encode_progress(fraction, message))

    @property
    def tags(self) -> list[str]:
        """The tags it was enqueued with (``enqueue(..., tags=)``), in order; [] if none."""
        return list(self.tag_list or ())

    @property
    def meta(self) -> dict[str, Any]:
        """Its metadata (``enqueue(..., meta=)``), a fresh copy; {} if none. ValueError if
        plain SQL stored what Python cannot decode, or no object."""
        value, problem = decode_meta(self.meta_json or "{}")
        if problem is not None:
            raise ValueError(f"job {self.id}'s meta: {problem}")
        return value

    @property
    def idempotency_key(self) -> str:
        """A key that is the same on every attempt of this job: pass it to outside providers."""
        return f"pgdrain-job-{self.id}"


# --- finishing a claim: outcomes as values, written by one guarded statement -------------------


class Outcome(enum.StrEnum):
    """How a claim ends; ``job_finish_batch`` applies each, guarded by the claim."""

    DONE = "done"
    """Succeeded: done."""
    RETRY = "retry"
    """The attempt failed: pending again after ``delay_seconds``, the error kept."""
    FAIL = "fail"
    """Dead-lettered: failed, the error kept."""
    SNOOZE = "snooze"
    """The handler asked to wait: pending after ``delay_seconds``, the attempt given back."""
    RELEASE = "release"
    """Never started (the deadline came first): pending again at once, the attempt given back."""
    WAIT = "wait"
    """The handler raised WaitFor: waiting for ``signal`` until ``delay_seconds`` from now (or
    due at once if it was sent), the attempt given back (``job_wait_batch``)."""
    REFUND = "refund"
    """The janitor's, for a lost claim with no recorded start: as RELEASE, and ``lost_claims``
    counts it."""


@dataclass(frozen=True, slots=True)
class Finish:
    """One claim's ending: the claim (job id and lease token), the outcome and its details."""

    id: int
    lease_token: str
    outcome: Outcome
    delay_seconds: float = 0.0
    error: str | None = None
    """A failed attempt's error; with DONE, why the result could not be stored."""
    result: str | None = None
    """With DONE: the handler's return value as JSON text (None: no result)."""
    forget: bool = False
    """With DONE and no result: delete the row instead of keeping it done (done rows are not
    kept: PGDRAIN_RETENTION_SECONDS=0); a job holding a dedupe key is kept all the same."""
    signal: str | None = None
    """With WAIT: the signal's name."""

    @classmethod
    def done(cls, job: Job, result: str | None = None, error: str | None = None, *,
             forget: bool = False) -> Finish:
        return cls(job.id, job.lease_token, Outcome.DONE, 0.0, error, result,
                   forget and result is None and error is None)

    @classmethod
    def retry(cls, job: Job, error: str, delay_seconds: float) -> Finish:
        return cls(job.id, job.lease_token, Outcome.RETRY, delay_seconds, error)

    @classmethod
    def fail(cls, job: Job, error: str) -> Finish:
        return cls(job.id, job.lease_token, Outcome.FAIL, 0.0, error)

    @classmethod
    def snooze(cls, job: Job, delay_seconds: float) -> Finish:
        return cls(job.id, job.lease_token, Outcome.SNOOZE, delay_seconds)

    @classmethod
    def wait(cls, job: Job, signal: str, timeout_seconds: float) -> Finish:
        return cls(job.id, job.lease_token, Outcome.WAIT, timeout_seconds, signal=signal)

    @classmethod
    def release(cls, job: Job) -> Finish:
        return cls(job.id, job.lease_token, Outcome.RELEASE)


@dataclass(frozen=True, slots=True)
class ExpiredLease:
    """A running job whose lease ran out, as the janitor reads it (enough to finish it)."""

    id: int
    job_type: str
    lease_token: str
    attempts: int
    max_attempts: int
    lost_claims: int
    started: bool
    """Whether the claim recorded the job's start (see policy.after_lost_lease)."""


# --- results ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """The id of an enqueued job; ``created`` is False when a live duplicate's id came back.

    ``due`` is True when a job created now is already due (by the database's clock).
    """

    id: int
    created: bool
    due: bool = False


@dataclass(frozen=True, slots=True)
class Written:
    """Which finishing writes took effect. ``stale`` ids belonged to a claim that was lost."""

    ids: tuple[int, ...] = ()
    stale: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class JanitorResult:
    """What one janitor pass did; ``ran`` is False when another drain held the janitor lock."""

    ran: bool
    reclaimed: int = 0
    """Expired leases put back to pending (charged, with backoff, or refunded)."""
    failed: int = 0
    """Expired leases with a recorded start, out of attempts: moved to failed."""
    purged: int = 0
    """Old finished rows deleted: done after PGDRAIN_RETENTION_SECONDS, failed and cancelled
    after PGDRAIN_FAILED_RETENTION_SECONDS."""
    refunded: int = 0
    """Of ``reclaimed``: jobs whose start was never recorded, given their attempt back."""
    expired: int = 0
    """Pending jobs past their ``expires_at``, ended failed with the error ``expired``."""
    cancelled: int = 0
    """Pending jobs asked to stop (made pending again by plain SQL), ended cancelled."""
    timed_out: int = 0
    """Jobs whose wait for a signal (WaitFor) timed out: due again, with no payload."""
    alone_due: bool = False
    """Whether a job to claim alone (its claim lost before) is due: the drain claims those
    first."""
    controlled: bool = False
    """Whether some queue has a concurrency cap or a rate limit: the drain then also claims
    through ``claim_controlled``."""
    queues_set: bool = False
    """Whether some queue is paused, capped or rate-limited: the drain's plain claims then read
    queue by queue (job_claim_batch_by_queue), past such a queue's backlog."""
    tenants: bool = False
    """Whether pending jobs name tenants: the drain then claims fairly (job_claim_fair)."""
    schedules_due: bool = False
    """Whether a stored schedule entry's tick has come: the drain then reads the due ones
    (``pgdrain.schedule(conn, ...)``; none stored, no statement)."""


@dataclass(frozen=True, slots=True)
class Backlog:
    """Due pending jobs (counted up to a cap) and how long the oldest has waited."""

    due: int = 0
    oldest_due_seconds: float = 0.0
    queues_paused: int = 0
    """Queues paused now (``pgdrain pause``): their due jobs are in ``due`` but wait."""


@dataclass(frozen=True, slots=True)
class QueueBacklog:
    """One queue's due jobs (counted up to a cap), its oldest due job's wait, and whether it
    is paused (``store.backlog_by_queue``)."""

    queue: str
    due: int
    oldest_due_seconds: float
    paused: bool


@dataclass(frozen=True, slots=True)
class QueueBacklogs:
    """The backlog queue by queue, the oldest waits first, and how many queues are paused
    (with or without jobs)."""

    queues: tuple[QueueBacklog, ...] = ()
    queues_paused: int = 0

    @property
    def waiting(self) -> tuple[QueueBacklog, ...]:
        """The queues whose jobs drains would claim: not paused."""
        return tuple(q for q in self.queues if not q.paused)

    @property
    def due(self) -> int:
        """Due jobs of queues that are not paused: work that should be running."""
        return sum(q.due for q in self.waiting)

    @property
    def oldest_due_seconds(self) -> float:
        """The longest wait of a due job in a queue that is not paused."""
        return max((q.oldest_due_seconds for q in self.waiting), default=0.0)

    @property
    def paused_due(self) -> int:
        """Due jobs of paused queues: they wait on purpose."""
        return sum(q.due for q in self.queues if q.paused)


@dataclass(frozen=True, slots=True)
class TableHealth:
    """The jobs table's footprint and vacuum state (``store.table_health``)."""

    heap_bytes: int
    index_bytes: int
    live_rows: int
    dead_rows: int
    """Row versions no transaction can see any more, not yet vacuumed (an estimate)."""
    vacuums: int
    """Vacuums of the table since the server's statistics were reset, auto and by hand."""
    vacuumed_seconds_ago: float | None
    """How long ago the last vacuum ended; None if none since the statistics were reset."""

    @property
    def total_bytes(self) -> int:
        return self.heap_bytes + self.index_bytes


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts by queue and status, and the lag of the oldest due pending job."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    due: int = 0
    oldest_due_seconds: float = 0.0

    def total(self, status: str) -> int:
        return sum(by_status.get(status, 0) for by_status in self.counts.values())

