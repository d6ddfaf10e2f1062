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
from typing import Any

from .errors import ConfigError
from .policy import DEFAULT_POLICY, Backoff, BackoffFunction, TypePolicy

DEFAULT_JOB_MODULES = "pgdrain_jobs.examples,pgdrain_jobs.webhook"


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


class Registry:
    """Maps job types to handlers; registering a type twice is an error."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def register(self, handler: Handler) -> None:
        existing = self._handlers.get(handler.job_type)
        if existing is not None and existing.func is not handler.func:
            raise ConfigError(f"job_type {handler.job_type!r} is registered twice "
                              f"({_name(existing.func)} and {_name(handler.func)})")
        self._handlers[handler.job_type] = handler

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
    """
    if not isinstance(job_type, str) or not job_type.strip():
        raise ConfigError("job_type must be a non-empty string")
    if max_attempts is not None and (isinstance(max_attempts, bool) or
                                     not isinstance(max_attempts, int) or max_attempts < 1):
        raise ConfigError(f"{job_type}: max_attempts must be a positive integer")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or not math.isfinite(timeout) or timeout <= 0):
        raise ConfigError(f"{job_type}: timeout must be a positive number of seconds")

    if concurrency is not None and (isinstance(concurrency, bool) or
                                    not isinstance(concurrency, int) or concurrency < 1):
        raise ConfigError(f"{job_type}: concurrency must be a positive integer")

    if payload is not None:
        from .payload import check_model  # only job types that declare a model pay for it

        check_model(payload)
    policy = _policy(job_type, backoff, retry_on)

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        # Not `registry or REGISTRY`: an empty Registry is falsy (it has a length).
        target = REGISTRY if registry is None else registry
        is_async = inspect.iscoroutinefunction(func)
        if is_async and transactional:
            raise ConfigError(f"{job_type}: an async def handler cannot be transactional (its "
                              "connection is pg8000's, which blocks); make it a plain def")
        target.register(Handler(job_type, func, max_attempts, timeout, transactional, payload,
                                policy, concurrency, is_async))
        return func

    return register


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
            raise ConfigError(f"PGDRAIN_JOBS: cannot import job module {name!r}: {exc}") from exc
    return names


def _name(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)}"
