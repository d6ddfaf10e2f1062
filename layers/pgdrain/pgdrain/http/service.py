"""The enqueue API's routes as plain functions: a request's parts in, a ``Response`` out.

No Powertools and no AWS here: the enqueue function maps API Gateway events to these calls and
the answers back (``functions/enqueue/app.py``), and tests call them directly. The database is
reached through ``session()``, which the function bounds by its time left; ``ring()`` wakes the
drain after a commit that created a due job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from .. import operator_store, store, waiting
from ..db import Session
from ..enqueue import enqueue_atomically, traced
from ..errors import (
    DatabaseTimeout,
    DatabaseUnavailable,
    DedupeContention,
    InvalidJobError,
    InvalidJobId,
    InvalidSignal,
    QueryFailed,
    UnknownQueue,
    WaitTimeout,
)
from ..registry import Registry
from .requests import (
    ApiError,
    Limits,
    parse_enqueue,
    parse_queue_settings,
    parse_signal,
    parse_wait,
)
from .routes import ROUTES, allowed_methods

SCHEDULE_OPERATIONS = frozenset(("listSchedules", "getSchedule", "setSchedule",
                                 "deleteSchedule", "pauseSchedule", "resumeSchedule"))

BAD_ID = "the job id must be an integer from 1 to 9223372036854775807"


@dataclass(frozen=True, slots=True)
class LogLine:
    """A log line an answer asks for: its level, message and structured fields."""

    level: Literal["info", "warning", "error"]
    message: str
    fields: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None
    """Logged with its traceback."""


@dataclass
class Response:
    """An answer: status, JSON body, extra headers, and the counts it adds to the metrics."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, int] = field(default_factory=dict)
    ring: bool = False
    """Whether the drain should be woken (a job due now was created or requeued)."""
    log: LogLine | None = None
    """The line the function logs for this answer, if any."""
    drop_connection: bool = False
    """Whether the database connection must be dropped (it may be mid-protocol)."""


@dataclass(frozen=True, slots=True)
class Request:
    """What the routes read of an HTTP request (headers by lower-case name)."""

    body: str | None
    base64_encoded: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    path_params: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)


