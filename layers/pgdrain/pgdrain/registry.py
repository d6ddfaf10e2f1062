"""Job handlers by job type: the ``@pgdrain.job`` decorator and the modules named in
``PGDRAIN_JOBS``.

Both functions import the job modules: the drain to run the handlers, the enqueue function to
know the job types and their payload models. A job module should therefore import what its
handlers need inside the handlers, so the enqueue function does not pay for it at cold start.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .errors import ConfigError
from .policy import DEFAULT_POLICY, Backoff, BackoffFunction, TypePolicy

if TYPE_CHECKING:
    from .cron import Cron
    from .flow import Rate

DEFAULT_JOB_MODULES = "jobs"
"""Every module of ``layers/pgdrain/jobs/``, where a stack's own handlers go."""


@dataclass(frozen=True, slots=True)
class Handler:
    """A registered handler and its per-type options."""

    job_type: str
    func: Callable[..., Any]
    max_attempts: int | None = None
    """Attempts for jobs enqueued without an explicit ``max_attempts``; None: the default, 3."""
    timeout: float | None = None
    """Seconds the handler may run; None: ``PGDRAIN_JOB_TIMEOUT_SECONDS``."""
    transactional: bool = False
    """Call ``func(job, conn)`` inside a transaction that also marks the job done."""
    payload_model: Any = None
    """A type the payload is validated and parsed into (see pgdrain.payload)."""
    policy: TypePolicy = DEFAULT_POLICY
    """The type's own backoff and ``retry_on`` (see policy.decide)."""
    concurrency: int | None = None
    """Most jobs of this type one drain runs at once; None: up to PGDRAIN_CONCURRENCY."""
    is_async: bool = False
    """An ``async def`` handler: run on the drain's event loop, concurrently with others."""
    on_failed: Callable[[dict[str, Any], str | None], Any] | None = None
    """Called once for every job of this type that ends failed (see pgdrain.hooks)."""
    rate: Rate | None = None
    """At most this many starts of this type per period, across all drains (pgdrain.flow)."""
    resumable: bool = False
    """Its jobs save state (``job.checkpoint``) and resume from it (``job.state``): a run
    that saved one and ran out of time continues, due again with no attempt spent."""
    batch_size: int | None = None
    """A batch handler: called with a list of up to this many jobs of its type at once
    (pgdrain.batches); None: one job a call."""
    batch_window: float = 0.0
    """Seconds a batch type's due jobs wait to fill a batch before a partial one is claimed."""


