"""Connections: ``DATABASE_URL`` parsing, connecting with pg8000, and running catalogue queries.

``Session`` runs a named query from the catalogue on either a pg8000 native connection (which
pgdrain's functions own, with prepared statements for the hot path) or any DB-API connection
an application already has open (pg8000.dbapi, psycopg), so that enqueueing joins the
application's own transaction.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, unquote, urlencode, urlsplit

import pg8000.native
from pg8000.converters import TIMESTAMPTZ, timestamptz_in
from pg8000.core import IDLE, CoreConnection

from . import deadline_socket
from .errors import ConfigError, DatabaseTimeout, DatabaseUnavailable, PgdrainError, QueryFailed
from .sql import QUERIES, to_format

log = logging.getLogger(__name__)

_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_Result = tuple[list[str], list[Sequence[Any]]]  # a statement's column names, its rows' values


@dataclass(frozen=True)
class ConnectParams:
    """Where and how to connect; ``repr`` never shows the password."""

    user: str
    database: str
    host: str | None = None
    port: int = 5432
    unix_sock: str | None = None
    password: str | None = field(default=None, repr=False)
    sslmode: str = "prefer"
    sslrootcert: str | None = None
    application_name: str | None = "pgdrain"
    timeout: float | None = None

    @property
    def where(self) -> str:
        """host:port/database (or the socket path), safe to print."""
        return f"{self.unix_sock or f'{self.host}:{self.port}'}/{self.database}"


def parse_database_url(url: str) -> ConnectParams:
    """Parse ``postgresql://user:pass@host:port/db?sslmode=...`` (or ``?host=/socket/dir``).

    Raises ConfigError naming what is wrong, without echoing the URL (it may hold a password).
    """
    # urllib's own messages quote parts of the URL, which may be the password: never pass
    # them on. An unencoded / ? or # in the password is the usual cause.
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        raise ConfigError("DATABASE_URL is not a valid URL") from None
    try:
        port_in_netloc = parts.port
    except ValueError:
        raise ConfigError("DATABASE_URL port is not a number (percent-encode characters such "
                          "as / ? # @ : in the user name and password)") from None
    if parts.scheme not in ("postgres", "postgresql"):
        raise ConfigError("DATABASE_URL must start with postgresql:// (or postgres://)")
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    known = {"host", "port", "sslmode", "sslrootcert", "application_name", "connect_timeout",
             "user", "password", "dbname"}
    unknown = sorted(set(query) - known)
    if unknown:  # options= is libpq's way to a search_path: pgdrain names its schema itself
        hint = " (for a schema of pgdrain's own, set PGDRAIN_SCHEMA)" * ("options" in unknown)
        raise ConfigError(f"DATABASE_URL has unsupported parameters: {', '.join(unknown)}{hint}")

    host = query.get("host") or (unquote(parts.hostname) if parts.hostname else None)
    port = port_in_netloc or 5432
    if query.get("port"):
        try:
            port = int(query["port"])
        except ValueError:
            raise ConfigError("DATABASE_URL port must be a number") from None
    user = query.get("user") or unquote(parts.username or "") or "postgres"
    password = query.get("password") or (unquote(parts.password) if parts.password else None)
    database = query.get("dbname") or unquote(parts.path.lstrip("/")) or user

    unix_sock = None
    if host is None or host.startswith("/"):
        socket_dir = host or "/var/run/postgresql"
        unix_sock = f"{socket_dir.rstrip('/')}/.s.PGSQL.{port}"
        host = None

    local = unix_sock is not None or host in _LOCAL_HOSTS
    sslmode = query.get("sslmode") or ("disable" if unix_sock else
                                       "prefer" if local else "verify-full")
    if sslmode not in _SSLMODES:
        raise ConfigError(f"DATABASE_URL sslmode must be one of {', '.join(_SSLMODES)}")
    timeout = None
    if query.get("connect_timeout"):
        try:
            timeout = float(query["connect_timeout"])
        except ValueError:
            raise ConfigError("DATABASE_URL connect_timeout must be a number") from None
    return ConnectParams(
        user=user, database=database, host=host, port=port, unix_sock=unix_sock,
        password=password, sslmode=sslmode, sslrootcert=query.get("sslrootcert"),
        application_name=query.get("application_name") or "pgdrain", timeout=timeout,
    )


def with_database(url: str, database: str) -> str:
    """``url`` pointed at another database on the same server."""
    parts = urlsplit(url)
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "dbname"])
    return parts._replace(path=f"/{database}", query=query).geturl()


RDS_CA_BUNDLE = Path(__file__).with_name("certs") / "rds-ca-bundle.pem"
"""Amazon RDS's certificate authorities and RDS Proxy's, shipped with pgdrain (the layer has
it at /opt/python/pgdrain/certs/rds-ca-bundle.pem; certs/SOURCE.md says where it comes from)."""
# <name>.<id>.<region>.rds.amazonaws.com: instances, clusters, RDS Proxy (.cn in China).
_RDS_HOST = re.compile(r"\.([a-z]{2}(?:-[a-z]+)+-\d)\.rds\.amazonaws\.com(?:\.cn)?$")


def rds_region(host: str | None) -> str | None:
    """The AWS region of an RDS, Aurora or RDS Proxy endpoint; None for any other host."""
    match = _RDS_HOST.search((host or "").lower().rstrip("."))
    return match.group(1) if match else None


def ssl_context_for(params: ConnectParams) -> ssl.SSLContext | bool | None:
    """pg8000's ``ssl_context`` for an sslmode: False = plain, None = TLS if offered, True =
    TLS without verification, a context = TLS verified against ``sslrootcert``, or for an RDS
    host with none given the RDS CA bundle pgdrain ships, or else the system's CAs.
    """
    mode = params.sslmode
    if mode == "disable":
        return False
    if mode in ("allow", "prefer"):
        return None
    if mode == "require":
        return True
    cafile = params.sslrootcert
    if cafile is None and rds_region(params.host) is not None:
        cafile = str(RDS_CA_BUNDLE)
    context = ssl.create_default_context(cafile=cafile)
    context.check_hostname = mode == "verify-full"
    return context


def timestamptz_from_text(text: str) -> datetime | str:
    """A timestamptz in PostgreSQL's text (DateStyle ISO): a datetime, or the text where
    Python has none (infinity, BC, year > 9999). pg8000's own strptime cost a drain more
    time than its SQL did; fromisoformat is about 50 times faster."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        parsed: datetime | str = timestamptz_in(text)
        return parsed


