"""The drain function: janitor, then a bounded, deadline-aware drain of due jobs, then exit.

Triggered by the EventBridge schedule (every minute), by ``POST /drain`` through API Gateway,
and by direct or asynchronous invokes (the enqueue function's doorbell). Returns the summary
(``reclaimed``, ``claimed``, ``done``, ``retried``, ``failed``, ``released``, ...); through API
Gateway the same object is the JSON body of a 200.
"""

from __future__ import annotations

import json
import os
import random
from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

import pgdrain
from pgdrain.db import Connector
from pgdrain.drain import drain, shortest_runnable_seconds

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "pgdrain")
logger = Logger(service=SERVICE)
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "pgdrain"),
                  service=SERVICE)

# Settings and job modules load once per container; a bad setting fails the cold start loudly.
SETTINGS = pgdrain.Settings.from_env()
pgdrain.load_job_modules(SETTINGS.job_modules)


def _connect(timeout: float | None = None):
    # Imported here: the credentials module pulls boto3 only for Secrets Manager or IAM auth.
    from pgdrain.credentials import connect_from_env

    return connect_from_env(timeout=timeout)


# Behind a pooler (prepared statements off) the server-side bounds would pin the session.
CONNECTOR = Connector(_connect, prepare=SETTINGS.prepared_statements,
                      server_bounds=SETTINGS.prepared_statements)

_OUTCOME_METRICS = {"done": "JobsDone", "retried": "JobsRetried",
                    "released": "JobsReleased", "snoozed": "JobsSnoozed",
                    "stale": "StaleWrites"}


class _Observer:
    """Logs each job's outcome; keeps a uniform sample of durations and queue lags.

    Per-job metric values go out as a sample of at most SAMPLE_SIZE per invocation (one EMF
    document's worth): adding every value through Powertools cost more than the drain's SQL.
    CloudWatch's percentiles are then estimated from the sample; the counts stay exact.
    """

    SAMPLE_SIZE = 100

    def __init__(self) -> None:
        self.seen = 0
        self.durations: list[float] = []
        self.lags: list[float] = []
        self.done: list[dict[str, Any]] = []

    def job_finished(self, job: pgdrain.Job, outcome: str, duration: float,
                     error: BaseException | None) -> None:
        fields = {"job_id": job.id, "job_type": job.job_type, "attempt": job.attempts,
                  "outcome": outcome, "duration_ms": round(duration * 1000, 1),
                  "queue": job.queue}
        if outcome == "done":
            # One line per claimed batch lists its done jobs: a formatted line per job cost
            # more than the SQL of a short job. Every other outcome gets a line of its own.
            self.done.append(fields)
        elif outcome in ("retried", "failed", "snoozed") and error is not None:
            fields["error"] = f"{type(error).__name__}: {error}"[:1000]
            if outcome == "snoozed":
                logger.info("job snoozed", extra=fields)
            else:
                # A traceback only where there is one (not for "no handler registered").
                trace = error if error.__traceback__ is not None else None
                logger.warning("job %s", outcome, extra=fields, exc_info=trace)
        else:
            logger.info("job %s", outcome, extra=fields)
        if outcome in ("done", "retried", "failed"):
            self._sample(job, duration)

    def _sample(self, job: pgdrain.Job, duration: float) -> None:
        self.seen += 1
        if len(self.durations) < self.SAMPLE_SIZE:
            slot = len(self.durations)
            self.durations.append(0.0)
            self.lags.append(0.0)
        else:
            slot = random.randrange(self.seen)  # reservoir sampling: every job equally likely
            if slot >= self.SAMPLE_SIZE:
                return
        # run_at can be a value Python has no datetime for ('-infinity', a BC date).
        lag = (job.claimed_at - job.run_at).total_seconds() \
            if isinstance(job.run_at, datetime) else 0.0
        self.durations[slot] = duration * 1000
        self.lags[slot] = max(lag, 0.0)

    def batch_finished(self) -> None:
        self.log_done()

    def log_done(self) -> None:
        if self.done:
            logger.info("jobs done", extra={"outcome": "done", "jobs": self.done})
            self.done = []

    def add_metrics(self) -> None:
        for value in self.durations:
            metrics.add_metric("JobDuration", MetricUnit.Milliseconds, value)
        for value in self.lags:
            metrics.add_metric("QueueLag", MetricUnit.Seconds, value)


def _event_kind(event: Any) -> str:
    if isinstance(event, dict):
        if "httpMethod" in event and "requestContext" in event:
            return "api"
        if event.get("source") == "aws.events" or "detail-type" in event:
            return "schedule"
    return "direct"


