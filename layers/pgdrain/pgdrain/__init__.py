"""pgdrain: a background-job queue in one PostgreSQL table, drained by AWS Lambda.

Enqueue from application code, inside your own transaction::

    import pgdrain
    pgdrain.enqueue(conn, "send-email", {"to": "sarah@example.com"})
"""

from __future__ import annotations

from .errors import (
    ConfigError,
    DatabaseConnectError,
    DatabaseTimeout,
    DatabaseUnavailable,
    DedupeContention,
    Discard,
    HandlerTimeout,
    InvalidJobError,
    InvalidJobId,
    MigrationError,
    PgdrainError,
    Snooze,
)
from .models import Backlog, EnqueueResult, JanitorResult, Job, QueueStats, Status, Written
from .policy import Backoff
from .queue import (
    backlog,
    claim,
    complete,
    enqueue,
    enqueue_atomically,
    enqueue_many,
    fail,
    get_job,
    new_job,
    record_failure,
    release,
    requeue_failed,
    retry,
    run_janitor,
    stats,
)
from .registry import REGISTRY, Handler, Registry, job, load_job_modules
from .settings import Settings

__all__ = [
    "REGISTRY",
    "Backlog",
    "Backoff",
    "ConfigError",
    "DatabaseConnectError",
    "DatabaseTimeout",
    "DatabaseUnavailable",
    "DedupeContention",
    "Discard",
    "EnqueueResult",
    "Handler",
    "HandlerTimeout",
    "InvalidJobError",
    "InvalidJobId",
    "JanitorResult",
    "Job",
    "MigrationError",
    "PgdrainError",
    "QueueStats",
    "Registry",
    "Settings",
    "Snooze",
    "Status",
    "Written",
    "backlog",
    "claim",
    "complete",
    "enqueue",
    "enqueue_atomically",
    "enqueue_many",
    "fail",
    "get_job",
    "job",
    "load_job_modules",
    "new_job",
    "record_failure",
    "release",
    "requeue_failed",
    "retry",
    "run_janitor",
    "stats",
]