MAX_BATCH_SIZE = 10_000
"""The largest batch_size (SQS's own cap for a Lambda's batch)."""
MAX_BATCH_WINDOW = 300.0
"""The longest batch_window in seconds (SQS's MaximumBatchingWindowInSeconds')."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """A periodic job: at each tick of ``cron`` a job of ``job_type`` with ``payload`` and
    ``options`` (queue, priority, max_attempts, ttl_seconds, expires_at...) is enqueued once.
    ``name`` is its identity in the database: renamed or removed, the entry stops."""

    name: str
    cron: Cron
    job_type: str
    payload: dict[str, Any]
    options: dict[str, Any]

    @property
    def queue(self) -> str:
        return str(self.options.get("queue", "default"))


Kind = Literal["middleware", "start", "finish"]


@dataclass(frozen=True, slots=True)
class Layer:
    """One registered middleware or hook (pgdrain.middleware)."""

    kind: Kind
    func: Callable[..., Any]
    is_async: bool = False

    def applies_to(self, handler: Handler) -> bool:
        return self.kind != "middleware" or self.is_async == handler.is_async


class Registry:
    """Maps job types to handlers, and names to schedule entries; registering a type or a
    schedule name twice is an error."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._schedules: dict[str, Schedule] = {}
        self._layers: tuple[Layer, ...] = ()
        self.wrapped_cache: dict[str, tuple[Handler, tuple[Layer, ...], Handler]] = {}
        """Each handler with the middleware around it (pgdrain.middleware.applied)."""
        self.stored_schedules = True
        """Whether a drain with this registry ticks the schedules stored in the database
        (pgdrain.schedule(conn, ...)); pgdrain.testing.run_job's drain does not."""

    def register(self, handler: Handler) -> None:
        existing = self._handlers.get(handler.job_type)
        if existing is not None and existing.func is not handler.func:
            raise ConfigError(f"job_type {handler.job_type!r} is registered twice "
                              f"({_name(existing.func)} and {_name(handler.func)})")
        self._handlers[handler.job_type] = handler

    def add_schedule(self, entry: Schedule) -> None:
        existing = self._schedules.get(entry.name)
        if existing is not None and existing != entry:
            raise ConfigError(f"schedule {entry.name!r} is declared twice (give each entry "
                              "its own name=)")
        self._schedules[entry.name] = entry

    def add_layer(self, layer: Layer) -> None:
        """Register a middleware or hook (pgdrain.middleware); once, in order."""
        if layer not in self._layers:
            self._layers = (*self._layers, layer)

    def layers(self) -> tuple[Layer, ...]:
        return self._layers

    def type_rates(self) -> dict[str, Rate]:
        """The job types with a rate limit, and their rates."""
        return {h.job_type: h.rate for h in self._handlers.values() if h.rate is not None}

    def batch_types(self) -> dict[str, Handler]:
        """The batch handlers (``batch_size=``), by job type."""
        return {h.job_type: h for h in self._handlers.values() if h.batch_size is not None}

    def hooked_types(self) -> list[str]:
        """The job types with an on_failed hook."""
        return sorted(h.job_type for h in self._handlers.values() if h.on_failed is not None)

    def schedules(self) -> list[Schedule]:
        return [self._schedules[n] for n in sorted(self._schedules)]

    def schedule_names(self) -> set[str]:
        return set(self._schedules)

    def get(self, job_type: str) -> Handler | None:
        return self._handlers.get(job_type)

    def job_types(self) -> list[str]:
        return sorted(self._handlers)

    def __contains__(self, job_type: object) -> bool:
        return job_type in self._handlers

    def __iter__(self) -> Iterator[Handler]:
        return iter(self._handlers.values())

    def __len__(self) -> int:
        return len(self._handlers)


REGISTRY = Registry()
"""The registry ``@pgdrain.job`` adds to, and the functions read."""


