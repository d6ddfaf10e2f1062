"""Every environment variable pgdrain reads, in one table: name, parser, default, meaning.

Every reader goes through ``read(name)`` (the drain's ``Settings``, the API's limits, the
doorbell, the credentials, the webhook job), so a variable is parsed, defaulted and refused in
one way. The README's settings table is this table (``python -m pgdrain.settings`` prints it;
a test compares the two).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .policy import DEFAULT_BASE_SECONDS, DEFAULT_CAP_SECONDS, DEFAULT_JITTER, Backoff

# Longer than Lambda's 15-minute maximum timeout, so a live invocation can never lose its job
# to the janitor whatever timeout the function has.
# Without PGDRAIN_LEASE_SECONDS a claim's lease is the invocation's own time left plus this.
LEASE_MARGIN_SECONDS = 60
DEFAULT_BATCH_SIZE = 100
DEFAULT_CONCURRENCY = 10
DEFAULT_POOL_SIZE = 4
DEFAULT_MAX_DRAINS = 4
DEFAULT_RETENTION_SECONDS = 0
DEFAULT_FAILED_RETENTION_SECONDS = 30 * 24 * 3600
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
DEFAULT_RESULT_MAX_BYTES = 65_536
DEFAULT_SECRET_MAX_AGE_SECONDS = 300
# pgdrain's own cap, not SQS's (1 MiB): one claim brings a whole batch's payloads into a
# drain's memory at once (100 jobs of 256 KiB are 25 MiB).
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
DEFAULT_MAX_BATCH = 500
DEFAULT_DOORBELL_WINDOW_SECONDS = 1.0
DEFAULT_WEBHOOK_TIMEOUT_SECONDS = 10.0
DEFAULT_JOB_MODULES = "jobs"
DEFAULT_METRIC_QUEUES = 10


# --- parsers: a raw (stripped, non-empty) value in, the value out, or ValueError saying why ---


def integer(minimum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"must be an integer, got {raw!r}") from None
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def number(minimum: float = -math.inf, *, above: bool = False) -> Callable[[str], float]:
    """A finite number, at least ``minimum`` (more than it, with ``above``)."""
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"must be a number, got {raw!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {raw!r}")
        if value < minimum or (above and value == minimum):
            bound = "more than" if above else "at least"
            raise ValueError(f"must be {bound} {minimum:g}, got {raw!r}")
        return value

    return parse


def boolean(raw: str) -> bool:
    """1/true/yes/on or 0/false/no/off, any case."""
    lowered = raw.lower()
    if lowered in ("0", "false", "no", "off"):
        return False
    if lowered in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"must be true or false, got {lowered!r}")


def text(raw: str) -> str:
    return raw


# Lowercase, unquoted-identifier characters only: a name that means the same quoted or not,
# in a URL, an environment variable and a CloudFormation parameter alike.
SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def schema_name(raw: str) -> str:
    """A schema name pgdrain accepts (SCHEMA_NAME), or ValueError saying why."""
    if not SCHEMA_NAME.fullmatch(raw):
        raise ValueError(
            "must be a lowercase name of letters, digits and _ (not starting with a digit, "
            f"at most 63), got {raw!r}")
    if raw.startswith("pg_"):
        raise ValueError(f"must not start with pg_ (reserved for PostgreSQL), got {raw!r}")
    return raw


def names(raw: str) -> tuple[str, ...]:
    """A comma-separated list; blank items are dropped."""
    return tuple(item.strip() for item in raw.split(",") if item.strip())


@dataclass(frozen=True, slots=True)
class Setting:
    """One environment variable: how to parse it, its default, and what it means."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    shown: str
    """The default as the README shows it."""
    doc: str
    group: str
    """Who reads it: drain, database, http, doorbell, webhook or aws."""

    def read(self, env: Mapping[str, str] | None = None) -> Any:
        env = os.environ if env is None else env
        raw = (env.get(self.name) or "").strip()
        if not raw:
            return self.default
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{self.name} {exc}") from None


