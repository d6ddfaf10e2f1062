"""The enqueue function: the HTTP API in front of the queue (API Gateway REST, proxy events).

- ``POST /jobs``: one job, or ``{"jobs": [...]}`` inserted in one statement; 201 ``{"ids"}``,
  or 200 with the existing ids when a ``dedupe_key`` / ``Idempotency-Key`` matched live jobs;
- ``GET /jobs/{id}``: the job's state, or 404;
- ``POST /jobs/{id}/retry``: requeue a failed job.

Bad input answers 4xx with ``{"error", "details"}`` and inserts nothing. After a commit that
created a due job, the doorbell invokes the drain asynchronously (``DRAIN_FUNCTION_NAME``).
"""

from __future__ import annotations

import os
import re
import time
from datetime import datetime
from typing import Any

import pg8000.native
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.metrics import MetricUnit

import pgdrain
from pgdrain.api import ApiError, Limits, parse_enqueue
from pgdrain.db import Connector
from pgdrain.doorbell import Doorbell
from pgdrain.queue import job_id as parse_job_id
from pgdrain.queue import live_job_with_key

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "pgdrain")
logger = Logger(service=SERVICE)
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "pgdrain"),
                  service=SERVICE)
app = APIGatewayRestResolver()

# Loaded once per container: the job types and payload models (not the handlers' own
# dependencies, which job modules import inside their handlers).
SETTINGS = pgdrain.Settings.from_env()
pgdrain.load_job_modules(SETTINGS.job_modules)
LIMITS = Limits.from_env()
DOORBELL = Doorbell.from_env()


def _connect(timeout: float | None = None) -> pg8000.native.Connection:
    from pgdrain.credentials import connect_from_env

    return connect_from_env(timeout=timeout)


# One statement per request: nothing to gain from preparing, and nothing to pin a pooler.
# Behind a pooler (PGDRAIN_PREPARED_STATEMENTS=false) the server-side bounds would pin it.
CONNECTOR = Connector(_connect, prepare=False, server_bounds=SETTINGS.prepared_statements)
_JOB_PATH = re.compile(r"^/jobs/([^/]+)(/retry)?/?$")


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON,
                    body=body, headers=headers)


def _job_id(raw: str) -> int:
    try:
        return parse_job_id(raw)
    except pgdrain.InvalidJobId:
        raise ApiError(400, "the job id must be an integer from 1 to 9223372036854775807",
                       {"id": raw[:64]}) from None


def _time_left() -> float:
    return app.lambda_context.get_remaining_time_in_millis() / 1000


def _session() -> Any:
    # Every statement of the request is bounded by the function's time left (less a margin
    # to answer in): a database that stops answering gives the client a 503, not a timeout.
    left = _time_left()
    CONNECTOR.open(time.monotonic() + left - SETTINGS.margin_for(left) / 2)
    return CONNECTOR.session()


@app.post("/jobs")
def enqueue() -> Response:
    event = app.current_event
    request = parse_enqueue(
        event.body, base64_encoded=bool(event.is_base64_encoded),
        content_type=event.headers.get("content-type"),
        idempotency_key=event.headers.get("idempotency-key"),
        registry=pgdrain.REGISTRY, limits=LIMITS)
    results = pgdrain.enqueue_atomically(_session(), request.jobs)
    created = sum(r.created for r in results)
    metrics.add_metric("JobsEnqueued", MetricUnit.Count, created)
    metrics.add_metric("DuplicateJobs", MetricUnit.Count, len(results) - created)
    logger.info("enqueued", extra={"ids": [r.id for r in results], "jobs_created": created,
                                   "job_types": sorted({j.job_type for j in request.jobs})})
    if any(r.created and r.due for r in results):
        _ring()
    body: dict[str, Any] = {"ids": [r.id for r in results]}
    if created < len(results):
        body["created"] = [r.created for r in results]
    return _json(201 if created else 200, body)


@app.get("/jobs/<job_id>")
def get_job(job_id: str) -> Response:
    ident = _job_id(job_id)
    job = pgdrain.get_job(_session(), ident)
    if job is None:
        raise ApiError(404, f"no job with id {ident}", {"id": ident})
    metrics.add_metric("JobLookups", MetricUnit.Count, 1)
    return _json(200, _job_view(job))