class EnqueueApi:
    """The routes of the enqueue function."""

    def __init__(self, *, registry: Registry, limits: Limits,
                 session: Callable[[], Session],
                 wait_budget: Callable[[], float] | None = None, wait_listens: bool = True,
                 time_left: Callable[[], float] | None = None):
        self.registry = registry
        self.limits = limits
        self.session = session
        self.wait_budget = wait_budget
        """Seconds a ``?wait=`` may still take (the invocation's time left less its margin);
        None: as long as asked."""
        self.wait_listens = wait_listens
        """Whether a ``?wait=`` LISTENs (not behind a pooler: ``pgdrain.wait``'s ``listen``)."""
        self.time_left = time_left or (lambda: 20.0)
        """The invocation's seconds left (a bulk action acts for half of them)."""

    def handle(self, operation_id: str, request: Request) -> Response:
        """Serve the route ``operation_id`` (``http.routes``); raises ApiError to refuse."""
        if operation_id == "enqueueJobs":
            return self.enqueue_jobs(request.body, base64_encoded=request.base64_encoded,
                                     content_type=request.headers.get("content-type"),
                                     idempotency_key=request.headers.get("idempotency-key"),
                                     headers=request.headers)
        if operation_id == "getJob":
            return self.get_job(request.path_params["id"], wait=request.query.get("wait"))
        if operation_id == "retryJob":
            return self.retry_job(request.path_params["id"])
        if operation_id == "cancelJob":
            return self.cancel_job(request.path_params["id"])
        if operation_id == "setQueue":
            return self.set_queue(request.path_params["queue"], request.body,
                                  base64_encoded=request.base64_encoded,
                                  content_type=request.headers.get("content-type"))
        if operation_id == "sendSignal":
            return self.send_signal(request.path_params["name"], request.body,
                                    base64_encoded=request.base64_encoded,
                                    content_type=request.headers.get("content-type"))
        if operation_id in ("cancelJobs", "requeueJobs", "deleteJobs"):
            return self.bulk(operation_id, request)
        if operation_id in SCHEDULE_OPERATIONS:
            from .schedule_routes import serve

            return serve(self.session, operation_id, request.path_params.get("name"),
                         request.body, base64_encoded=request.base64_encoded,
                         content_type=request.headers.get("content-type"))
        if operation_id in ("pauseQueue", "resumeQueue"):
            return self.set_paused(request.path_params["queue"],
                                   paused=operation_id == "pauseQueue")
        raise LookupError(f"no operation {operation_id!r} in the enqueue API")

    def enqueue_jobs(self, body: str | None, *, base64_encoded: bool,
                     content_type: str | None, idempotency_key: str | None,
                     headers: Mapping[str, str] | None = None) -> Response:
        """``POST /jobs``: 201 with the new ids, 200 when every job was a live duplicate.
        Each job keeps the caller's sampled trace context (the function's X-Ray trace, else
        the request's ``X-Amzn-Trace-Id``; its ``traceparent``)."""
        request = parse_enqueue(body, base64_encoded=base64_encoded, content_type=content_type,
                                idempotency_key=idempotency_key, registry=self.registry,
                                limits=self.limits)
        try:
            results = enqueue_atomically(self.session(), traced(request.jobs, headers))
        except InvalidJobError as exc:  # a graph's (a cycle, an unknown parent): none inserted
            index = exc.index if request.batch else None
            where = ".".join(p for p in (f"jobs[{index}]" if index is not None else "",
                                         exc.field) if p)
            message = str(exc).split(": ", 1)[-1]
            raise ApiError(422, f"{where}: {message}" if where else message,
                           {"field": where or None,
                            **({"index": index} if index is not None else {})}) from None
        created = sum(r.created for r in results)
        answer: dict[str, Any] = {"ids": [r.id for r in results]}
        if created < len(results):
            answer["created"] = [r.created for r in results]
        return Response(201 if created else 200, answer,
                        metrics={"JobsEnqueued": created, "DuplicateJobs": len(results) - created},
                        ring=any(r.created and r.due for r in results),
                        log=LogLine("info", "enqueued", {
                            "ids": answer["ids"], "jobs_created": created,
                            "job_types": sorted({j.job_type for j in request.jobs})}))

    def get_job(self, raw_id: str, *, wait: str | None = None) -> Response:
        """``GET /jobs/{id}``: the job, or 404. With ``?wait=N`` (seconds, at most 25 and the
        invocation's time left), a long poll: answered as soon as the job is finished (done,
        failed, cancelled), else after N seconds with the job as it stands (200 either way:
        the client reads ``status``)."""
        ident = job_id(raw_id)
        seconds = parse_wait(wait)
        if seconds is None:
            job = store.get_job(self.session(), ident)
        else:
            job = self._waited(ident, seconds)
        if job is None:
            raise ApiError(404, f"no job with id {ident} (a done job is not kept unless "
                                "PGDRAIN_RETENTION_SECONDS is set, an ended one after "
                                "its retention)", {"id": ident})
        return Response(200, job_view(job), metrics={"JobLookups": 1})

    def _waited(self, ident: int, seconds: float) -> dict[str, Any] | None:
        if self.wait_budget is not None:
            seconds = max(0.0, min(seconds, self.wait_budget()))
        try:
            return waiting.wait(self.session(), ident, timeout=seconds,
                                listen=self.wait_listens)
        except WaitTimeout as exc:
            return exc.job
        except InvalidJobId:  # the id is valid (parsed above): no such job, or gone
            return None

    def retry_job(self, raw_id: str) -> Response:
        """``POST /jobs/{id}/retry``: a failed job pending again, or why not (404, 409)."""
        ident = job_id(raw_id)
        session = self.session()
        if operator_store.requeue_failed(session, ids=[ident]):
            job = store.get_job(session, ident)
            assert job is not None
            return Response(200, job_view(job), metrics={"JobsRequeued": 1}, ring=True)
        job = store.get_job(session, ident)
        if job is None:
            raise ApiError(404, f"no job with id {ident}", {"id": ident})
        holder = job["status"] == "failed" and job["dedupe_key"] is not None and \
            store.live_job_with_key(session, job["dedupe_key"])
        if holder:
            raise ApiError(409, f"job {ident}'s dedupe_key is held by live job {holder}; "
                                "it can be retried once that job has finished",
                           {"id": ident, "status": "failed", "held_by": holder})
        raise ApiError(409, f"job {ident} is {job['status']}; only failed jobs can be retried",
                       {"id": ident, "status": job["status"]})


    def cancel_job(self, raw_id: str) -> Response:
        """``POST /jobs/{id}/cancel``: a pending job cancelled (it never runs) or a running one
        asked to stop (200 with the job); 404; 409 when it had finished."""
        ident = job_id(raw_id)
        session = self.session()
        outcome = operator_store.cancel(session, [ident])[ident]
        if outcome == "not_found":
            raise ApiError(404, f"no job with id {ident}", {"id": ident})
        if outcome.startswith("already_"):
            status = outcome.removeprefix("already_")
            raise ApiError(409, f"job {ident} is {status}; only pending and running jobs can "
                                "be cancelled", {"id": ident, "status": status})
        job = store.get_job(session, ident)
        assert job is not None
        return Response(200, job_view(job), metrics={"JobsCancelled": 1},
                        log=LogLine("info", "cancel", {"id": ident, "outcome": outcome}))

    def bulk(self, operation_id: str, request: Request) -> Response:
        """``POST /jobs/cancel|requeue|delete``: count what a filter selects (no ``upto``),
        or act on it up to ``upto`` (http.bulk_api)."""
        from . import bulk_api

        match, upto, batch = bulk_api.parse(
            request.body, base64_encoded=request.base64_encoded,
            content_type=request.headers.get("content-type"))
        body = bulk_api.answer(self.session(), operation_id, match, upto, batch,
                               self.time_left)
        acted = body.get("outcomes", {})
        return Response(200, body, metrics={"BulkJobs": body.get("jobs", 0)},
                        ring=bool(acted.get("requeued")),
                        log=LogLine("info", f"bulk {body['action']}", {
                            "filter": match.given(), "upto": upto, "outcomes": acted,
                            "next_upto": body.get("next_upto")}))

    def set_paused(self, queue: str, *, paused: bool) -> Response:
        """``POST /queues/{queue}/pause`` and ``/resume``: 200 with the queue's state; 404 for
        a queue no job names and never paused; 422 for a name that cannot be a queue's."""
        from ..control import pause, resume

        state = _queue_change(queue, lambda: (pause if paused else resume)(self.session(),
                                                                          queue))
        return Response(200, job_view(state),
                        metrics={"QueuePauses" if paused else "QueueResumes": 1},
                        log=LogLine("info", "pause" if paused else "resume",
                                    {"queue": queue}))

    def set_queue(self, queue: str, body: str | None, *, base64_encoded: bool,
                  content_type: str | None = None) -> Response:
        """``PUT /queues/{queue}`` with ``{"max_running": N, "rate": "10/s"}`` (either; null
        lifts it): 200 with the queue's state; 404 for an unknown queue; 400/422 for a body
        that is not one, 415 for one declared other than JSON (as ``POST /jobs``)."""
        from ..control import set_queue

        settings = parse_queue_settings(body, base64_encoded=base64_encoded,
                                        content_type=content_type)
        state = _queue_change(queue, lambda: set_queue(
            self.session(), queue, **settings))
        return Response(200, job_view(state), metrics={"QueueSettingsChanged": 1},
                        log=LogLine("info", "queue set", {"queue": queue, **settings}))


    def send_signal(self, name: str, body: str | None, *, base64_encoded: bool,
                    content_type: str | None = None) -> Response:
        """``POST /signals/{name}`` with ``{"payload": ..., "keep_seconds": N}``: 200 with the
        jobs it made due (``woken``) and until when it is kept; 422 for a name, payload or
        retention it cannot have, nothing sent. Committed before the answer; the drain is
        rung when a job became due."""
        from ..signals import signal

        fields = parse_signal(body, base64_encoded=base64_encoded, content_type=content_type)
        session = self.session()
        try:
            with session.transaction():
                sent = signal(session, name, **fields)
        except InvalidSignal as exc:
            raise ApiError(422, str(exc), {"field": exc.field}) from None
        kept = sent.kept_until
        return Response(200, {"name": name, "woken": list(sent.woken),
                              "kept_until": kept.isoformat() if isinstance(kept, datetime)
                              else kept},
                        metrics={"SignalsSent": 1, "JobsWoken": len(sent.woken)},
                        ring=bool(sent.woken),
                        log=LogLine("info", "signal", {"woken": len(sent.woken)}))


