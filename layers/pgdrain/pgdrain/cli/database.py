"""Which database the command talks to: the one the functions reach, configured the same way
(``DATABASE_URL``, ``DB_SECRET_ARN``, or ``DB_IAM_AUTH`` with ``DB_HOST``, ``DB_USER`` and
``DB_NAME``), or else a local database a development package offers (pgdrain-dev offers the
embedded PostgreSQL that ``make demo`` leaves behind)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigError

WAIT_SECONDS = 60.0
"""How long the command waits to connect, and for any one answer."""
STATEMENT_MS = 50_000
"""The server's bound on one statement: under the wait, so the server gives up first and says
so (every batch the commands run takes a fraction of it)."""
LOCK_WAIT_MS = 5_000
"""How long a statement waits for a row lock (a purge or requeue behind a drain's claim)."""

DATABASES_GROUP = "pgdrain.databases"
"""Entry points offering a database when none is configured: a function returning a URL, or
None when it has none to offer (pgdrain-dev's ``demo`` before ``make demo`` ran)."""

_SETTINGS = ("DATABASE_URL", "DB_SECRET_ARN", "DB_IAM_AUTH")


def open_connection(env: Mapping[str, str] | None = None) -> Any:
    """A pg8000 native connection (autocommit), every wait bounded."""
    from .. import db
    from ..aws.credentials import SETUP_HINT, connect_from_env

    env = os.environ if env is None else env
    if any(env.get(name, "").strip() for name in _SETTINGS):
        conn = connect_from_env(env, timeout=WAIT_SECONDS)
    else:
        url = _offered_database()
        if url is None:
            raise ConfigError(f"no database configured: {SETUP_HINT}; or run `make demo` in a "
                              "clone of the repository to have its embedded one")
        conn = db.connect(url, timeout=WAIT_SECONDS)
    db.as_session(conn).one("connection_bound", statement_ms=STATEMENT_MS,
                            lock_ms=LOCK_WAIT_MS, idle_ms=LOCK_WAIT_MS)
    return conn


def _offered_database() -> str | None:
    from importlib.metadata import entry_points

    for entry in entry_points(group=DATABASES_GROUP):
        offer: Callable[[], str | None] = entry.load()
        url = offer()
        if url:
            return url
    return None
