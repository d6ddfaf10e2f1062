"""Settings from environment variables, validated once, with named defaults.

Every variable pgdrain reads is listed in ``SETTINGS``; the README's settings table is checked
against it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import ConfigError
from .policy import DEFAULT_BASE_SECONDS, DEFAULT_CAP_SECONDS, DEFAULT_JITTER, Backoff

# Longer than Lambda's 15-minute maximum timeout, so a live invocation can never lose its job
# to the janitor whatever timeout the function has.
DEFAULT_LEASE_SECONDS = 960
DEFAULT_BATCH_SIZE = 10
DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600
DEFAULT_PURGE_BATCH_SIZE = 1000
DEFAULT_PURGE_MAX_BATCHES = 10
DEFAULT_RECLAIM_BATCH_SIZE = 1000

SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("DATABASE_URL", "embedded PostgreSQL locally",
     "postgresql://user:pass@host:port/db?sslmode=..., or ?host=/socket/dir for a Unix socket"),
    ("PGDRAIN_LEASE_SECONDS", str(DEFAULT_LEASE_SECONDS),
     "How long a claim owns its job before the janitor may reclaim it; keep it above the "
     "function timeout"),
    ("PGDRAIN_BATCH_SIZE", str(DEFAULT_BATCH_SIZE), "Jobs claimed per claim statement"),
    ("PGDRAIN_QUEUES", "(all queues)", "Comma-separated queues to drain"),
    ("PGDRAIN_RETENTION_SECONDS", str(DEFAULT_RETENTION_SECONDS),
     "Age after which the janitor deletes done jobs"),
    ("PGDRAIN_PURGE_BATCH_SIZE", str(DEFAULT_PURGE_BATCH_SIZE), "Done jobs deleted per batch"),
    ("PGDRAIN_PURGE_MAX_BATCHES", str(DEFAULT_PURGE_MAX_BATCHES),
     "Purge batches per janitor pass"),
    ("PGDRAIN_RECLAIM_BATCH_SIZE", str(DEFAULT_RECLAIM_BATCH_SIZE),
     "Expired leases reclaimed per janitor pass"),
    ("PGDRAIN_BACKOFF_BASE_SECONDS", str(DEFAULT_BASE_SECONDS),
     "Delay after the first failed attempt; doubles with each attempt"),
    ("PGDRAIN_BACKOFF_CAP_SECONDS", str(DEFAULT_CAP_SECONDS), "Longest retry delay"),
    ("PGDRAIN_BACKOFF_JITTER", str(DEFAULT_JITTER),
     "Random spread of each delay, as a fraction (0.1 = ±10 %)"),
)


@dataclass(frozen=True, slots=True)
class Settings:
    """The queue's tunables. Build with ``Settings.from_env()`` or directly in code and tests."""

    database_url: str | None = None
    lease_seconds: int = DEFAULT_LEASE_SECONDS
    batch_size: int = DEFAULT_BATCH_SIZE
    queues: tuple[str, ...] = ()
    retention_seconds: int = DEFAULT_RETENTION_SECONDS
    purge_batch_size: int = DEFAULT_PURGE_BATCH_SIZE
    purge_max_batches: int = DEFAULT_PURGE_MAX_BATCHES
    reclaim_batch_size: int = DEFAULT_RECLAIM_BATCH_SIZE
    backoff: Backoff = field(default_factory=Backoff)

    def __post_init__(self) -> None:
        for name in ("lease_seconds", "batch_size", "purge_batch_size", "reclaim_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("retention_seconds", "purge_max_batches"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, got {getattr(self, name)}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read the ``PGDRAIN_*`` variables and ``DATABASE_URL``; raise ConfigError if invalid."""
        env = os.environ if env is None else env
        try:
            backoff = Backoff(
                base_seconds=_number(env, "PGDRAIN_BACKOFF_BASE_SECONDS", DEFAULT_BASE_SECONDS),
                cap_seconds=_number(env, "PGDRAIN_BACKOFF_CAP_SECONDS", DEFAULT_CAP_SECONDS),
                jitter=_number(env, "PGDRAIN_BACKOFF_JITTER", DEFAULT_JITTER),
            )
        except ValueError as exc:
            raise ConfigError(f"PGDRAIN_BACKOFF_*: {exc}") from None
        queues = tuple(q.strip() for q in env.get("PGDRAIN_QUEUES", "").split(",") if q.strip())
        return cls(
            database_url=env.get("DATABASE_URL") or None,
            lease_seconds=_integer(env, "PGDRAIN_LEASE_SECONDS", DEFAULT_LEASE_SECONDS, 1),
            batch_size=_integer(env, "PGDRAIN_BATCH_SIZE", DEFAULT_BATCH_SIZE, 1),
            queues=queues,
            retention_seconds=_integer(
                env, "PGDRAIN_RETENTION_SECONDS", DEFAULT_RETENTION_SECONDS, 0),
            purge_batch_size=_integer(
                env, "PGDRAIN_PURGE_BATCH_SIZE", DEFAULT_PURGE_BATCH_SIZE, 1),
            purge_max_batches=_integer(
                env, "PGDRAIN_PURGE_MAX_BATCHES", DEFAULT_PURGE_MAX_BATCHES, 0),
            reclaim_batch_size=_integer(
                env, "PGDRAIN_RECLAIM_BATCH_SIZE", DEFAULT_RECLAIM_BATCH_SIZE, 1),
            backoff=backoff,
        )


def _integer(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ConfigError(f"{name} must be a finite number, got {raw!r}")
    return value
