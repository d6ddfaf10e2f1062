"""pgdrain: a background-job queue in one PostgreSQL table, drained by AWS Lambda.

Enqueue from application code, inside your own transaction::

    import pgdrain
    pgdrain.enqueue(conn, "send-email", {"to": "sarah@example.com"})

The core (this package) needs pg8000 only. ``pgdrain.http`` holds the enqueue API's contract,
``pgdrain.aws`` the functions' AWS side (credentials, doorbell, logs and metrics).
"""

from __future__ import annotations

from . import sql as _sql
from .batches import BatchItemFailed, BatchResult, JobBatch
from .control import pause, paused_queues, resume, set_queue
from .enqueue import enqueue, enqueue_atomically, enqueue_many, new_job
from .errors import (
    CheckpointNotSaved,
    ConfigError,
    Continue,
    DatabaseConnectError,
    DatabaseTimeout,
    DatabaseUnavailable,
    DedupeContention,
    Discard,
    HandlerTimeout,
    InvalidJobError,
    InvalidJobId,
    InvalidSchedule,
    InvalidSignal,
    MigrationError,
    PgdrainError,
    QueryFailed,
    ScheduleConflict,
    Snooze,
    UnknownQueue,
    UnknownSchedule,
    WaitFor,
    WaitTimeout,
)
from .janitor import run_janitor
from .middleware import middleware, on_finish, on_start
from .models import (
    Backlog,
    EnqueueResult,
    Finish,
    JanitorResult,
    Job,
    NewJob,
    Outcome,
    QueueStats,
    Signal,
    Status,
    Written,
)
from .operator_store import cancel, requeue_failed
from .policy import Backoff, TypePolicy
from .registry import REGISTRY, Handler, Registry, Schedule, job, load_job_modules
from .scheduler import list_schedules, schedule
from .settings import Settings
from .settings import read as _read_setting
from .signals import SignalSent, signal
from .store import (
    backlog,
    claim,
    complete,
    fail,
    finish_many,
    get_job,
    release,
    retry,
    stats,
)
from .stored_schedules import (
    delete_schedule,
    get_schedule,
    pause_schedule,
    resume_schedule,
)
from .version import VERSION as __version__
from .waiting import wait

# Before any statement runs: every statement names pgdrain's objects in PGDRAIN_SCHEMA's
# schema, when one is set. (Here, not in pgdrain.sql, which reads no settings.)
try:
    _sql.use_schema(_read_setting("PGDRAIN_SCHEMA"))
except ConfigError as _refused:
    _sql.refuse_statements(_refused)


def __getattr__(name: str) -> object:
    # The drain (and its time limits) loads only when asked for: `import pgdrain` in an
    # application that only enqueues does not pay for it.
    if name == "record_failure":
        from .drain import record_failure

        return record_failure
    if name == "bulk":  # actions by filter: for operators' code, not the enqueue path
        import importlib

        return importlib.import_module(".bulk", __name__)
    raise AttributeError(f"module 'pgdrain' has no attribute {name!r}")


__all__ = [
    "REGISTRY",
    "Backlog",
    "Backoff",
    "BatchItemFailed",
    "BatchResult",
    "CheckpointNotSaved",
    "ConfigError",
    "Continue",
    "DatabaseConnectError",
    "DatabaseTimeout",
    "DatabaseUnavailable",
    "DedupeContention",
    "Discard",
    "EnqueueResult",
    "Finish",
    "Handler",
    "HandlerTimeout",
    "InvalidJobError",
    "InvalidJobId",
    "InvalidSchedule",
    "InvalidSignal",
    "JanitorResult",
    "Job",
    "JobBatch",
    "MigrationError",
    "NewJob",
    "Outcome",
    "PgdrainError",
    "QueryFailed",
    "QueueStats",
    "Registry",
    "Schedule",
    "ScheduleConflict",
    "Settings",
    "Signal",
    "SignalSent",
    "Snooze",
    "Status",
    "TypePolicy",
    "UnknownQueue",
    "UnknownSchedule",
    "WaitFor",
    "WaitTimeout",
    "Written",
    "__version__",
    "backlog",
    "cancel",
    "claim",
    "complete",
    "delete_schedule",
    "enqueue",
    "enqueue_atomically",
    "enqueue_many",
    "fail",
    "finish_many",
    "get_job",
    "get_schedule",
    "job",
    "list_schedules",
    "load_job_modules",
    "middleware",
    "new_job",
    "on_finish",
    "on_start",
    "pause",
    "pause_schedule",
    "paused_queues",
    "record_failure",
    "release",
    "requeue_failed",
    "resume",
    "resume_schedule",
    "retry",
    "run_janitor",
    "schedule",
    "set_queue",
    "signal",
    "stats",
    "wait",
]
