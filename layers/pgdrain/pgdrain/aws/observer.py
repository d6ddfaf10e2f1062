"""The drain's logs and metrics: each job's outcome as a structured log line, and the
invocation's counts, durations, lags and backlog as EMF metrics (Powertools)."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from .. import store
from ..db import Connector
from ..drain import DrainSummary
from ..errors import DatabaseUnavailable, Discard
from ..models import Job, QueueBacklog
from ..settings import DEFAULT_METRIC_QUEUES

_OUTCOME_METRICS = {"done": "JobsDone", "retried": "JobsRetried",
                    "released": "JobsReleased", "snoozed": "JobsSnoozed",
                    "stale": "StaleWrites"}
YEAR_ONE = datetime(1, 1, 1, tzinfo=UTC)


class DrainObserver:
    """Logs each job's outcome; keeps a uniform sample of durations and queue lags.

    Per-job metric values go out as a sample of at most SAMPLE_SIZE per invocation (one EMF
    document's worth): adding every value through Powertools cost more than the drain's SQL.
    CloudWatch's percentiles are then estimated from the sample; the counts stay exact.
    """

    SAMPLE_SIZE = 100

    def __init__(self, logger: Logger, metrics: Metrics,
                 metric_queues: int = DEFAULT_METRIC_QUEUES) -> None:
        self.logger = logger
        self.metrics = metrics
        self.metric_queues = metric_queues
        self.seen = 0
        self.durations: list[float] = []
        self.lags: list[float] = []
        self.done: list[tuple[str, str, int, int, float]] = []

    def job_finished(self, job: Job, outcome: str, duration: float,
                     error: BaseException | None) -> None:
        if outcome == "done":
            # One line per claimed batch lists its done jobs (log_done): a formatted line per
            # job cost more than the SQL of a short job. Every other outcome gets a line of
            # its own.
            self.done.append((job.queue, job.job_type, job.id, job.attempts, duration))
            self._sample(job, duration)
            return
        fields = {"job_id": job.id, "job_type": job.job_type, "attempt": job.attempts,
                  "outcome": outcome, "duration_ms": round(duration * 1000, 1),
                  "queue": job.queue}
        if outcome in ("retried", "failed", "snoozed") and error is not None:
            fields["error"] = f"{type(error).__name__}: {error}"[:1000]
            if outcome == "snoozed":
                self.logger.info("job snoozed", extra=fields)
            else:
                # A traceback only where there is one (not for "no handler registered"), and
                # not for a deliberate Discard: its message says it all.
                trace = (error if error.__traceback__ is not None
                         and not isinstance(error, Discard) else None)
                self.logger.warning("job %s", outcome, extra=fields, exc_info=trace)
        else:
            self.logger.info("job %s", outcome, extra=fields)
        if outcome in ("retried", "failed"):
            self._sample(job, duration)

    def _sample(self, job: Job, duration: float) -> None:
        self.seen += 1
        if len(self.durations) < self.SAMPLE_SIZE:
            slot = len(self.durations)
            self.durations.append(0.0)
            self.lags.append(0.0)
        else:
            slot = random.randrange(self.seen)  # reservoir sampling: every job equally likely
            if slot >= self.SAMPLE_SIZE:
                return
        # A claimed job's run_at is past, so one Python has no datetime for is -infinity or a
        # BC date (text): it waited at least since year 1, as the backlog's OldestDueAge counts.
        run_at = job.run_at if isinstance(job.run_at, datetime) else YEAR_ONE
        lag = (job.claimed_at - run_at).total_seconds()
        self.durations[slot] = duration * 1000
        self.lags[slot] = max(lag, 0.0)

    def batch_finished(self) -> None:
        self.log_done()

    def log_done(self) -> None:
        """The done jobs since the last line, in one line: grouped by queue and type, each
        group's ids with their attempts and durations in the same order. A dict per job cost
        three times as much to build and encode as the lists."""
        if not self.done:
            return
        groups: dict[tuple[str, str], tuple[list[int], list[int], list[float]]] = {}
        for queue, job_type, job_id, attempt, duration in self.done:
            group = groups.get((queue, job_type))
            if group is None:
                group = groups[queue, job_type] = ([], [], [])
            group[0].append(job_id)
            group[1].append(attempt)
            group[2].append(round(duration * 1000, 1))
        jobs = [{"queue": queue, "job_type": job_type, "job_ids": ids, "attempts": attempts,
                 "duration_ms": durations}
                for (queue, job_type), (ids, attempts, durations) in groups.items()]
        self.logger.info("jobs done", extra={"outcome": "done", "done": len(self.done),
                                             "jobs": jobs})
        self.done = []

    def record(self, summary: DrainSummary, connector: Connector) -> None:
        """The invocation's metrics: counts from ``summary``, the sampled durations and lags,
        the backlog (an indexed read, bounded like every statement of the invocation) and the
        jobs table's size and dead rows (the server's statistics)."""
        add = self.metrics.add_metric
        self._add_values("JobDuration", MetricUnit.Milliseconds, self.durations)
        self._add_values("QueueLag", MetricUnit.Seconds, self.lags)
        add("JobsClaimed", MetricUnit.Count, summary.claimed)
        add("LeasesReclaimed", MetricUnit.Count, summary.reclaimed)
        add("LeasesRefunded", MetricUnit.Count, summary.reclaimed_refunded)
        for outcome, name in _OUTCOME_METRICS.items():
            add(name, MetricUnit.Count, getattr(summary, outcome))
        # The dead-letter alarm watches JobsFailed: every job that ended failed in this
        # invocation, the janitor's included.
        add("JobsFailed", MetricUnit.Count,
            summary.failed + summary.reclaimed_failed + summary.expired)
        add("JobsExpired", MetricUnit.Count, summary.expired)
        add("JobsScheduled", MetricUnit.Count, summary.scheduled)
        # Handlers that ignored their limit and outlived the invocation; drains this one
        # started (continuation, fan-out); and a drain that found every slot taken.
        add("HandlersAbandoned", MetricUnit.Count, summary.abandoned)
        add("DrainsStarted", MetricUnit.Count, summary.continued)
        if summary.stopped == "busy":
            add("DrainsBusy", MetricUnit.Count, 1)
            return
        if summary.stopped == "database_error":
            add("DrainErrors", MetricUnit.Count, 1)
            return
        try:
            session = connector.session()
            backlog, health = store.backlog_by_queue(session), store.table_health(session)
        except Exception as exc:  # the drain's work is done: a metric must not undo its answer
            if isinstance(exc, DatabaseUnavailable):
                connector.discard()
            self.logger.warning("backlog metrics skipped: %s", exc, exc_info=exc)
            return
        # What should be running: the oldest-due alarm watches it. A paused queue's jobs
        # wait on purpose, so they count apart (PausedBacklog) and page nobody.
        add("Backlog", MetricUnit.Count, backlog.due)
        add("OldestDueAge", MetricUnit.Seconds, backlog.oldest_due_seconds)
        add("PausedBacklog", MetricUnit.Count, backlog.paused_due)
        add("QueuesPaused", MetricUnit.Count, backlog.queues_paused)
        self._per_queue(backlog.queues[:self.metric_queues])
        # The seed's named limit: a table that keeps growing, or dead rows vacuum does not
        # keep up with (docs/operations.md, "Running hot").
        add("JobsTableBytes", MetricUnit.Bytes, health.total_bytes)
        add("JobsDeadRows", MetricUnit.Count, health.dead_rows)

    def _per_queue(self, queues: Sequence[QueueBacklog]) -> None:
        """One EMF document per queue (CloudWatch takes a document's dimension values for all
        its metrics), so that one busy queue cannot hide another; the longest waits only,
        so the metrics a stack makes stay bounded."""
        if not queues:
            return
        namespace, service = self.metrics.namespace, self.metrics.service
        timestamp = int(time.time() * 1000)
        for queue in queues:
            print(json.dumps({
                "_aws": {"Timestamp": timestamp, "CloudWatchMetrics": [{
                    "Namespace": namespace, "Dimensions": [["service", "queue"]],
                    "Metrics": [{"Name": "QueueBacklog", "Unit": "Count"},
                                {"Name": "QueueOldestDueAge", "Unit": "Seconds"}]}]},
                "service": service, "queue": queue.queue, "paused": queue.paused,
                "QueueBacklog": queue.due,
                "QueueOldestDueAge": round(queue.oldest_due_seconds, 3)}), flush=True)

    def _add_values(self, name: str, unit: MetricUnit, values: list[float]) -> None:
        """Add a metric's sampled values. The first goes through ``add_metric`` (it checks
        the name and unit); the rest are appended to the same entry, because ``add_metric``
        formats the metric's whole list of values for a debug line on every call: a
        hundred values cost a hundred times that, milliseconds per invocation."""
        if not values:
            return
        self.metrics.add_metric(name, unit, values[0])
        entry = self.metrics.metric_set.get(name)
        if entry is None:  # flushed at once (a hundred metrics): add one at a time
            for value in values[1:]:
                self.metrics.add_metric(name, unit, value)
            return
        entry["Value"].extend(float(value) for value in values[1:])
