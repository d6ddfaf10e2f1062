"""pgdrain's exceptions. Every error pgdrain raises derives from ``PgdrainError``."""

from __future__ import annotations


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


class MigrationError(PgdrainError):
    """The database schema could not be brought up to date."""


class DatabaseConnectError(PgdrainError):
    """pgdrain could not connect; the message says where and why, never the password."""


class Snooze(Exception):
    """Raise from a handler to run the job again after ``delay_seconds``.

    The attempt is refunded: snoozing is waiting, not failing (River's JobSnooze).
    """

    def __init__(self, delay_seconds: float, reason: str = ""):
        super().__init__(reason or f"snoozed for {delay_seconds} s")
        self.delay_seconds = float(delay_seconds)


class Discard(Exception):
    """Raise from a handler to fail the job at once, without retries (a permanent error)."""


class HandlerTimeout(BaseException):
    """Raised inside a handler that overran its time budget.

    A BaseException, so a handler's ``except Exception`` cannot swallow it and run on.
    """
