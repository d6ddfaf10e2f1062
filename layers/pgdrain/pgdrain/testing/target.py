"""Where pgdrain.testing's drains connect: the drain opens a connection of its own (as a Lambda
container has), so it needs the database's URL, not the test's connection."""

from __future__ import annotations

import weakref
from typing import Any

import pg8000.native

from ..db import Connector, Session, connect, in_transaction
from ..errors import PgdrainError


class OpenTransaction(PgdrainError):
    """The test's connection has a transaction open: the drain, on a connection of its own,
    cannot see what it enqueued (nor take rows it locked) until it commits."""


class NoDatabaseUrl(PgdrainError, TypeError):
    """A connection pgdrain.testing cannot find the URL of."""


_URLS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
"""The URL of each connection made by ``connect`` (and so by the ``pgdrain_conn`` fixture)."""


def testing_connect(url: str) -> pg8000.native.Connection:
    """A connection (pg8000 native, autocommit) to ``url`` that drain_all, run_job and advance
    accept in place of the URL."""
    conn = connect(url)
    remember(conn, url)
    return conn


def remember(conn: Any, url: str) -> Any:
    """Tell pgdrain.testing the URL of a connection you opened yourself (any driver), so that
    ``drain_all(conn)`` works; returns ``conn``."""
    _URLS[conn.conn if isinstance(conn, Session) else conn] = url
    return conn


def url_of(target: Any) -> str | Connector:
    """The URL (or Connector) a drain uses for ``target``: a URL, a ``pgdrain.db.Connector``,
    or a connection made by ``connect``/``pgdrain_conn`` or ``remember``ed. A connection with a
    transaction open is refused (OpenTransaction): the drain could not see its jobs."""
    if isinstance(target, str | Connector):
        return target
    conn = target.conn if isinstance(target, Session) else target
    if in_transaction(conn):
        raise OpenTransaction(
            "the connection given has a transaction open: the drain runs on a connection of "
            "its own and cannot see jobs enqueued in that transaction (nor take rows it "
            "locked) until it commits. Commit first, or give the database URL and run your "
            "code in a transaction that commits")
    try:
        return _URLS[conn]
    except (KeyError, TypeError):
        raise NoDatabaseUrl(
            "pgdrain.testing needs the database URL to open the drain's own connection, and "
            f"does not know it for this {type(conn).__name__}: pass the URL (the "
            "pgdrain_database fixture), a connection from the pgdrain_conn fixture or "
            "pgdrain.testing.connect(url), or call pgdrain.testing.remember(conn, url) "
            "once") from None


def connector_for(where: str | Connector) -> Connector:
    if isinstance(where, Connector):
        return where
    return Connector(lambda timeout=None: connect(where, timeout=timeout))