def connect(params: ConnectParams | str, *, timeout: float | None = None
            ) -> pg8000.native.Connection:
    """Open a pg8000 native connection (autocommit) for ``params`` or a URL. ``timeout``
    (seconds) bounds the connect and each socket read, lowering the URL's own
    ``connect_timeout`` if that is longer."""
    if isinstance(params, str):
        params = parse_database_url(params)
    if timeout is not None and (params.timeout is None or timeout < params.timeout):
        params = replace(params, timeout=timeout)
    try:
        conn = pg8000.native.Connection(
            user=params.user, password=params.password, host=params.host or "localhost",
            port=params.port, database=params.database, unix_sock=params.unix_sock,
            ssl_context=ssl_context_for(params), timeout=params.timeout,
            application_name=params.application_name)
    except AttributeError:  # pg8000 decodes a missing password for SCRAM: say what it is
        if params.password is not None:
            raise
        conn = None  # raised below, not here: no AttributeError as its context
    if conn is None:
        raise pg8000.native.InterfaceError("server requesting SCRAM password authentication, "
                                           "but no password was provided")
    conn.register_in_adapter(TIMESTAMPTZ, timestamptz_from_text)
    _no_delay(conn)
    deadline_socket.install(conn)
    return conn


def _no_delay(conn: pg8000.native.Connection) -> None:
    """Send each message at once (TCP_NODELAY). pg8000 writes through an 8 KB buffer: a
    message longer than that went out in two writes, and Nagle held the second until the
    server's delayed ACK of the first, 40 ms later (a 9 KB statement with parameters: 48 ms
    a run instead of 4; a batch enqueue's bind of 8 KB of payloads alike)."""
    sock = getattr(conn, "_usock", None)
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _encode(value: Any) -> Any:
    """Python values the drivers do not send as PostgreSQL expects."""
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return array_literal(value)
    return value