def job(
    job_type: str,
    *,
    max_attempts: int | None = None,
    timeout: float | None = None,
    transactional: bool = False,
    payload: Any = None,
    backoff: Backoff | BackoffFunction | None = None,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] | None = None,
    concurrency: int | None = None,
    cron: str | None = None,
    tz: str | None = None,
    on_failed: Callable[[dict[str, Any], str | None], Any] | None = None,
    rate: str | None = None,
    resumable: bool = False,
    batch_size: int | None = None,
    batch_window: float | None = None,
    registry: Registry | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the handler of ``job_type``.

    The handler receives the claimed ``pgdrain.Job`` (``job.payload``, ``job.attempts``,
    ``job.idempotency_key``, ...); with ``transactional=True`` it also receives a pg8000
    connection inside an open transaction, and its writes commit together with the job's
    ``done`` (or roll back with its failure). Returning means done. Raising ``pgdrain.Snooze``
    runs it again later, ``pgdrain.Discard`` fails it at once, anything else retries with
    backoff until ``max_attempts``.

    ``payload`` names a dataclass the payload must match (``pgdrain.payload``): enqueueing
    checks it, and the handler receives the parsed instance as ``job.payload``.

    ``backoff`` replaces the drain's backoff for this type: a ``pgdrain.Backoff``, or a
    function ``(attempt, error) -> seconds`` (``error`` is None when the lease expired).
    ``retry_on`` names the exception types worth a retry (a class or a tuple); any other error
    fails the job at once. A time limit that ran out is always retried.

    ``concurrency`` caps how many jobs of this type one drain runs at once (below
    ``PGDRAIN_CONCURRENCY``). An ``async def`` handler runs on the drain's event loop, many at
    once; a plain one on a worker thread.

    ``cron`` (five fields, ``"0 * * * *"``; in UTC unless ``tz`` names a zone) makes the type
    periodic: the drains enqueue one job with an empty payload at each tick (the schedule entry
    is named after the type). For a payload, another queue or several schedules of one type,
    use ``pgdrain.schedule`` (pgdrain.scheduler).

    ``on_failed(job, error)`` is called once for every job of this type that ends ``failed``:
    out of attempts, discarded, its lease lost once too often, expired. ``job`` is the failed
    job as ``pgdrain.get_job`` shows it, ``error`` its last error. It runs as a job of its own
    (type ``pgdrain.on-failed``), enqueued by the transaction that failed the job, and is retried
    like any job if it raises.

    ``rate`` (``"100/min"``, ``"10/s"``, ``"3/10s"``) allows at most that many starts of this
    type in any such period, across all drains (pgdrain.flow); the rest wait, pending and
    uncharged.

    ``resumable=True`` is for a job longer than an invocation: the handler saves where it is
    with ``job.checkpoint(state)`` and starts from ``job.state`` (None the first time). A run
    that ends by raising ``pgdrain.Continue``, or runs out of time after saving a checkpoint,
    puts the job straight back without spending an attempt; a killed run resumes from the
    last checkpoint once its lease expires. Give it a ``timeout`` for the whole job: each
    invocation runs it for the time it has.

    ``batch_size=N`` makes it a batch handler (pgdrain.batches): it is called with a list of
    up to N jobs of its type (``func(jobs)``, or ``func(jobs, conn)`` when transactional) and
    returns None (all done), a mapping ``{job.id: result}``, or a ``pgdrain.BatchResult``
    naming the items that failed, which retry alone. Raising fails every item, each with its
    own attempts. ``timeout`` is the whole call's. ``batch_window=S`` (seconds, at most 300)
    lets fewer than N due jobs wait up to S seconds, unclaimed, for the batch to fill.
    """
    if not isinstance(job_type, str) or not job_type.strip():
        raise ConfigError("job_type must be a non-empty string")
    if max_attempts is not None and (isinstance(max_attempts, bool) or
                                     not isinstance(max_attempts, int) or max_attempts < 1):
        raise ConfigError(f"{job_type}: max_attempts must be a positive integer")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or not math.isfinite(timeout) or timeout <= 0):
        raise ConfigError(f"{job_type}: timeout must be a positive number of seconds")

    if on_failed is not None and not callable(on_failed):
        raise ConfigError(f"{job_type}: on_failed must be a function (job, error)")
    if concurrency is not None and (isinstance(concurrency, bool) or
                                    not isinstance(concurrency, int) or concurrency < 1):
        raise ConfigError(f"{job_type}: concurrency must be a positive integer")

    size, window = _batching(job_type, batch_size, batch_window, resumable)
    if payload is not None:
        from .payload import check_model  # only job types that declare a model pay for it

        check_model(payload)
    policy = _policy(job_type, backoff, retry_on)
    limit = None
    if rate is not None:
        from .flow import RateError, parse_rate  # only job types with a rate pay for it

        try:
            limit = parse_rate(rate)
        except RateError as exc:
            raise ConfigError(f"{job_type}: rate {exc}") from None
    entry = None
    if cron is not None:
        entry = schedule_entry(job_type, cron, tz, job_type, None, {})
    elif tz is not None:
        raise ConfigError(f"{job_type}: tz= is the time zone of a cron= schedule; give cron= too")

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        # Not `registry or REGISTRY`: an empty Registry is falsy (it has a length).
        target = REGISTRY if registry is None else registry
        is_async = inspect.iscoroutinefunction(func)
        if is_async and transactional:
            raise ConfigError(f"{job_type}: an async def handler cannot be transactional (its "
                              "connection is pg8000's, which blocks); make it a plain def")
        if resumable and transactional:
            raise ConfigError(f"{job_type}: a resumable job saves checkpoints as it goes, "
                              "which a transactional job's one transaction would undo")
        target.register(Handler(job_type, func, max_attempts, timeout, transactional, payload,
                                policy, concurrency, is_async, on_failed, limit,
                                bool(resumable), size, window))
        if entry is not None:
            target.add_schedule(entry)
        return func

    return register


_SCHEDULED_OPTIONS = ("queue", "priority", "max_attempts", "ttl_seconds", "tenant", "tags",
                      "meta")


def schedule_entry(name: Any, cron: str, tz: str | None, job_type: str,
                   payload: dict[str, Any] | None, options: dict[str, Any]) -> Schedule:
    """A schedule entry with its cron parsed and its name and option names checked, or
    ConfigError saying what is wrong (at import). The job's fields are checked by
    ``pgdrain.schedule`` (pgdrain.scheduler), which knows enqueue's rules."""
    if not isinstance(name, str) or not name.strip() or len(name) > 200 or "\x00" in name:
        raise ConfigError(f"schedule name {name!r}: 1 to 200 characters, not blank, no NUL")
    if not isinstance(cron, str):
        raise ConfigError(f"{name}: cron must be a string like '0 * * * *', not {cron!r}")
    unknown = sorted(set(options) - set(_SCHEDULED_OPTIONS))
    if unknown:
        raise ConfigError(f"{name}: a schedule takes {', '.join(_SCHEDULED_OPTIONS)}, not "
                          f"{', '.join(unknown)}")
    from .cron import CronError, parse  # only job modules that declare schedules pay for it

    try:
        parsed = parse(cron, tz)
    except CronError as exc:
        raise ConfigError(f"{name}: {exc}") from None
    if payload is not None and not isinstance(payload, dict):
        raise ConfigError(f"{name}: a schedule's payload is a dict (a JSON object)")
    return Schedule(name, parsed, job_type, dict(payload or {}), dict(options))