def _api_response(status: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"statusCode": status, "headers": {"Content-Type": "application/json"},
            "body": json.dumps(body)}


def _record_metrics(summary: pgdrain.drain.DrainSummary, observer: _Observer) -> None:
    observer.add_metrics()
    metrics.add_metric("JobsClaimed", MetricUnit.Count, summary.claimed)
    metrics.add_metric("LeasesReclaimed", MetricUnit.Count, summary.reclaimed)
    metrics.add_metric("LeasesRefunded", MetricUnit.Count, summary.reclaimed_refunded)
    for outcome, name in _OUTCOME_METRICS.items():
        metrics.add_metric(name, MetricUnit.Count, getattr(summary, outcome))
    # The dead-letter alarm watches JobsFailed: every job that ended failed in this
    # invocation, the janitor's included.
    metrics.add_metric("JobsFailed", MetricUnit.Count, summary.failed + summary.reclaimed_failed)
    if summary.stopped == "database_error":
        metrics.add_metric("DrainErrors", MetricUnit.Count, 1)
        return
    try:  # an indexed read, bounded like every statement of the invocation
        backlog = pgdrain.backlog(CONNECTOR.session())
    except Exception as exc:  # the drain's work is done: a metric must not undo its answer
        if isinstance(exc, pgdrain.DatabaseUnavailable):
            CONNECTOR.discard()
        logger.warning("backlog metrics skipped: %s", exc, exc_info=exc)
        return
    metrics.add_metric("Backlog", MetricUnit.Count, backlog.due)
    metrics.add_metric("OldestDueAge", MetricUnit.Seconds, backlog.oldest_due_seconds)


_checked_timeout = False


def _check_timeout(time_left: float) -> None:
    """Once per container: say loudly if this function's timeout cannot run any job."""
    global _checked_timeout
    if _checked_timeout:
        return
    _checked_timeout = True
    usable = time_left - SETTINGS.margin_for(time_left)
    needed = shortest_runnable_seconds(pgdrain.REGISTRY, SETTINGS)
    if usable < needed:
        logger.error(
            "this function's timeout (%.1f s left at the first invocation) cannot run any job: "
            "%.2f s remain after the safety margin and the shortest job needs %.2f s; raise "
            "the function's timeout", time_left, usable, needed,
            extra={"time_left_seconds": round(time_left, 3)})


def _handler(event: Any, context: Any) -> dict[str, Any]:
    request_id = getattr(context, "aws_request_id", None)
    logger.set_correlation_id(request_id)
    kind = _event_kind(event)
    if kind == "api" and event.get("httpMethod") != "POST":
        metrics.add_metric("DrainRequestsRefused", MetricUnit.Count, 1)
        return _api_response(405, {"error": "use POST /drain"})
    _check_timeout(context.get_remaining_time_in_millis() / 1000)
    try:
        observer = _Observer()
        try:
            summary = drain(CONNECTOR, pgdrain.REGISTRY, SETTINGS,
                            time_left=lambda: context.get_remaining_time_in_millis() / 1000,
                            observer=observer)
        finally:
            observer.log_done()
        _record_metrics(summary, observer)
    except Exception:
        # The connection may be mid-transaction or dead: the next invocation starts afresh.
        CONNECTOR.discard()
        metrics.add_metric("DrainErrors", MetricUnit.Count, 1)
        logger.exception("drain failed", extra={"trigger": kind})
        if kind == "api":  # the details are in the log, under this request id
            return _api_response(500, {"error": "the drain failed; see the drain function's "
                                                "log", "request_id": request_id})
        raise
    result = summary.as_dict()
    if summary.stopped == "database_error":
        logger.error("drain stopped on a database failure", extra={"trigger": kind, **result})
        if kind == "api":
            return _api_response(503, {"error": f"the drain stopped: {summary.error}",
                                       "request_id": request_id, "summary": result})
        return result
    logger.info("drain finished", extra={"trigger": kind, **result})
    return _api_response(200, result) if kind == "api" else result


_handler = metrics.log_metrics(logger.inject_lambda_context(_handler))
if SETTINGS.tracing:
    # Powertools' Tracer imports the X-Ray SDK (about a second of cold start): only on request.
    from aws_lambda_powertools import Tracer

    _handler = Tracer(service=SERVICE).capture_lambda_handler(_handler)


def lambda_handler(event: Any, context: Any) -> dict[str, Any]:
    """The function's entry point (``functions/drain/app.py``, ``lambda_handler``)."""
    return _handler(event, context)
