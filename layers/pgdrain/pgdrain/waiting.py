"""Awaiting a result: ``wait(conn, job_id, timeout=...)`` returns the job as soon as it is
finished (done, failed or cancelled), or raises WaitTimeout with the job as it stands.

Without a busy poll. On a pg8000 native connection outside a transaction the waiter LISTENs
on ``pgdrain_wait`` and writes a row in ``pgdrain_waiters``; the statements that finish jobs
(the drain's done and finish batches, a failure, a cancel) notify only the jobs that have
such a row (``waiters_woken`` in the catalogue), so a finish nobody waits for takes no notify
lock. Between notifications the waiter runs no statement: it waits on the connection's
socket, and reads the notification messages itself. A notification can be missed (a finish
whose statement began before the waiter registered, or a rarer path: the janitor's expiry, a
delete), so the waiter also reads the job's status by its primary key once a second: a
waiter costs the database one cheap statement a second at most, plus one per notification
about its own job.

Any other connection (DB-API, or one in a transaction, where notifications are not delivered
and a registration would not be seen) polls: the status read at once, after 0.1 s, 0.2 s,
0.4 s, 0.8 s, then once a second.
"""

from __future__ import annotations

import math
import select
import ssl
import struct
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from . import deadline_socket, store
from .db import Session, as_session, in_transaction
from .errors import DatabaseTimeout, DatabaseUnavailable, InvalidJobId, WaitTimeout

DEFAULT_TIMEOUT_SECONDS = 30.0
MAX_TIMEOUT_SECONDS = 900.0
"""The longest wait: a Lambda's longest run. The janitor forgets a waiter registered longer
ago than this (plus a minute), in case its backend id was reused."""
RECHECK_SECONDS = 1.0
"""The backstop: the waiter reads the job's status at least this often."""
MESSAGE_SECONDS = 5.0
"""How long the rest of a message may take once its first bytes are readable."""
FINISHED = frozenset({"done", "failed", "cancelled"})
CHANNEL = "pgdrain_wait"
_ASYNC_MESSAGES = (b"A", b"N", b"S")  # notification, notice, parameter status
_HEADER = struct.Struct("!ci")

counts: Counter[str] = Counter()
"""What waits did in this process, for tests and benchmarks: ``notified`` (a notification
about the job woke the waiter), ``rechecked`` (the once-a-second read ran), ``statements``
(every statement a wait ran), ``polled`` (waits that could not listen)."""


# --- pure decisions -------------------------------------------------------------------------


def timeout_problem(value: Any, *, most: float = MAX_TIMEOUT_SECONDS) -> str | None:
    """Why ``value`` is not a wait's timeout (seconds, a number from 0 to ``most``), or None."""
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or not 0 <= value <= most):
        return f"must be a number of seconds from 0 to {most:g}, not {value!r}"
    return None


def is_finished(status: str | None) -> bool:
    """Whether a job with this status has ended (a waiting or pending one has not)."""
    return status in FINISHED


def backoff_delays() -> Iterator[float]:
    """The polling waiter's delays between reads: 0.1, 0.2, 0.4, 0.8, then 1 s for ever."""
    delay = 0.1
    while True:
        yield min(delay, RECHECK_SECONDS)
        delay *= 2


# --- the wait ---------------------------------------------------------------------------------


def wait(conn: Any, job_id: int, *, timeout: float = DEFAULT_TIMEOUT_SECONDS,
         listen: bool = True) -> dict[str, Any]:
    """Wait until job ``job_id`` is finished (``done``, ``failed`` or ``cancelled``) and
    return it as ``pgdrain.get_job`` does (``status``, ``result``, ``last_error``...).

    A job waiting (for its parents or a signal), pending for a retry or running is not
    finished: the wait goes on. Raises WaitTimeout (a TimeoutError) with ``.job``, the job as
    it stands, after ``timeout`` seconds (30 by default, at most 900; 0 reads it once);
    InvalidJobId for an id that names no job (never enqueued, or deleted or purged, also
    while waiting), ValueError for a bad timeout. Every statement and socket wait ends by the
    timeout plus a few seconds. Run it on a connection of its own, outside a transaction, to
    be woken at once; see the module's docstring for what it costs. ``listen=False`` polls
    instead (once a second): for a connection behind a pooler in transaction mode (PgBouncer;
    RDS Proxy would pin it), where a LISTEN reaches another client's backend.
    """
    ident = store.job_id(job_id)
    problem = timeout_problem(timeout)
    if problem:
        raise ValueError(f"timeout {problem}")
    session = as_session(conn)
    end = time.monotonic() + float(timeout)
    with _bounded(session, end + MESSAGE_SECONDS):
        if listen and _can_listen(session):
            return _wait_listening(session, ident, end)
        counts["polled"] += 1
        return _wait_polling(session, ident, end)


def _can_listen(session: Session) -> bool:
    # pg8000 native only: its socket and its list of notifications are what the wait reads.
    return (session.native and getattr(session.conn, "_usock", None) is not None
            and in_transaction(session.conn) is False)


def _status(row: dict[str, Any] | None) -> str | None:
    counts["statements"] += 1
    return None if row is None else row["status"]


def _finished_or_timeout(session: Session, ident: int, end: float) -> dict[str, Any] | None:
    """The job read whole: returned if finished; WaitTimeout if time is up; None: wait on."""
    counts["statements"] += 1
    job = store.get_job(session, ident)
    if job is None:
        # A done job not kept (retention 0) is kept for a registered waiter, but one whose
        # finish began as the waiter registered may be gone: said here, as the API's 404 does.
        raise InvalidJobId(f"no job {ident}: never enqueued, or deleted or purged, or done "
                           "and not kept (PGDRAIN_RETENTION_SECONDS=0)")
    if is_finished(job["status"]):
        return job
    if time.monotonic() >= end:
        raise WaitTimeout(f"job {ident} is still {job['status']}", job)
    return None