def array_literal(values: Any) -> str:
    """A PostgreSQL array literal of ``values`` with every element quoted (None is NULL).

    pg8000 quotes an element only when it must, and misses that PostgreSQL reads an unquoted
    ``null`` in any case as NULL: the strings "null", "Null" or "nULl" became SQL NULLs.
    Quoting every element makes each one its exact text, whatever it holds; the statement's
    cast (``:ids::bigint[]``) gives the elements their type.
    """
    parts = []
    for value in values:
        if value is None:
            parts.append("NULL")
            continue
        if isinstance(value, str):
            text = value
        elif isinstance(value, bool):
            text = "t" if value else "f"
        elif isinstance(value, datetime):
            # In UTC: PostgreSQL refuses offsets beyond ±15:59, which Python allows.
            text = (value.astimezone(UTC) if value.tzinfo else value).isoformat()
        elif isinstance(value, int):
            text = int.__repr__(value)  # an IntEnum's repr is "<P.HIGH: -1>"
        elif isinstance(value, float):
            text = float.__repr__(value)
        else:
            raise TypeError(f"no array element form for {type(value).__name__}")
        if "\\" in text or '"' in text:
            text = text.replace("\\", "\\\\").replace('"', '\\"')
        parts.append(f'"{text}"')
    return "{" + ",".join(parts) + "}"