def _s(name: str, parse: Callable[[str], Any], default: Any, doc: str, group: str,
       shown: str | None = None) -> Setting:
    return Setting(name, parse, default, str(default) if shown is None else shown, doc, group)


SETTINGS: tuple[Setting, ...] = (
    _s("DATABASE_URL", text, None,
       "`postgresql://user:pass@host:port/db?sslmode=...`, or `?host=/socket/dir` for a Unix "
       "socket", "database", "embedded PostgreSQL locally"),
    _s("DB_SECRET_ARN", text, None,
       "With DATABASE_URL unset: ARN of a Secrets Manager secret in the RDS JSON format "
       "(username, password, host, port, dbname) to connect with", "database", "(none)"),
    _s("DB_IAM_AUTH", boolean, False,
       "With DATABASE_URL and DB_SECRET_ARN unset, true (1, yes): log in as DB_USER with an "
       "RDS IAM token (needs TLS, GRANT rds_iam and rds-db:connect)", "database", "false"),
    _s("DB_HOST", text, None,
       "Database host for IAM auth; with DB_SECRET_ARN, replaces the secret's host (e.g. an "
       "RDS Proxy endpoint). A path is a Unix socket directory", "database",
       "(the secret's host)"),
    _s("DB_PORT", text, None,
       "Database port for IAM auth; with DB_SECRET_ARN, replaces the secret's port", "database",
       "(the secret's port, or 5432)"),
    _s("DB_USER", text, None, "Database user for IAM auth", "database", "(none)"),
    _s("DB_NAME", text, None,
       "Database for IAM auth (required there); with DB_SECRET_ARN, replaces the secret's "
       "dbname", "database", "(the secret's dbname, or postgres)"),
    _s("DB_SSLMODE", text, None,
       "TLS for DB_SECRET_ARN and IAM connections: disable, allow, prefer, require, verify-ca "
       "or verify-full (DATABASE_URL has its own sslmode=)", "database",
       "verify-full (disable for a socket)"),
    _s("DB_SSL_ROOT_CERT", text, None,
       "CA bundle file that verifies the server (verify-ca, verify-full) for DB_SECRET_ARN and "
       "IAM connections (DATABASE_URL has its own sslrootcert=). Unset, an RDS, Aurora or RDS "
       "Proxy host (*.<region>.rds.amazonaws.com) is verified against the RDS CA bundle the "
       "layer ships (pgdrain/certs/rds-ca-bundle.pem), any other host against the system's CAs",
       "database", "(the shipped RDS bundle for RDS hosts, else the system's CAs)"),
    _s("PGPASSWORD", text, None,
       "The password, where DATABASE_URL has none (as libpq reads it; never logged)",
       "database", "(none)"),
    _s("PGPASSFILE", text, None,
       "Where DATABASE_URL has no password and PGPASSWORD is unset: libpq's password file "
       "(host:port:database:user:password lines, mode 0600)", "database", "~/.pgpass"),
    _s("PGDRAIN_SCHEMA", schema_name, None,
       "Schema of pgdrain's tables and functions (e.g. pgdrain, when the app has its own "
       "`jobs`): migrate creates it, every statement names it, whatever the connection's "
       "search_path. Set the same everywhere: functions, CLI and app", "database",
       "(unset: the connection's search_path, usually public)"),
    _s("PGDRAIN_SECRET_MAX_AGE_SECONDS", integer(0), DEFAULT_SECRET_MAX_AGE_SECONDS,
       "How long a fetched DB_SECRET_ARN secret is reused; a rejected password refetches it "
       "at once", "database"),
    _s("PGDRAIN_LEASE_SECONDS", integer(1), None,
       "How long a claim owns its job before the janitor may reclaim it; must be above the "
       "function timeout", "drain",
       f"the invocation's time left + {LEASE_MARGIN_SECONDS} s"),
    _s("PGDRAIN_CONCURRENCY", integer(1), DEFAULT_CONCURRENCY,
       "Handlers one drain runs at once (worker threads; async def handlers on one event "
       "loop); 1 runs them one at a time on the drain's own thread", "drain"),
    _s("PGDRAIN_POOL_SIZE", integer(1), DEFAULT_POOL_SIZE,
       "Connections a drain opens for transactional handlers, besides its own; more such "
       "jobs at once wait for one", "drain"),
    _s("PGDRAIN_MAX_DRAINS", integer(1), DEFAULT_MAX_DRAINS,
       "Most drains running at once across all triggers, enforced in PostgreSQL; another "
       "returns at once with stopped: busy", "drain"),
    _s("PGDRAIN_BATCH_SIZE", integer(1), DEFAULT_BATCH_SIZE,
       "Most jobs one claim statement takes; each claim is sized from free slots, how fast "
       "jobs finish and the time left", "drain"),
    _s("PGDRAIN_MAX_JOBS", integer(1), DEFAULT_MAX_JOBS, "Most jobs one drain invocation runs",
       "drain"),
    _s("PGDRAIN_SAFETY_MARGIN_SECONDS", number(0), None,
       "Time a drain keeps in hand before its deadline to record outcomes and return; unset, "
       "it scales with the function's timeout", "drain", "10 % of the time left, 0.2 to 2"),
    _s("PGDRAIN_JOB_TIMEOUT_SECONDS", number(0, above=True), DEFAULT_JOB_TIMEOUT_SECONDS,
       "Time budget of a handler that declares no timeout; an overrun is retried as timed out",
       "drain"),
    _s("PGDRAIN_RESULT_MAX_BYTES", integer(0), DEFAULT_RESULT_MAX_BYTES,
       "Largest handler return value stored as the job's result, in bytes of JSON; above it "
       "the job is still done, with no result and last_error saying why", "drain"),
    _s("PGDRAIN_PREPARED_STATEMENTS", boolean, True,
       "Prepare the drain's statements once per connection (false behind a pooler such as "
       "RDS Proxy: named prepared statements are session state)", "drain", "true"),
    _s("PGDRAIN_TRACING", boolean, False,
       "true: trace the drain with Powertools' Tracer (X-Ray; the layer ships aws-xray-sdk; "
       "adds ~1 s cold start)", "drain", "false"),
    _s("PGDRAIN_JOBS", text, None,
       "Comma-separated modules whose @pgdrain.job handlers the functions load", "drain",
       DEFAULT_JOB_MODULES),
    _s("PGDRAIN_MAX_PAYLOAD_BYTES", integer(1), DEFAULT_MAX_PAYLOAD_BYTES,
       "Largest job payload POST /jobs accepts, in bytes of JSON (413 above)", "http"),
    _s("PGDRAIN_MAX_BATCH", integer(1), DEFAULT_MAX_BATCH,
       "Most jobs in one POST /jobs batch (413 above)", "http"),
    _s("DRAIN_FUNCTION_NAME", text, None,
       "The drain function the enqueue function invokes asynchronously after a commit",
       "doorbell", "(unset: no doorbell)"),
    _s("PGDRAIN_DOORBELL_WINDOW_SECONDS", number(0), DEFAULT_DOORBELL_WINDOW_SECONDS,
       "At most one doorbell ring per enqueue container in this window", "doorbell"),
    _s("PGDRAIN_WEBHOOK_TIMEOUT_SECONDS", number(0, above=True),
       DEFAULT_WEBHOOK_TIMEOUT_SECONDS,
       "deliver-webhook: timeout of each network step of the POST (DNS lookup included)",
       "webhook"),
    _s("PGDRAIN_WEBHOOK_ALLOWED_NETWORKS", names, (),
       "deliver-webhook: comma-separated networks (10.1.0.0/16, fd00::/8) it may reach "
       "besides public addresses; loopback, link-local and private ones are refused "
       "otherwise", "webhook", "(none: public addresses only)"),
    _s("PGDRAIN_QUEUES", names, (), "Comma-separated queues to drain", "drain",
       "(all queues)"),
    _s("PGDRAIN_RETENTION_SECONDS", integer(0), DEFAULT_RETENTION_SECONDS,
       "Age after which the janitor deletes done jobs; 0 (the default): a drain deletes a "
       "done job as it finishes (its row is not kept; one with a result or a dedupe key is, "
       "until the janitor's next purge); 604800 keeps a week of history", "drain"),
    _s("PGDRAIN_FAILED_RETENTION_SECONDS", integer(0), DEFAULT_FAILED_RETENTION_SECONDS,
       "Age after which the janitor deletes failed and cancelled jobs (30 days: time to "
       "look at them and requeue)", "drain"),
    _s("PGDRAIN_PURGE_BATCH_SIZE", integer(1), DEFAULT_PURGE_BATCH_SIZE,
       "Done jobs deleted per batch", "drain"),
    _s("PGDRAIN_PURGE_MAX_BATCHES", integer(0), DEFAULT_PURGE_MAX_BATCHES,
       "Purge batches per janitor pass", "drain"),
    _s("PGDRAIN_RECLAIM_BATCH_SIZE", integer(1), DEFAULT_RECLAIM_BATCH_SIZE,
       "Expired leases reclaimed per janitor pass", "drain"),
    _s("PGDRAIN_VACUUM_DEAD_TUPLES", integer(0), DEFAULT_VACUUM_DEAD_TUPLES,
       "The drain vacuums jobs itself past this many dead row versions (0: leave it to "
       "autovacuum); needs the table's owner or MAINTAIN", "drain"),
    _s("PGDRAIN_VACUUM_INTERVAL_SECONDS", number(0), DEFAULT_VACUUM_INTERVAL_SECONDS,
       "Least time between two vacuums of jobs", "drain"),
    _s("PGDRAIN_BACKOFF_BASE_SECONDS", number(0), DEFAULT_BASE_SECONDS,
       "Delay after the first failed attempt; doubles with each attempt", "drain"),
    _s("PGDRAIN_BACKOFF_CAP_SECONDS", number(0), DEFAULT_CAP_SECONDS, "Longest retry delay",
       "drain"),
    _s("PGDRAIN_BACKOFF_JITTER", number(0), DEFAULT_JITTER,
       "Random spread of each delay, as a fraction (0.1 = ±10 %)", "drain"),
    _s("POWERTOOLS_SERVICE_NAME", text, "pgdrain",
       "The functions' `service` in logs and metrics (the stack's name in AWS)", "aws"),
    _s("POWERTOOLS_METRICS_NAMESPACE", text, "pgdrain", "The functions' metrics namespace",
       "aws"),
    _s("PGDRAIN_METRIC_QUEUES", integer(0), DEFAULT_METRIC_QUEUES,
       "Queues with per-queue metrics (QueueBacklog, QueueOldestDueAge, dimensions service and "
       "queue), the longest waits first; each queue is a custom metric: 0 turns them off",
       "aws"),
    _s("AWS_LAMBDA_FUNCTION_NAME", text, None,
       "Set by Lambda. Where it is set (or AWS_ENDPOINT_URL_LAMBDA is), a drain starts more "
       "drains: itself again when it stops with due work left, more for a backlog", "aws",
       "(set by Lambda)"),
    _s("AWS_SAM_LOCAL", boolean, False,
       "Set by `sam local` and `pgdrain invoke`: a local invocation starts no drain in AWS "
       "(continuation, fan-out, POST /drain, the doorbell) unless AWS_ENDPOINT_URL_LAMBDA "
       "names the local stand-in", "aws", "(set locally)"),
    _s("AWS_ENDPOINT_URL_LAMBDA", text, None,
       "boto3's Lambda endpoint; point it at `python -m pgdrain_dev.lambda_standin` to run "
       "continuation and fan-out without AWS", "aws", "(AWS's)"),
    _s("AWS_REGION", text, None,
       "Set by Lambda (else AWS_DEFAULT_REGION). The region of a secret named without an ARN, "
       "or of an IAM auth token for a host that is not an RDS endpoint", "aws",
       "(set by Lambda)"),
    _s("AWS_DEFAULT_REGION", text, None, "Read where AWS_REGION is not set", "aws", "(none)"),
    _s("AWS_ACCESS_KEY_ID", text, None,
       "Set by Lambda, with AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN: the function's "
       "credentials. Where they are set, pgdrain signs the secret's fetch and IAM tokens "
       "itself (no boto3 at a cold start); elsewhere boto3 finds credentials its own way",
       "aws", "(set by Lambda)"),
    _s("AWS_SECRET_ACCESS_KEY", text, None, "See AWS_ACCESS_KEY_ID (never logged)", "aws",
       "(set by Lambda)"),
    _s("AWS_SESSION_TOKEN", text, None, "See AWS_ACCESS_KEY_ID (never logged)", "aws",
       "(set by Lambda)"),
    _s("AWS_ENDPOINT_URL_SECRETS_MANAGER", text, None,
       "Secrets Manager's endpoint, as boto3 reads it (else AWS_ENDPOINT_URL, else the "
       "region's): a VPC endpoint's URL, or a stand-in in tests", "aws", "(AWS's)"),
    _s("AWS_ENDPOINT_URL", text, None, "Every AWS endpoint, as boto3 reads it", "aws",
       "(AWS's)"),
)
_BY_NAME = {s.name: s for s in SETTINGS}
SCHEMA_SETTINGS: tuple[str, ...] = ("PGDRAIN_SCHEMA",)
"""Read once, by the statement catalogue (pgdrain.sql), when it loads."""
CREDENTIAL_SETTINGS: tuple[str, ...] = tuple(
    s.name for s in SETTINGS
    if s.group == "database" and s.name not in ("DATABASE_URL", *SCHEMA_SETTINGS))