def _wait_polling(session: Session, ident: int, end: float) -> dict[str, Any]:
    # Registered as a listening waiter is (no notification comes, but a done job is kept
    # for it at PGDRAIN_RETENTION_SECONDS=0), unless in the caller's transaction, where the
    # row would be the caller's to commit: it would keep nothing until then.
    registered = in_transaction(session.conn) is False
    delays = backoff_delays()
    status = _status(session.one("waiter_register" if registered else "waiter_status",
                                 id=ident))
    try:
        while True:
            if status is None or is_finished(status) or time.monotonic() >= end:
                job = _finished_or_timeout(session, ident, end)
                if job is not None:
                    return job
            time.sleep(max(0.0, min(next(delays), end - time.monotonic())))
            status = _status(session.one("waiter_status", id=ident))
    finally:
        if registered:  # behind a pooler another backend may answer: the janitor forgets it
            with suppress(Exception):
                counts["statements"] += 1
                session.rows("waiter_unregister", id=ident)


def _wait_listening(session: Session, ident: int, end: float) -> dict[str, Any]:
    conn = session.conn
    counts["statements"] += 1
    session.rows("waiter_listen")
    try:
        status = _status(session.one("waiter_register", id=ident))
        while True:
            if status is None or is_finished(status) or time.monotonic() >= end:
                job = _finished_or_timeout(session, ident, end)
                if job is not None:
                    return job
            if _notified(conn, ident, min(time.monotonic() + RECHECK_SECONDS, end)):
                counts["notified"] += 1
            else:
                counts["rechecked"] += 1
            status = _status(session.one("waiter_status", id=ident))
    finally:
        # A broken connection cannot say so: the janitor forgets the row of a dead backend,
        # and the error that broke the wait is the one to report.
        with suppress(Exception):
            counts["statements"] += 2
            session.rows("waiter_unregister", id=ident)
            session.rows("waiter_unlisten")
            _forget_notifications(conn)


def _notified(conn: Any, ident: int, until: float) -> bool:
    """Wait on the connection's socket until a notification about job ``ident`` arrives
    (True) or ``until`` (``time.monotonic()``) passes (False), running no statement:
    notifications about other waited jobs are read and dropped as they come."""
    mine = str(ident)
    while True:
        if _take(conn, mine):
            return True
        left = until - time.monotonic()
        if left <= 0 or not _readable(conn._usock, left):
            return False
        _read_message(conn)


def _take(conn: Any, payload: str) -> bool:
    """Drop this module's notifications from pg8000's list (the app's own stay); whether one
    was about job ``payload``."""
    found = False
    for item in [n for n in conn.notifications if n[1] == CHANNEL]:
        conn.notifications.remove(item)
        found = found or item[2] == payload
    return found


def _forget_notifications(conn: Any) -> None:
    _take(conn, "")


def _readable(sock: Any, seconds: float) -> bool:
    # Bytes TLS has decrypted already are not on the socket any more: select would miss them.
    # (Bytes pg8000's buffered reader took ahead with a statement's reply are missed: the
    # once-a-second read collects them.)
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(max(seconds, 0.0) * 1000))


def _read_message(conn: Any) -> None:
    """Read one message the server sent between statements, as pg8000 would: a notification
    goes to ``conn.notifications``. Anything else (an error: the server is shutting down or
    ended the backend) means the connection is done for."""
    try:
        code, length = _HEADER.unpack(_exactly(conn._sock, _HEADER.size))
        data = _exactly(conn._sock, length - 4)
    except TimeoutError as exc:
        raise DatabaseTimeout("the server stopped mid-message while a wait listened") from exc
    except OSError as exc:
        raise DatabaseUnavailable("the connection broke while a wait listened") from exc
    if code not in _ASYNC_MESSAGES:
        raise DatabaseUnavailable(f"the server sent {code!r} to a connection waiting for a "
                                  "notification (it may be shutting down)")
    conn.message_types[code](data, None)


def _exactly(stream: Any, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        block = stream.read(size - len(data))
        if not block:
            raise OSError("the server closed the connection")
        data.extend(block)
    return bytes(data)


@contextmanager
def _bounded(session: Session, deadline: float) -> Iterator[None]:
    """Every statement and socket read of the wait bounded by ``deadline`` (or the session's
    own, if sooner); the connection's own bounds put back after."""
    before = session.deadline
    session.deadline = deadline if before is None else min(before, deadline)
    conn = session.conn
    stream: Any = getattr(conn, "_sock", None)
    sock: Any = getattr(conn, "_usock", None)
    bounded_stream = isinstance(stream, deadline_socket.BoundedStream)
    kept = stream.raw_io.deadline if bounded_stream else (
        sock.gettimeout() if sock is not None else None)
    try:
        if session.native:
            deadline_socket.bound(conn, session.deadline)
        yield
    finally:
        session.deadline = before
        if bounded_stream:
            stream.raw_io.deadline = kept
        elif sock is not None:
            with suppress(OSError):
                sock.settimeout(kept)


def forget_dead(session: Session) -> int:
    """The janitor's: forget the waiters whose backend is gone, or that registered longer ago
    than any wait lasts; how many."""
    row = session.one("waiters_forget_dead", max_seconds=MAX_TIMEOUT_SECONDS + 60)
    return int(row["forgotten"]) if row else 0