UNIQUE_VIOLATION = "23505"
DEADLOCK_DETECTED = "40P01"
# The server cancelled a statement at statement_timeout / gave up a lock wait at lock_timeout.
_TIMEOUT_SQLSTATES = frozenset({"57014", "55P03"})
# The server is going away or not yet there: the connection is done for (class 08 too).
_GONE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "57P05", "25P03"})


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a server error (pgdrain's QueryFailed, or raised by pg8000, native or
    DB-API, or psycopg), else None. Looks through pgdrain's own wrappers to the driver's."""
    if isinstance(exc, QueryFailed):
        return exc.sqlstate
    if isinstance(exc, DatabaseUnavailable) and exc.__cause__ is not None:
        exc = exc.__cause__
    fields = exc.args[0] if exc.args else None
    if isinstance(fields, dict):
        return fields.get("C")
    return getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)  # psycopg 3, 2


def _translated(exc: Exception) -> PgdrainError:
    """pgdrain's error for a pg8000 error: DatabaseTimeout, DatabaseUnavailable (the
    connection is gone or going), or QueryFailed (the server refused the statement)."""
    if isinstance(exc, pg8000.native.InterfaceError | OSError):
        if isinstance(exc, TimeoutError) or isinstance(exc.__cause__, TimeoutError):
            return DatabaseTimeout("the database did not answer within the time left")
        return DatabaseUnavailable("the connection to the database failed")
    state = sqlstate(exc)
    if state in _TIMEOUT_SQLSTATES:
        what = "a lock wait" if state == "55P03" else "a statement"
        return DatabaseTimeout(f"{what} ran out of the time left (SQLSTATE {state})")
    if state in _GONE_SQLSTATES or (state or "").startswith("08"):
        return DatabaseUnavailable(f"the database ended the session (SQLSTATE {state})")
    fields = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
    # The server's message and code; not its source file, line and routine.
    return QueryFailed(f"{fields.get('M') or type(exc).__name__} (SQLSTATE {state})", state)


class Session:
    """Runs catalogue statements by name and returns rows as dicts.

    Give it a pg8000 native connection or a DB-API connection. With ``prepare=True`` (native
    only), each statement is prepared once per connection: one round trip per run instead of
    three.
    """

    def __init__(self, conn: Any, *, prepare: bool = False):
        self.conn = conn
        self.native = isinstance(conn, pg8000.native.Connection)
        if prepare and not self.native:
            raise TypeError("prepared statements need a pg8000.native.Connection")
        self._prepare = prepare
        self._prepared: dict[str, Any] = {}
        self.deadline: float | None = None
        """``time.monotonic()`` past which no statement may wait (native connections only)."""

    def rows(self, query: str, /, **params: Any) -> list[dict[str, Any]]:
        """Run the named query; return its rows (an empty list for statements without rows).

        On a native connection, a lost connection or a timeout raises DatabaseUnavailable or
        DatabaseTimeout (the driver's error as its cause); other server errors are the
        driver's. With a ``deadline``, the socket waits no longer than the time left.
        """
        names, values = self._execute(query, params)
        return [dict(zip(names, row, strict=True)) for row in values]

    def values(self, query: str, /, **params: Any) -> list[Sequence[Any]]:
        """As ``rows``, each row its values in column order (no dict: the claim's hot path)."""
        return self._execute(query, params)[1]

    def _execute(self, query: str, params: dict[str, Any]) -> _Result:
        params = {k: _encode(v) for k, v in params.items()}
        if self.native:
            if self.deadline is not None:
                self._bound_socket()
            try:
                return self._run_native(query, params)
            except (pg8000.native.InterfaceError, pg8000.native.DatabaseError, OSError) as exc:
                # pg8000 wraps most socket errors, but not one on the first read of a reply.
                raise _translated(exc) from exc
        cursor = self.conn.cursor()
        try:
            statement, names = to_format(QUERIES[query])
            cursor.execute(statement, tuple(params[n] for n in names))
            described = cursor.description
            return ([c[0] for c in described], list(cursor.fetchall())) if described else ([], [])
        finally:
            cursor.close()

    def _bound_socket(self) -> None:
        """Make the statement's reads and writes give up at the deadline."""
        deadline: float = self.deadline  # type: ignore[assignment]
        if deadline <= time.monotonic():
            raise NoTimeLeft("no time left for another database statement")
        deadline_socket.bound(self.conn, deadline)

    def _run_native(self, query: str, params: dict[str, Any]) -> _Result:
        if self._prepare:
            statement = self._prepared.get(query)
            if statement is None:
                statement = self._prepared[query] = self.conn.prepare(QUERIES[query])
            result = statement.run(**params)
            columns = statement.columns
        elif params:
            # Connection.run() converts the :name parameters of the text on every call,
            # which took a third of an enqueue; convert each catalogue statement once.
            statement, make_vals = _converted(QUERIES[query])
            context = self.conn.execute_unnamed(statement, make_vals(params), oids=())
            result, columns = context.rows, context.columns
        else:
            result = self.conn.run(QUERIES[query])
            columns = self.conn.columns
        return ([c["name"] for c in columns], result) if columns else ([], [])

    def one(self, query: str, /, **params: Any) -> dict[str, Any] | None:
        """The first row of the named query, or None."""
        found = self.rows(query, **params)
        return found[0] if found else None

    def run_script(self, sql: str) -> None:
        """Run a multi-statement script (migrations) with the simple query protocol."""
        if self.native:
            self.conn.run(sql)
        else:
            cursor = self.conn.cursor()
            try:
                cursor.execute(sql)
            finally:
                cursor.close()

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A transaction on a native connection pgdrain owns; rolled back on any exception."""
        if not self.native:
            raise TypeError("pgdrain only opens transactions on connections it owns; "
                            "a DB-API connection's transaction belongs to its caller")
        self.rows("transaction_begin")
        try:
            yield self
        except BaseException:
            # A broken connection cannot roll back; the original error is the one to report.
            with suppress(Exception):
                self.rows("transaction_rollback")
            raise
        self.rows("transaction_commit")

    def autocommitting(self) -> bool:
        """Whether this is a native connection outside any transaction (each statement its
        own), so that a failed statement can simply be run again."""
        # pg8000 keeps the server's ReadyForQuery status here; IDLE means no transaction.
        return self.native and getattr(self.conn, "_transaction_status", None) == IDLE

    def close(self) -> None:
        self._prepared.clear()
        self.conn.close()


@functools.cache
def _converted(sql: str) -> tuple[str, Callable[[dict[str, Any]], tuple[Any, ...]]]:
    """A catalogue statement with $n placeholders, and the function ordering its values."""
    converted: tuple[str, Callable[[dict[str, Any]], tuple[Any, ...]]] = \
        pg8000.native.to_statement(sql)
    return converted


# libpq's PQtransactionStatus, which psycopg 3 (``conn.info.transaction_status``) and psycopg2
# (the same, and ``conn.get_transaction_status()``) report as they have it.
_PQTRANS_IDLE, _PQTRANS_INTRANS, _PQTRANS_INERROR = 0, 2, 3


def in_transaction(conn: Any) -> bool | None:
    """Whether the caller's connection has a transaction open (or failed and not yet rolled
    back): False when it is idle, None when its driver does not tell (a command is still in
    progress, the connection is broken, or a driver pgdrain does not know).

    Each driver says it its own way: pg8000 (native and DB-API) keeps the status byte of the
    server's last ReadyForQuery; psycopg 3 and psycopg2 report libpq's status.
    """
    if isinstance(conn, Session):
        conn = conn.conn
    if isinstance(conn, CoreConnection):
        # None until the first statement's reply (pg8000 clears it after the login): idle.
        status = conn._transaction_status
        return status is not None and status != IDLE
    try:
        info = getattr(conn, "info", None)
        code = getattr(info, "transaction_status", None)
        if code is None and callable(getattr(conn, "get_transaction_status", None)):
            code = conn.get_transaction_status()  # psycopg2 before 2.8: no conn.info
    except Exception:  # a driver of its own may raise for a broken connection: no answer
        return None
    if isinstance(code, int):
        if code == _PQTRANS_IDLE:
            return False
        if code in (_PQTRANS_INTRANS, _PQTRANS_INERROR):
            return True
    return None


def roll_back(conn: Any) -> None:
    """End the transaction open on a connection, discarding it (DB-API: ``rollback()``)."""
    session = as_session(conn)
    if session.native:
        session.rows("transaction_rollback")
    else:
        session.conn.rollback()


def as_session(conn: Any) -> Session:
    """A Session for a connection, or the Session itself."""
    return conn if isinstance(conn, Session) else Session(conn)


class Connector:
    """Owns a function's connection across warm invocations; reconnects when it died.

    ``connect(timeout=seconds)`` opens a pg8000 native connection (``timeout`` bounds the
    connect and login; None: no bound). ``open(deadline)`` starts an invocation's use of it.
    """

    def __init__(self, connect: Callable[..., pg8000.native.Connection], *,
                 prepare: bool = True, server_bounds: bool = True):
        self._connect = connect
        self._prepare = prepare
        self._server_bounds = server_bounds
        self._session: Session | None = None
        self._deadline: float | None = None
        self._pool: ConnectionPool | None = None
        self.generation = 0
        """How many connections this connector has opened: what a session-level lock (the
        drain's slot) was taken on is gone when it changes."""

    def session(self) -> Session:
        """The live session, connecting first if there is none (within the deadline of the
        last ``open``: a connection dropped mid-invocation comes back bounded as before, or
        not at all once the time is up)."""
        if self._session is None:
            self.open(self._deadline)
        return self._session  # type: ignore[return-value]

    @property
    def connected(self) -> bool:
        """Whether a connection is open (it may still have died since it was last used)."""
        return self._session is not None

    def open(self, deadline: float | None = None) -> bool:
        """Make the session ready for an invocation that must be over by ``deadline``
        (``time.monotonic()``), connecting if needed. True if a dead warm connection had to
        be replaced.

        Every wait on the connection is then bounded by the deadline: the connect and login,
        each socket read (the client gives up), and with ``server_bounds`` on the server each
        statement (``statement_timeout``) and lock wait (``lock_timeout``, a tenth of the time
        left but at least a second), so that a statement the client gave up on does not run
        on holding its locks. One round trip, which is also the warm connection's liveness
        check. Raises DatabaseUnavailable (DatabaseTimeout when time ran out).

        The server's bounds are session settings, which pin the session behind a pooler
        (RDS Proxy, PgBouncer in transaction mode): without ``server_bounds`` only the client
        is bounded (set ``statement_timeout`` and ``lock_timeout`` on the role instead).
        """
        self._deadline = deadline
        if self._session is not None:
            try:
                self._bound(self._session, deadline)
                return False
            except DatabaseTimeout:
                self.discard()
                raise  # the server is slow, not gone: a new connection would not help
            except DatabaseUnavailable:
                self.discard()
            replaced = True
        else:
            replaced = False
        timeout = None if deadline is None else _time_left(deadline)
        session = self._session = Session(self._connect(timeout=timeout), prepare=self._prepare)
        self.generation += 1
        self._bound(session, deadline)
        return replaced

    def _bound(self, session: Session, deadline: float | None) -> None:
        session.deadline = deadline
        if deadline is None or not self._server_bounds:
            session.one("connection_ping")
            return
        session.one("connection_bound",
                    **server_bounds(math.floor(_time_left(deadline) * 1000)))

    def pool(self, size: int) -> ConnectionPool:
        """Connections of their own for transactional handlers on worker threads, at most
        ``size`` lent at once; kept with this connector, so warm invocations reuse them."""
        if self._pool is None:
            self._pool = ConnectionPool(self)
        self._pool.size = size
        return self._pool

    def sibling(self) -> Connector:
        """A new, unconnected Connector to the same database with the same options (a
        transactional handler's own connection)."""
        return Connector(self._connect, prepare=self._prepare, server_bounds=self._server_bounds)

    def ensure_alive(self) -> bool:
        """Ping a reused connection; replace it once if it is dead. True if replaced."""
        return self.open(None)

    def discard(self) -> None:
        """Drop the connection (it is broken, or mid-protocol after an interrupted handler),
        and the pool's idle ones with it."""
        if self._pool is not None:
            self._pool.discard_idle()
        if self._session is not None:
            session, self._session = self._session, None
            try:
                session.close()
            except Exception:  # already broken: closing it cannot fail in a way that matters
                log.debug("closing a discarded connection failed", exc_info=True)


class ConnectionPool:
    """Connections for transactional handlers on worker threads: at most ``size`` lent."""

    def __init__(self, connector: Connector):
        self.connector = connector
        self.size = 0
        self.idle: list[Connector] = []
        self.lent: dict[int, Connector] = {}
        self.lock = threading.Lock()

    def lend(self, deadline: float) -> Session | None:
        """An open session (connected, or checked, within ``deadline``); None if ``size`` are
        lent already."""
        with self.lock:
            if len(self.lent) >= self.size:
                return None
            connector = self.idle.pop() if self.idle else self.connector.sibling()
        try:
            connector.open(deadline)
            session = connector.session()
        except BaseException:
            connector.discard()
            with self.lock:
                self.idle.append(connector)
            raise
        with self.lock:
            self.lent[id(session)] = connector
        return session

    def give_back(self, session: Session, *, broken: bool) -> None:
        """Return a lent session; ``broken`` drops its connection (mid-protocol, or dead)."""
        with self.lock:
            connector = self.lent.pop(id(session), None)
        if connector is None:
            return
        if broken:
            connector.discard()
        with self.lock:
            self.idle.append(connector)

    def discard_idle(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for connector in idle:
            connector.discard()


# A lock wait may take a tenth of the time left (a row or table lock held by someone else's
# transaction), but never less than a second.
LOCK_SHARE = 10
MIN_LOCK_TIMEOUT_MS = 1000
# A transaction of pgdrain's own sends its statements back to back: idle longer than the lock
# wait (at most this), its client is gone or cut off, and the server ends it and its locks.
MAX_IDLE_IN_TRANSACTION_MS = 5000


def server_bounds(statement_ms: int) -> dict[str, int]:
    """``connection_bound``'s parameters for a session whose work must end within
    ``statement_ms``: each statement within it, a lock wait within a tenth of it (at least a
    second), an idle transaction within the lock wait (at most MAX_IDLE_IN_TRANSACTION_MS)."""
    statement_ms = max(statement_ms, 1)
    lock_ms = min(statement_ms, max(MIN_LOCK_TIMEOUT_MS, statement_ms // LOCK_SHARE))
    return {"statement_ms": statement_ms, "lock_ms": lock_ms,
            "idle_ms": min(lock_ms, MAX_IDLE_IN_TRANSACTION_MS)}


class NoTimeLeft(DatabaseTimeout):
    """The deadline passed before a statement could be sent: nothing was asked of the
    database (the caller's own clock, not the database, ran out)."""


def _time_left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise NoTimeLeft("no time left to reach the database")
    return left
