"""Where pgdrain.testing's drains connect: the drain opens a connection of its own (as a Lambda
container has), so it needs where the test's connection goes, not the connection."""

from __future__ import annotations

import socket
import ssl
import weakref
from typing import Any

import pg8000.native
from pg8000.core import CoreConnection

from ..db import (
    Connector,
    ConnectParams,
    Session,
    connect,
    in_transaction,
    parse_database_url,
    roll_back,
)
from ..errors import DatabaseConnectError, PgdrainError, server_text

Where = str | ConnectParams | Connector
"""A URL, connection parameters, or a Connector: what a drain connects with."""


class OpenTransaction(PgdrainError):
    """The test's connection has a transaction open: the drain, on a connection of its own,
    cannot see what it enqueued (nor take rows it locked) until it commits."""


class NoDatabaseUrl(PgdrainError, TypeError):
    """A connection pgdrain.testing cannot find the database of."""


_URLS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
"""The URL of each connection made by ``connect`` (and so by the ``pgdrain_conn`` fixture)."""


def testing_connect(url: str) -> pg8000.native.Connection:
    """A connection (pg8000 native, autocommit) to ``url``, known to drain_all and run_job."""
    conn = connect(url)
    remember(conn, url)
    return conn


def remember(conn: Any, url: str) -> Any:
    """Tell pgdrain.testing the URL of a connection you opened yourself, for a driver it
    cannot read it from (or to give the drain other options); returns ``conn``."""
    _URLS[conn.conn if isinstance(conn, Session) else conn] = url
    return conn


def where_of(target: Any) -> Where:
    """Where a drain connects for ``target``: a URL, ``ConnectParams`` or a ``Connector`` as
    given; for a connection (pg8000, native or DB-API; psycopg 3 or 2), its URL if it was
    made by ``connect``/``pgdrain_conn`` or ``remember``ed, else its server, database, user
    and password as the driver has them. A connection with a transaction open is refused
    (OpenTransaction): the drain could not see its jobs."""
    if isinstance(target, str | ConnectParams | Connector):
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
        pass
    params = _pg8000_params(conn) if isinstance(conn, CoreConnection) else _libpq_params(conn)
    if params is None:
        raise NoDatabaseUrl(
            "pgdrain.testing needs to know where the database is to open the drain's own "
            f"connection, and cannot read it from this {type(conn).__name__}: pass the URL "
            "(the pgdrain_database fixture), a connection from the pgdrain_conn fixture or "
            "pgdrain.testing.connect(url), or call pgdrain.testing.remember(conn, url) once")
    return params


def _pg8000_params(conn: CoreConnection) -> ConnectParams | None:
    """pg8000 keeps the user and password, and its socket says where it goes; the database
    is asked (the connection is idle: a DB-API one is rolled back to idle after)."""
    sock = getattr(conn, "_usock", None)
    if not isinstance(sock, socket.socket):
        return None
    session = Session(conn)
    try:
        row = session.one("connection_database")
    finally:
        if not session.native:
            roll_back(conn)
    assert row is not None
    user = conn.user.decode() if isinstance(conn.user, bytes) else str(conn.user)
    password = conn.password.decode() if isinstance(conn.password, bytes) else conn.password
    common = {"user": user, "database": row["database"], "password": password}
    if sock.family == socket.AF_UNIX:
        return ConnectParams(**common, unix_sock=str(sock.getpeername()), sslmode="disable")
    host, port = sock.getpeername()[:2]
    return ConnectParams(**common, host=host, port=int(port),
                         sslmode="require" if isinstance(sock, ssl.SSLSocket) else "disable")


def _libpq_params(conn: Any) -> ConnectParams | None:
    """psycopg 3 and psycopg2 (2.8+) report host, port, database, user and password."""
    info = getattr(conn, "info", None)
    try:
        host, port = info.host, int(info.port)  # type: ignore[union-attr]
        database, user, password = info.dbname, info.user, info.password  # type: ignore[union-attr]
    except (AttributeError, TypeError, ValueError):
        return None
    pgconn = getattr(conn, "pgconn", None)
    secure = bool(getattr(pgconn, "ssl_in_use", False) or getattr(info, "ssl_in_use", False))
    common = {"user": user, "database": database, "password": password or None, "port": port,
              "sslmode": "require" if secure else "disable"}
    if not host or host.startswith("/"):
        return ConnectParams(**common, unix_sock=f"{(host or '/var/run/postgresql').rstrip('/')}"
                             f"/.s.PGSQL.{port}")
    return ConnectParams(**common, host=host)


def connector_for(where: Where) -> Connector:
    if isinstance(where, Connector):
        return where
    params = parse_database_url(where) if isinstance(where, str) else where

    def connected(timeout: float | None = None) -> pg8000.native.Connection:
        try:
            return connect(params, timeout=timeout)
        except (pg8000.native.InterfaceError, pg8000.native.DatabaseError, OSError) as exc:
            # As the functions' connect: the drain ends saying so (drain_all: DrainFailed).
            raise DatabaseConnectError(f"could not connect to {params.where}: "
                                       f"{server_text(exc)}") from exc

    return Connector(connected)
