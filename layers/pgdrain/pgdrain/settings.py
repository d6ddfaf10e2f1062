"""Settings from environment variables, validated once, with named defaults.

Every variable pgdrain reads is listed in ``SETTINGS``; the README's settings table is checked
against it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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
DEFAULT_MAX_JOBS = 1000
DEFAULT_VACUUM_DEAD_TUPLES = 50_000
DEFAULT_VACUUM_INTERVAL_SECONDS = 10.0
# The safety margin, unless set: a tenth of the time the invocation has, from 0.2 to 2 s. A
# 3 s function (Lambda's default timeout) keeps 0.3 s and has 2.7 s for jobs; a fixed 2 s left
# it less than the second its first job needs, and it drained nothing.
DEFAULT_SAFETY_MARGIN_SECONDS = 2.0
MIN_SAFETY_MARGIN_SECONDS = 0.2
SAFETY_MARGIN_SHARE = 0.1
DEFAULT_JOB_TIMEOUT_SECONDS = 30.0

DEFAULT_SECRET_MAX_AGE_SECONDS = 300

# Read by pgdrain.credentials (connect_params_from_env), not by Settings.from_env.
_CREDENTIAL_ROWS: tuple[tuple[str, str, str], ...] = (
    ("DB_SECRET_ARN", "(none)",
     "With DATABASE_URL unset: ARN of a Secrets Manager secret in the RDS JSON format "
     "(username, password, host, port, dbname) to connect with"),
    ("DB_IAM_AUTH", "false",
     "With DATABASE_URL and DB_SECRET_ARN unset, true (1, yes): log in as DB_USER with an RDS "
     "IAM token (needs TLS, GRANT rds_iam and rds-db:connect)"),
    ("DB_HOST", "(the secret's host)",
     "Database host for IAM auth; with DB_SECRET_ARN, replaces the secret's host (e.g. an RDS "
     "Proxy endpoint). A path is a Unix socket directory"),
    ("DB_PORT", "(the secret's port, or 5432)",
     "Database port for IAM auth; with DB_SECRET_ARN, replaces the secret's port"),
    ("DB_USER", "(none)", "Database user for IAM auth"),
    ("DB_NAME", "(the secret's dbname, or postgres)",
     "Database for IAM auth (required there); with DB_SECRET_ARN, replaces the secret's dbname"),
    ("DB_SSLMODE", "verify-full",
     "TLS for DB_SECRET_ARN and IAM connections: disable, allow, prefer, require, verify-ca or "
     "verify-full (DATABASE_URL has its own sslmode=)"),
    ("DB_SSL_ROOT_CERT", "(system CAs)",
     "CA bundle file that verifies the server; RDS needs its global bundle from "
     "truststore.pki.rds.amazonaws.com"),
    ("PGDRAIN_SECRET_MAX_AGE_SECONDS", str(DEFAULT_SECRET_MAX_AGE_SECONDS),
     "How long a fetched DB_SECRET_ARN secret is reused; a rejected password refetches it at "
     "once"),
)
CREDENTIAL_SETTINGS: tuple[str, ...] = tuple(name for name, _, _ in _CREDENTIAL_ROWS)

# Read by the enqueue function (pgdrain.api, pgdrain.doorbell) and the webhook job.
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
DEFAULT_MAX_BATCH = 500
DEFAULT_DOORBELL_WINDOW_SECONDS = 1.0
DEFAULT_WEBHOOK_TIMEOUT_SECONDS = 10.0
_FUNCTION_ROWS: tuple[tuple[str, str, str], ...] = (
    ("PGDRAIN_MAX_PAYLOAD_BYTES", str(DEFAULT_MAX_PAYLOAD_BYTES),
     "Largest job payload POST /jobs accepts, in bytes of JSON (413 above)"),
    ("PGDRAIN_MAX_BATCH", str(DEFAULT_MAX_BATCH),
     "Most jobs in one POST /jobs batch (413 above)"),
    ("DRAIN_FUNCTION_NAME", "(unset: no doorbell)",
     "The drain function the enqueue function invokes asynchronously after a commit"),
    ("PGDRAIN_DOORBELL_WINDOW_SECONDS", str(DEFAULT_DOORBELL_WINDOW_SECONDS),
     "At most one doorbell ring per enqueue container in this window"),
    ("PGDRAIN_WEBHOOK_TIMEOUT_SECONDS", str(DEFAULT_WEBHOOK_TIMEOUT_SECONDS),
     "deliver-webhook: timeout of each network step of the POST (DNS lookup included)"),
    ("PGDRAIN_WEBHOOK_ALLOWED_NETWORKS", "(none: public addresses only)",
     "deliver-webhook: comma-separated networks (10.1.0.0/16, fd00::/8) it may reach besides "
     "public addresses; loopback, link-local and private ones are refused otherwise"),
)
FUNCTION_SETTINGS: tuple[str, ...] = tuple(name for name, _, _ in _FUNCTION_ROWS)

SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("DATABASE_URL", "embedded PostgreSQL locally",
     "postgresql://user:pass@host:port/db?sslmode=..., or ?host=/socket/dir for a Unix socket"),
    *_CREDENTIAL_ROWS,
    ("PGDRAIN_LEASE_SECONDS", str(DEFAULT_LEASE_SECONDS),
     "How long a claim owns its job before the janitor may reclaim it; keep it above the "
     "function timeout"),
    ("PGDRAIN_BATCH_SIZE", str(DEFAULT_BATCH_SIZE), "Jobs claimed per claim statement"),
    ("PGDRAIN_MAX_JOBS", str(DEFAULT_MAX_JOBS), "Most jobs one drain invocation runs"),
    ("PGDRAIN_SAFETY_MARGIN_SECONDS", "10 % of the time left, 0.2 to 2",
     "Time a drain keeps in hand before its deadline to record outcomes and return; unset, it "
     "scales with the function's timeout"),
    ("PGDRAIN_JOB_TIMEOUT_SECONDS", str(DEFAULT_JOB_TIMEOUT_SECONDS),
     "Time budget of a handler that declares no timeout; an overrun is retried as timed out"),
    ("PGDRAIN_PREPARED_STATEMENTS", "true",
     "Prepare the drain's statements once per connection (false behind a pooler such as RDS "
     "Proxy: named prepared statements are session state)"),
    ("PGDRAIN_TRACING", "false",
     "true: trace the drain with Powertools' Tracer (X-Ray; the layer ships aws-xray-sdk; "
     "adds ~1 s cold start)"),
    ("PGDRAIN_JOBS", "pgdrain_jobs.examples,pgdrain_jobs.webhook",
     "Comma-separated modules whose @pgdrain.job handlers the functions load"),
    ("PGDRAIN_QUEUES", "(all queues)", "Comma-separated queues to drain"),
    ("PGDRAIN_RETENTION_SECONDS", str(DEFAULT_RETENTION_SECONDS),
     "Age after which the janitor deletes done jobs"),
    ("PGDRAIN_PURGE_BATCH_SIZE", str(DEFAULT_PURGE_BATCH_SIZE), "Done jobs deleted per batch"),
    ("PGDRAIN_PURGE_MAX_BATCHES", str(DEFAULT_PURGE_MAX_BATCHES),
     "Purge batches per janitor pass"),
    ("PGDRAIN_RECLAIM_BATCH_SIZE", str(DEFAULT_RECLAIM_BATCH_SIZE),
     "Expired leases reclaimed per janitor pass"),
    ("PGDRAIN_VACUUM_DEAD_TUPLES", str(DEFAULT_VACUUM_DEAD_TUPLES),
     "The drain vacuums jobs itself past this many dead row versions (0: leave it to "
     "autovacuum); needs the table's owner or MAINTAIN"),
    ("PGDRAIN_VACUUM_INTERVAL_SECONDS", str(DEFAULT_VACUUM_INTERVAL_SECONDS),
     "Least time between two vacuums of jobs"),
    ("PGDRAIN_BACKOFF_BASE_SECONDS", str(DEFAULT_BASE_SECONDS),
     "Delay after the first failed attempt; doubles with each attempt"),
    ("PGDRAIN_BACKOFF_CAP_SECONDS", str(DEFAULT_CAP_SECONDS), "Longest retry delay"),
    ("PGDRAIN_BACKOFF_JITTER", str(DEFAULT_JITTER),
     "Random spread of each delay, as a fraction (0.1 = ±10 %)"),
    *_FUNCTION_ROWS,
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
    max_jobs: int = DEFAULT_MAX_JOBS
    vacuum_dead_tuples: int = DEFAULT_VACUUM_DEAD_TUPLES
    vacuum_interval_seconds: float = DEFAULT_VACUUM_INTERVAL_SECONDS
    safety_margin_seconds: float | None = None
    """None: ``margin_for`` scales it with the time an invocation has."""
    job_timeout_seconds: float = DEFAULT_JOB_TIMEOUT_SECONDS
    job_modules: str | None = None
    tracing: bool = False
    prepared_statements: bool = True
    backoff: Backoff = field(default_factory=Backoff)

    def __post_init__(self) -> None:
        for name in ("lease_seconds", "batch_size", "purge_batch_size", "reclaim_batch_size",
                     "max_jobs"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("retention_seconds", "purge_max_batches", "safety_margin_seconds",
                     "vacuum_dead_tuples", "vacuum_interval_seconds"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, got {getattr(self, name)}")
        if not self.job_timeout_seconds > 0:
            raise ConfigError(f"job_timeout_seconds must be positive, got "
                              f"{self.job_timeout_seconds}")

    def margin_for(self, time_left: float) -> float:
        """The safety margin of an invocation that has ``time_left`` seconds at its start."""
        if self.safety_margin_seconds is not None:
            return self.safety_margin_seconds
        return min(DEFAULT_SAFETY_MARGIN_SECONDS,
                   max(MIN_SAFETY_MARGIN_SECONDS, SAFETY_MARGIN_SHARE * time_left))

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
            max_jobs=_integer(env, "PGDRAIN_MAX_JOBS", DEFAULT_MAX_JOBS, 1),
            vacuum_dead_tuples=_integer(
                env, "PGDRAIN_VACUUM_DEAD_TUPLES", DEFAULT_VACUUM_DEAD_TUPLES, 0),
            vacuum_interval_seconds=_number(
                env, "PGDRAIN_VACUUM_INTERVAL_SECONDS", DEFAULT_VACUUM_INTERVAL_SECONDS),
            safety_margin_seconds=_number(env, "PGDRAIN_SAFETY_MARGIN_SECONDS", None),
            job_timeout_seconds=_number(
                env, "PGDRAIN_JOB_TIMEOUT_SECONDS", DEFAULT_JOB_TIMEOUT_SECONDS),
            job_modules=env.get("PGDRAIN_JOBS") or None,
            tracing=flag(env, "PGDRAIN_TRACING"),
            prepared_statements=flag(env, "PGDRAIN_PREPARED_STATEMENTS", default=True),
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


def flag(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    """A boolean setting: 1/true/yes/on or 0/false/no/off (any case); unset is ``default``."""
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{name} must be true or false, got {raw!r}")


def _number(env: Mapping[str, str], name: str, default: Any) -> Any:
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
