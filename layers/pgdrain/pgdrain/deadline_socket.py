"""A pg8000 connection's socket bounded by a deadline, not by a timeout per read.

A socket timeout bounds each read, and a statement is several: pg8000 reads a reply message
by message, and a prepared statement's first run is two exchanges. Set once before the
statement, a timeout of "the time left" let every later read wait that long again: a claim
cut off after its Parse was answered gave up 50 ms past the deadline, and a server that
dribbles a reply out could hold the drain indefinitely. Here each read and write waits at
most until the deadline the session set, whatever came before it.
"""

from __future__ import annotations

import io
import socket
import time
from typing import Any

LAST_LOOK_SECONDS = 0.001
"""Past the deadline, a read still takes what has already arrived, and a write (a closing
Terminate) still goes out if the send buffer has room; neither waits longer than this."""


class _BoundedSocketIO(socket.SocketIO):
    """The raw stream under pg8000's buffered one; before each system call, the socket's
    timeout becomes the time left until ``deadline`` (None: as it was set)."""

    def __init__(self, sock: socket.socket):
        super().__init__(sock, "rwb")
        sock._io_refs += 1  # type: ignore[attr-defined]  # as socket.makefile counts it
        self._socket = sock
        self.deadline: float | None = None

    def _bound(self) -> None:
        if self.deadline is not None:
            self._socket.settimeout(max(self.deadline - time.monotonic(), LAST_LOOK_SECONDS))

    def readinto(self, b: Any) -> int | None:
        self._bound()
        return super().readinto(b)

    def write(self, b: Any) -> int | None:
        self._bound()
        return super().write(b)


class BoundedStream(io.BufferedRWPair):
    """pg8000's ``_sock``, replaced: reads and writes through ``_BoundedSocketIO``."""

    def __init__(self, raw: _BoundedSocketIO):
        super().__init__(raw, raw, io.DEFAULT_BUFFER_SIZE)
        self.raw_io = raw


def install(conn: Any) -> None:
    """Replace a new pg8000 connection's buffered stream with a bounded one. Only right
    after login, when the server has nothing more to send: nothing buffered is lost."""
    sock = getattr(conn, "_usock", None)
    if sock is None or isinstance(getattr(conn, "_sock", None), BoundedStream):
        return
    old = conn._sock
    conn._sock = BoundedStream(_BoundedSocketIO(sock))
    old.close()  # its reference to the socket only; the socket stays open


def bound(conn: Any, deadline: float) -> None:
    """Make the connection's reads and writes give up at ``deadline`` (``time.monotonic()``).
    A connection opened elsewhere (an app's own) gets the time left as its timeout."""
    stream = getattr(conn, "_sock", None)
    if isinstance(stream, BoundedStream):
        stream.raw_io.deadline = deadline
        return
    sock = getattr(conn, "_usock", None)
    if sock is not None:
        sock.settimeout(max(deadline - time.monotonic(), LAST_LOOK_SECONDS))
