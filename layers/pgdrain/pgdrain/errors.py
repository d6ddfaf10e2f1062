"""pgdrain's exceptions. Every error pgdrain raises derives from ``PgdrainError``."""

from __future__ import annotations

# models imports nothing of pgdrain: no cycle
from .models import MAX_DELAY_SECONDS, signal_name_problem


class PgdrainError(Exception):
    """Root of pgdrain's errors."""


class ConfigError(PgdrainError, ValueError):
    """A setting is missing or invalid; the message names the setting and what is wrong."""


class InvalidJobError(PgdrainError, ValueError):
    """A job given to enqueue is invalid; nothing was inserted.

    ``field`` names the offending field and ``index`` the item's position in a batch.
    """

    def __init__(self, message: str, *, field: str | None = None, index: int | None = None):
        where = ".".join(p for p in (f"jobs[{index}]" if index is not None else "", field) if p)
        super().__init__(f"{where}: {message}" if where else message)
        self.field = field
        self.index = index


class InvalidSchedule(InvalidJobError):
    """A stored schedule entry ``pgdrain.schedule(conn, ...)`` cannot have: its name, cron,
    zone, job or options (``field`` says which); nothing was written."""


class UnknownSchedule(PgdrainError, LookupError):
    """No schedule entry stored at run time has this name. Nothing changed."""


class ScheduleConflict(PgdrainError, ValueError):
    """A stored schedule entry may not take the name of one a job module declares (nor be
    changed once a drain declared its name). Nothing changed."""


class InvalidJobId(PgdrainError, ValueError):
    """A job id that cannot name a job: not an integer from 1 to 2**63 - 1."""


class WaitTimeout(PgdrainError, TimeoutError):
    """``pgdrain.wait`` ran out of its timeout before the job finished. ``job`` is the job as
    it stood then (``pgdrain.get_job``'s dict: its ``status`` says what it was doing), or None
    if it was deleted in the meantime."""

    def __init__(self, message: str, job: dict[str, object] | None):
        super().__init__(message)
        self.job = job


class UnknownQueue(PgdrainError, LookupError):
    """A queue no job names and nobody set before: probably a typo. Nothing changed."""


class MigrationError(PgdrainError):
    """The database schema could not be brought up to date."""


def server_text(exc: BaseException) -> str:
    """A server's error in one line: its message, detail and hint, and its SQLSTATE; not the
    driver's whole record (severity, source file, line, routine). Any other error: its type
    and text."""
    fields = exc.args[0] if exc.args else None
    if isinstance(fields, dict) and fields.get("M"):
        said = "; ".join(str(fields[k]) for k in ("M", "D", "H") if fields.get(k))
        return f"{said} (SQLSTATE {fields.get('C', '?')})"
    return f"{type(exc).__name__}: {exc}"


class DedupeContention(PgdrainError):
    """The live jobs holding a batch's dedupe keys kept finishing and being replaced by other
    enqueues while this one ran; retrying it is safe (inside a transaction, nothing stayed)."""


class DatabaseUnavailable(PgdrainError):
    """The database could not be reached, or the connection broke mid-statement.

    The driver's error is kept as ``__cause__`` (for the log); the message is pgdrain's own,
    short enough to hand to a client. Whether the statement took effect is unknown.
    """


class DatabaseConnectError(DatabaseUnavailable):
    """pgdrain could not connect; the message says where and why, never the password."""


class QueryFailed(PgdrainError):
    """The database refused a statement pgdrain ran on a connection it owns (a constraint, a
    deadlock, a permission): ``sqlstate`` says which, the driver's error is the cause. On a
    connection the caller passed in, the caller's driver's own errors come through instead."""

    def __init__(self, message: str, sqlstate: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate


class DatabaseTimeout(DatabaseUnavailable):
    """A statement, a lock wait or a socket read ran out of the time the caller had left.

    Raised for the server's ``statement_timeout`` (57014) and ``lock_timeout`` (55P03), for a
    socket that stayed silent until the deadline (a partition, an overloaded server), and
    before a statement when no time is left to run it.
    """


class Snooze(Exception):
    """Raise from a handler to run the job again after ``delay_seconds``.

    The attempt is refunded: snoozing is waiting, not failing (River's JobSnooze). A negative
    delay means now; an infinite, NaN or longer-than-ten-years one raises ValueError where the
    handler builds it, so it counts as that attempt's failure instead of breaking the drain.
    """

    def __init__(self, delay_seconds: float, reason: str = ""):
        delay = float(delay_seconds)
        if not delay <= MAX_DELAY_SECONDS:  # also catches NaN
            raise ValueError(f"Snooze delay_seconds must be at most {MAX_DELAY_SECONDS} "
                             f"(ten years), not {delay_seconds!r}")
        super().__init__(reason or f"snoozed for {delay_seconds} s")
        self.delay_seconds = max(delay, 0.0)


class Continue(Snooze):
    """Raise from a handler to end this run and put the job straight back, due now: its
    saved state (``job.checkpoint``) is what its next run resumes from, and no attempt is
    spent. For a job longer than an invocation (an export of many pages): run steps,
    checkpoint after each, and raise ``Continue`` to hand over (a run of a resumable type
    that saved a checkpoint and runs out of time continues the same way by itself)."""

    def __init__(self, reason: str = ""):
        super().__init__(0, reason or "continues from its last checkpoint")


class WaitFor(Snooze):
    """Raise from a handler to wait for the signal ``name`` (``pgdrain.signal``) for at most
    ``timeout`` seconds, holding no drain and no attempt: the job waits (status waiting),
    its saved state (``job.checkpoint``) kept, and runs again when the signal is sent, with
    ``job.signal.payload``, or when the timeout passes, with ``job.signal.timed_out``. A
    signal already sent and still kept ends the wait at once. An invalid name or timeout
    raises ValueError where the handler builds it (that attempt's failure)."""

    def __init__(self, name: str, timeout: float):
        problem = signal_name_problem(name)
        if problem:
            raise ValueError(f"WaitFor name {problem}")
        seconds = float(timeout)
        if not 0 < seconds <= MAX_DELAY_SECONDS:  # also NaN
            raise ValueError(f"WaitFor timeout must be more than 0 and at most "
                             f"{MAX_DELAY_SECONDS} seconds (ten years), not {timeout!r}")
        super().__init__(seconds, f"waits for signal {name!r}")
        self.name = name
        self.timeout = seconds


class InvalidSignal(PgdrainError, ValueError):
    """A signal ``pgdrain.signal`` cannot send (its name, payload or retention); nothing was
    written. ``field`` names what is wrong."""

    def __init__(self, message: str, *, field: str):
        super().__init__(f"{field}: {message}")
        self.field = field


class CheckpointNotSaved(PgdrainError):
    """``job.checkpoint()`` could not save the state: the job is no longer this run's (its
    lease was reclaimed, it was cancelled or finished elsewhere), or the database did not
    answer in time. Let it propagate: the run ends, and the job resumes from the last
    checkpoint that was saved."""


class Discard(Exception):
    """Raise from a handler to fail the job at once, without retries (a permanent error)."""


class HandlerTimeout(BaseException):
    """Raised inside a handler that overran its time budget.

    A BaseException, so a handler's ``except Exception`` cannot swallow it and run on.
    """