FUNCTION_SETTINGS: tuple[str, ...] = tuple(
    s.name for s in SETTINGS if s.group in ("http", "doorbell", "webhook", "aws"))


def setting(name: str) -> Setting:
    return _BY_NAME[name]


def read(name: str, env: Mapping[str, str] | None = None) -> Any:
    """The value of setting ``name`` from ``env`` (the process's environment by default): its
    default when unset or blank, ConfigError naming it when invalid."""
    return _BY_NAME[name].read(env)


def markdown_table() -> str:
    """The README's settings table."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    rows += [f"| `{s.name}` | {s.shown} | {s.doc} |" for s in SETTINGS]
    return "\n".join(rows) + "\n"


@dataclass(frozen=True, slots=True)
class Settings:
    """The queue's tunables. Build with ``Settings.from_env()`` or directly in code and tests."""

    database_url: str | None = None
    lease_seconds: int | None = None
    """None: the invocation's time left plus LEASE_MARGIN_SECONDS (``lease_for``)."""
    batch_size: int = DEFAULT_BATCH_SIZE
    concurrency: int = DEFAULT_CONCURRENCY
    pool_size: int = DEFAULT_POOL_SIZE
    max_drains: int = DEFAULT_MAX_DRAINS
    queues: tuple[str, ...] = ()
    retention_seconds: int = DEFAULT_RETENTION_SECONDS
    failed_retention_seconds: int = DEFAULT_FAILED_RETENTION_SECONDS
    purge_batch_size: int = DEFAULT_PURGE_BATCH_SIZE
    purge_max_batches: int = DEFAULT_PURGE_MAX_BATCHES
    reclaim_batch_size: int = DEFAULT_RECLAIM_BATCH_SIZE
    max_jobs: int = DEFAULT_MAX_JOBS
    vacuum_dead_tuples: int = DEFAULT_VACUUM_DEAD_TUPLES
    vacuum_interval_seconds: float = DEFAULT_VACUUM_INTERVAL_SECONDS
    safety_margin_seconds: float | None = None
    """None: ``margin_for`` scales it with the time an invocation has."""
    job_timeout_seconds: float = DEFAULT_JOB_TIMEOUT_SECONDS
    result_max_bytes: int = DEFAULT_RESULT_MAX_BYTES
    job_modules: str | None = None
    tracing: bool = False
    prepared_statements: bool = True
    backoff: Backoff = field(default_factory=Backoff)

    def __post_init__(self) -> None:
        for name in ("lease_seconds", "batch_size", "purge_batch_size", "reclaim_batch_size",
                     "max_jobs", "concurrency", "pool_size", "max_drains"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("retention_seconds", "failed_retention_seconds", "purge_max_batches",
                     "result_max_bytes",
                     "safety_margin_seconds",
                     "vacuum_dead_tuples", "vacuum_interval_seconds"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, got {getattr(self, name)}")
        if not self.job_timeout_seconds > 0:
            raise ConfigError(f"job_timeout_seconds must be positive, got "
                              f"{self.job_timeout_seconds}")

    def lease_for(self, time_left: float) -> float:
        """The lease of an invocation that has ``time_left`` seconds at its start: the
        explicit PGDRAIN_LEASE_SECONDS, or that time plus LEASE_MARGIN_SECONDS, so a crashed
        invocation's jobs come back about a minute after its timeout."""
        if self.lease_seconds is not None:
            return float(self.lease_seconds)
        return math.ceil(time_left) + LEASE_MARGIN_SECONDS

    def margin_for(self, time_left: float) -> float:
        """The safety margin of an invocation that has ``time_left`` seconds at its start."""
        if self.safety_margin_seconds is not None:
            return self.safety_margin_seconds
        return min(DEFAULT_SAFETY_MARGIN_SECONDS,
                   max(MIN_SAFETY_MARGIN_SECONDS, SAFETY_MARGIN_SHARE * time_left))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read the drain's settings (``SETTINGS``); raise ConfigError if one is invalid."""
        env = os.environ if env is None else env
        try:
            backoff = Backoff(base_seconds=read("PGDRAIN_BACKOFF_BASE_SECONDS", env),
                              cap_seconds=read("PGDRAIN_BACKOFF_CAP_SECONDS", env),
                              jitter=read("PGDRAIN_BACKOFF_JITTER", env))
        except ValueError as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"PGDRAIN_BACKOFF_*: {exc}") from None
        return cls(
            database_url=read("DATABASE_URL", env),
            lease_seconds=read("PGDRAIN_LEASE_SECONDS", env),
            batch_size=read("PGDRAIN_BATCH_SIZE", env),
            concurrency=read("PGDRAIN_CONCURRENCY", env),
            pool_size=read("PGDRAIN_POOL_SIZE", env),
            max_drains=read("PGDRAIN_MAX_DRAINS", env),
            queues=read("PGDRAIN_QUEUES", env),
            retention_seconds=read("PGDRAIN_RETENTION_SECONDS", env),
            failed_retention_seconds=read("PGDRAIN_FAILED_RETENTION_SECONDS", env),
            purge_batch_size=read("PGDRAIN_PURGE_BATCH_SIZE", env),
            purge_max_batches=read("PGDRAIN_PURGE_MAX_BATCHES", env),
            reclaim_batch_size=read("PGDRAIN_RECLAIM_BATCH_SIZE", env),
            max_jobs=read("PGDRAIN_MAX_JOBS", env),
            vacuum_dead_tuples=read("PGDRAIN_VACUUM_DEAD_TUPLES", env),
            vacuum_interval_seconds=read("PGDRAIN_VACUUM_INTERVAL_SECONDS", env),
            safety_margin_seconds=read("PGDRAIN_SAFETY_MARGIN_SECONDS", env),
            job_timeout_seconds=read("PGDRAIN_JOB_TIMEOUT_SECONDS", env),
            result_max_bytes=read("PGDRAIN_RESULT_MAX_BYTES", env),
            job_modules=read("PGDRAIN_JOBS", env),
            tracing=read("PGDRAIN_TRACING", env),
            prepared_statements=read("PGDRAIN_PREPARED_STATEMENTS", env),
            backoff=backoff,
        )


def flag(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    """A boolean setting from ``env`` (see ``boolean``); unset is ``default``."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        return boolean(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} {exc}") from None


if __name__ == "__main__":
    sys.stdout.write(markdown_table())