def _queue_change(queue: str, change: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a control's ``change`` of ``queue``; an unknown queue is a 404, a name or value
    that cannot be one a 422 naming the field."""
    try:
        return change()
    except UnknownQueue as exc:
        raise ApiError(404, str(exc), {"queue": queue[:200]}) from None
    except InvalidJobError as exc:
        raise ApiError(422, str(exc), {"field": exc.field}) from None


def job_id(raw: str) -> int:
    """A path's job id, or ApiError 400 (before int() sees 4,300 digits)."""
    try:
        return store.job_id(raw)
    except InvalidJobId:
        raise ApiError(400, BAD_ID, {"id": raw[:64]}) from None


def job_view(job: dict[str, Any]) -> dict[str, Any]:
    """A job (or a queue's state) as the API shows it: timestamps in ISO 8601, the lease token
    kept back."""
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in job.items()
            if k != "lease_token"}


def error_response(error: Exception, request_id: str | None) -> Response:
    """The answer to a request that raised ``error``: a refusal (4xx), the database failing
    (503), or anything else (500)."""
    if isinstance(error, ApiError):
        return refused(error)
    if isinstance(error, DatabaseUnavailable | QueryFailed | DedupeContention):
        return unavailable(error, request_id)
    return internal_error(request_id, error)


