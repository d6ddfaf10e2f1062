"""Which database the command talks to: the one the functions reach, configured the same way
(``DATABASE_URL``, ``DB_SECRET_ARN``, or ``DB_IAM_AUTH`` with ``DB_HOST``, ``DB_USER`` and
``DB_NAME``), or, only when asked with ``--demo``, a local database a development package
offers (pgdrain-dev offers the embedded PostgreSQL that ``make demo`` leaves behind). Never
one the operator did not choose: with nothing configured, the command says so and stops,
rather than showing a calm, empty queue that is not theirs. Every command says where it is
(``Target.where``: the user, host and database, never a password)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

CONNECT_SECONDS = 10.0
"""How long the command waits to connect and log in (a host that takes the connection and
never answers is named after this, not after a minute of silence)."""
WAIT_SECONDS = 60.0
"""How long the command waits for any one answer once connected."""
STATEMENT_MS = 50_000
"""The server's bound on one statement: under the wait, so the server gives up first and says
so (every batch the commands run takes a fraction of it)."""
LOCK_WAIT_MS = 5_000
"""How long a statement waits for a row lock (a purge or requeue behind a drain's claim)."""

DATABASES_GROUP = "pgdrain.databases"
"""Entry points offering a database when none is configured: a function returning a URL, or
None when it has none to offer (pgdrain-dev's ``demo`` before ``make demo`` ran)."""

_SETTINGS = ("DATABASE_URL", "DB_SECRET_ARN", "DB_IAM_AUTH")


@dataclass(frozen=True)
class Target:
    """An open connection and where it is, to tell the operator."""

    conn: Any
    where: str
    """``user@host:port/database (how it was configured[, schema S])``: no password."""


def open_connection(env: Mapping[str, str] | None = None, *, demo: bool = False) -> Target:
    """A pg8000 native connection (autocommit), every wait bounded, and where it is."""
    from .. import db
    from ..aws.credentials import SETUP_HINT, open_from_env

    env = os.environ if env is None else env
    if demo:
        url = _offered_database()
        if url is None:
            raise ConfigError("--demo: there is no demo database on this machine; run "
                              "`make demo` in a clone of the repository first")
        params = db.parse_database_url(url)
        conn = db.connect(params, timeout=CONNECT_SECONDS)
        how = "the demo's embedded database (--demo)"
    else:
        blank = [name for name in _SETTINGS if name in env and not env[name].strip()]
        if not any(env.get(name, "").strip() for name in _SETTINGS):
            if blank:
                raise ConfigError(f"{' and '.join(blank)} {'is' if len(blank) == 1 else 'are'} "
                                  f"set but empty: {SETUP_HINT}")
            raise ConfigError(f"no database configured: {SETUP_HINT}; or add --demo for the "
                              "embedded database `make demo` leaves on this machine")
        conn, params = open_from_env(env, timeout=CONNECT_SECONDS)
        how = _configured_by(env)
    sock = getattr(conn, "_usock", None)
    if sock is not None:  # logged in: statements may take longer than the login did
        sock.settimeout(WAIT_SECONDS)
    db.as_session(conn).one("connection_bound", statement_ms=STATEMENT_MS,
                            lock_ms=LOCK_WAIT_MS, idle_ms=LOCK_WAIT_MS)
    from ..sql import schema_in_use

    schema = schema_in_use()
    inside = f", schema {schema} (PGDRAIN_SCHEMA)" if schema else ""
    return Target(conn, f"{params.user}@{params.where} ({how}{inside})")


def _configured_by(env: Mapping[str, str]) -> str:
    from ..aws.credentials import credential_mode

    return {"url": "DATABASE_URL", "secret": "DB_SECRET_ARN",
            "iam": "DB_IAM_AUTH"}[credential_mode(env)]


def _offered_database() -> str | None:
    from importlib.metadata import entry_points

    for entry in entry_points(group=DATABASES_GROUP):
        offer: Callable[[], str | None] = entry.load()
        url = offer()
        if url:
            return url
    return None