@app.post("/jobs/<job_id>/retry")
def retry_job(job_id: str) -> Response:
    ident = _job_id(job_id)
    session = _session()
    if pgdrain.requeue_failed(session, ids=[ident]):
        metrics.add_metric("JobsRequeued", MetricUnit.Count, 1)
        _ring()
        return _json(200, _job_view(pgdrain.get_job(session, ident)))
    job = pgdrain.get_job(session, ident)
    if job is None:
        raise ApiError(404, f"no job with id {ident}", {"id": ident})
    holder = job["status"] == "failed" and job["dedupe_key"] is not None and \
        live_job_with_key(session, job["dedupe_key"])
    if holder:
        raise ApiError(409, f"job {ident}'s dedupe_key is held by live job {holder}; "
                            "it can be retried once that job has finished",
                       {"id": ident, "status": "failed", "held_by": holder})
    raise ApiError(409, f"job {ident} is {job['status']}; only failed jobs can be retried",
                   {"id": ident, "status": job["status"]})


def _ring() -> None:
    """Wake the drain for jobs that are due now; never fails the request."""
    outcome = DOORBELL.ring(time_left=_time_left())  # rung, skipped, late, off or failed
    if outcome != "off":
        metrics.add_metric(f"Doorbell{outcome.capitalize()}", MetricUnit.Count, 1)


def _job_view(job: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in job.items()
            if k != "lease_token"}


@app.exception_handler(ApiError)
def _refused(error: ApiError) -> Response:
    metrics.add_metric("RequestsRefused", MetricUnit.Count, 1)
    logger.info("request refused", extra={"status": error.status, "error": error.message})
    return _json(error.status, error.body())


@app.exception_handler(NotFoundError)
def _no_route(error: NotFoundError) -> Response:
    event = app.current_event
    path = event.path or ""
    match = _JOB_PATH.match(path)
    allowed = ("POST" if path.rstrip("/") == "/jobs" else
               "GET" if match and not match.group(2) else "POST" if match else None)
    metrics.add_metric("RequestsRefused", MetricUnit.Count, 1)
    if match and event.http_method == allowed:
        # The right method on /jobs/{id}, but an id no route accepts (a NUL, a slash-less
        # oddity): the id is what is wrong.
        return _json(400, {"error": "the job id must be an integer from 1 to "
                                    "9223372036854775807",
                           "details": {"id": match.group(1)[:64]}})
    if allowed:
        return _json(405, {"error": f"{event.http_method} is not allowed on {path}",
                           "details": {"allow": allowed}}, {"Allow": allowed})
    return _json(404, {"error": f"no route {path}", "details": {
        "routes": ["POST /jobs", "GET /jobs/{id}", "POST /jobs/{id}/retry"]}})


def _request_id() -> str | None:
    return getattr(app.lambda_context, "aws_request_id", None)


def _unavailable(message: str, retry_after: str | None = None) -> Response:
    # What went wrong is in the log under the request id; the client gets what to do.
    return _json(503, {"error": message, "request_id": _request_id()},
                 {"Retry-After": retry_after} if retry_after else None)


@app.exception_handler([pg8000.native.InterfaceError, pg8000.native.DatabaseError,
                        pgdrain.DatabaseUnavailable])
def _database_down(error: Exception) -> Response:
    # The request may or may not have committed if the connection broke mid-way; a client
    # retrying with the same Idempotency-Key gets the existing job instead of a duplicate.
    CONNECTOR.discard()
    metrics.add_metric("DatabaseErrors", MetricUnit.Count, 1)
    logger.exception("database error")
    if isinstance(error, pgdrain.DatabaseTimeout):
        return _unavailable("the database did not answer in time; retry with the same "
                            "Idempotency-Key", "1")
    return _unavailable("the database is unavailable; retry with the same Idempotency-Key")


@app.exception_handler(pgdrain.DedupeContention)
def _contention(error: pgdrain.DedupeContention) -> Response:
    metrics.add_metric("RequestsRefused", MetricUnit.Count, 1)
    logger.warning("dedupe contention", extra={"error": str(error)})
    return _unavailable(str(error), "1")


@app.exception_handler(Exception)
def _unexpected(error: Exception) -> Response:
    # A failure while a statement was in flight can leave the connection mid-protocol: drop
    # it, so one bad request cannot break the container's later ones.
    CONNECTOR.discard()
    metrics.add_metric("InternalErrors", MetricUnit.Count, 1)
    logger.exception("unexpected error")
    return _json(500, {"error": "internal error; the request may be retried with the same "
                                "Idempotency-Key", "request_id": _request_id()})


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The function's entry point (``functions/enqueue/app.py``, ``lambda_handler``)."""
    logger.set_correlation_id(getattr(context, "aws_request_id", None))
    metrics.add_metric("Requests", MetricUnit.Count, 1)
    return app.resolve(event, context)
