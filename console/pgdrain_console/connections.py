"""The console's database connections and its one shared overview.

A few connections, opened when first needed and lent to one request at a time; a connection
that failed is closed, not lent again (the next request opens a fresh one: after a failover the
console comes back by itself). Each statement is bounded by the server (``STATEMENT_MS``) and
each answer by the socket. The overview is read at most once per refresh interval whatever the
number of open tabs: the first request after the interval reads it while the others wait for
that read, and all of them get the same snapshot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from pgdrain import db

STATEMENT_MS = 5_000
"""The server's bound on one statement of a page (each is an index read of milliseconds)."""
ACTION_STATEMENT_MS = 30_000
"""A bulk action's statements: a batch of a thousand jobs, behind the drains' row locks."""
LOCK_MS = 3_000
WAIT_SECONDS = 35.0
"""The socket's bound on one answer: above the statements' bound, so the server says first."""
BORROW_SECONDS = 10.0
"""How long a request waits for a free connection before it is told the console is busy."""


class Busy(Exception):
    """Every connection is lent and none came back in time."""


class Connections:
    def __init__(self, open_connection: Callable[[], Any], *, size: int = 4):
        self._open = open_connection
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self._free = threading.BoundedSemaphore(size)

    @contextmanager
    def connection(self, *, statement_ms: int = STATEMENT_MS) -> Iterator[Any]:
        if not self._free.acquire(timeout=BORROW_SECONDS):
            raise Busy("every database connection is in use; try again in a moment")
        conn = None
        try:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = self._open()
                sock = getattr(conn, "_usock", None)
                if sock is not None:
                    sock.settimeout(WAIT_SECONDS)
            db.as_session(conn).one("connection_bound", statement_ms=statement_ms,
                                    lock_ms=LOCK_MS, idle_ms=LOCK_MS)
            yield conn
        except BaseException:
            if conn is not None:
                _close(conn)
                conn = None
            raise
        finally:
            if conn is not None:
                with self._lock:
                    self._idle.append(conn)
            self._free.release()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            _close(conn)


def _close(conn: Any) -> None:
    with suppress(Exception):  # a broken connection may not close cleanly: dropped either way
        conn.close()


class Shared:
    """A value read at most once per ``seconds``, shared by every request.

    Only the first read keeps a request waiting. Once there is a value, a request that finds
    it older than ``seconds`` gets it at once, with its age, and starts one read in the
    background that replaces it: a page never waits for the database's slowest read, and the
    database sees one read per interval however many tabs are open. A failed read keeps the
    last value (``error`` says why, until a read succeeds); with no value yet, the failure is
    raised, and shared for ``seconds`` so that a database that is down is not asked once per
    tab. At ``seconds`` 0, every request reads, and waits for it (the tests' setting).
    """

    def __init__(self, read: Callable[[], Any], *, seconds: float,
                 clock: Callable[[], float] = time.monotonic):
        self._read = read
        self._seconds = seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._first = threading.Lock()
        self._at: float | None = None
        """When the last read ended (the next starts ``seconds`` after)."""
        self._value_at = 0.0
        """When the value was read (its age)."""
        self._value: Any = None
        self._refreshing = False
        self._generation = 0
        """Counts ``forget``s: a read that began before one is not kept."""
        self.error: Exception | None = None
        self.reads = 0

    def get(self) -> tuple[Any, float]:
        """The value and its age in seconds; raises the read's error while there is none."""
        with self._lock:
            if self._value is not None and self._seconds > 0:
                self._refresh_if_due()
                return self._value, self._clock() - self._value_at
        with self._first:  # one read at a time; the requests behind it get its value
            with self._lock:
                if self._value is not None and self._seconds > 0:
                    return self._value, self._clock() - self._value_at
                if self.error is not None and self._at is not None \
                        and self._clock() - self._at < self._seconds:
                    raise self.error
            self._refresh()
            with self._lock:
                if self._value is None or (self._seconds == 0 and self.error is not None):
                    assert self.error is not None
                    raise self.error
                return self._value, self._clock() - self._value_at

    def forget(self) -> None:
        """The value is out of date (an action changed what it shows): the next request
        reads anew, and waits for it."""
        with self._lock:
            self._value, self._at = None, None
            self._generation += 1

    def _refresh_if_due(self) -> None:
        """(Under the lock.) One background read, once ``seconds`` have passed since the last."""
        if not self._refreshing and self._clock() - (self._at or 0.0) >= self._seconds:
            self._refreshing = True
            threading.Thread(target=self._refresh, name="pgdrain-console-refresh",
                             daemon=True).start()

    def _refresh(self) -> None:
        with self._lock:
            generation = self._generation
        try:
            value, error = self._read(), None
        except Exception as exc:
            value, error = None, exc
        with self._lock:
            self.reads += 1
            self._refreshing = False
            if generation != self._generation:
                return  # forgotten while it read: the next request reads again
            self._at = self._clock()
            if error is None:
                self._value, self._value_at = value, self._at
            self.error = error