def refused(error: ApiError) -> Response:
    """A refusal (4xx): what is wrong, and nothing changed."""
    return Response(error.status, error.body(), metrics={"RequestsRefused": 1},
                    log=LogLine("info", "request refused",
                                {"status": error.status, "error": error.message}))


def no_route(method: str, path: str, function: str = "enqueue") -> Response:
    """An unknown path (404), or a known path with another method (405 and ``Allow``).

    A path that ``routes.match`` finds is served, whatever its parameters hold: the route
    checks them (a job id answers 400, a queue name 422), so this never guesses which
    parameter was wrong."""
    allowed = allowed_methods(path, function)
    if allowed:
        return Response(405, {"error": f"{method} is not allowed on {path}",
                               "details": {"allow": ", ".join(allowed)}},
                        {"Allow": ", ".join(allowed)}, metrics={"RequestsRefused": 1})
    routes = [f"{r.method} {r.path}" for r in ROUTES if r.function == function]
    return Response(404, {"error": f"no route {path}", "details": {"routes": routes}},
                    metrics={"RequestsRefused": 1})


def unavailable(error: BaseException, request_id: str | None) -> Response:
    """The database failed or was too slow (503): what to do, and the request id that finds
    the details in the log. Never the server's error fields, host or user.

    The request may or may not have committed: a client retrying with the same
    Idempotency-Key gets the existing job instead of a duplicate.
    """
    if isinstance(error, DedupeContention):
        return Response(503, {"error": str(error), "request_id": request_id},
                        {"Retry-After": "1"}, metrics={"RequestsRefused": 1},
                        log=LogLine("warning", "dedupe contention",
                                    {"error": str(error)}))
    log = LogLine("error", "database error", error=error)
    if isinstance(error, DatabaseTimeout):
        return Response(503, {"error": "the database did not answer in time; retry with the "
                                       "same Idempotency-Key", "request_id": request_id},
                        {"Retry-After": "1"}, metrics={"DatabaseErrors": 1}, log=log,
                        drop_connection=True)
    return Response(503, {"error": "the database is unavailable; retry with the same "
                                   "Idempotency-Key", "request_id": request_id},
                    metrics={"DatabaseErrors": 1}, log=log, drop_connection=True)


def internal_error(request_id: str | None, error: BaseException | None = None) -> Response:
    """Anything else (500): the request may be retried; the log has the traceback. A failure
    while a statement was in flight can leave the connection mid-protocol: it is dropped."""
    return Response(500, {"error": "internal error; the request may be retried with the same "
                                   "Idempotency-Key", "request_id": request_id},
                    metrics={"InternalErrors": 1},
                    log=LogLine("error", "unexpected error", error=error),
                    drop_connection=True)