def _batching(job_type: str, size: Any, window: Any, resumable: bool) -> tuple[int | None, float]:
    """``batch_size`` and ``batch_window`` checked, or ConfigError saying what is wrong."""
    if size is None:
        if window is not None:
            raise ConfigError(f"{job_type}: batch_window= is how long a batch waits to fill; "
                              "give batch_size= too")
        return None, 0.0
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BATCH_SIZE:
        raise ConfigError(f"{job_type}: batch_size must be an integer from 1 to "
                          f"{MAX_BATCH_SIZE:,}, not {size!r}")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int | float)
                               or not math.isfinite(window)
                               or not 0 <= window <= MAX_BATCH_WINDOW):
        raise ConfigError(f"{job_type}: batch_window must be a number of seconds from 0 to "
                          f"{MAX_BATCH_WINDOW:g}, not {window!r}")
    if resumable:
        raise ConfigError(f"{job_type}: a batch handler cannot be resumable (a checkpoint is "
                          "one job's)")
    return size, float(window or 0.0)


def _policy(job_type: str, backoff: Any, retry_on: Any) -> TypePolicy:
    if backoff is not None and not (isinstance(backoff, Backoff) or callable(backoff)):
        raise ConfigError(f"{job_type}: backoff must be a pgdrain.Backoff or a function "
                          "(attempt, error) -> seconds")
    if isinstance(retry_on, type):
        retry_on = (retry_on,)
    if retry_on is not None and not (
            isinstance(retry_on, tuple) and retry_on
            and all(isinstance(t, type) and issubclass(t, BaseException) for t in retry_on)):
        raise ConfigError(f"{job_type}: retry_on must be an exception class or a tuple of them")
    if backoff is None and retry_on is None:
        return DEFAULT_POLICY
    return TypePolicy(backoff=backoff, retry_on=retry_on)


def load_job_modules(spec: str | None) -> list[str]:
    """Import the comma-separated modules in ``spec`` (``PGDRAIN_JOBS``); returns their names."""
    names = [m.strip() for m in (spec or DEFAULT_JOB_MODULES).split(",") if m.strip()]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            where = ("" if spec else f" (the default: the job modules in the layer's "
                                     f"layers/pgdrain/{DEFAULT_JOB_MODULES}/ folder; set "
                                     "PGDRAIN_JOBS to yours)")
            raise ConfigError(f"PGDRAIN_JOBS: cannot import job module {name!r}{where}: "
                              f"{exc}") from exc
    return names


def _name(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)}"
