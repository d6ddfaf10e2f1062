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
