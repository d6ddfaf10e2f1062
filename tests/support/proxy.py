"""A loopback TCP proxy in front of the test database that can fall silent.

``partition()`` makes it drop every byte in both directions while keeping the connections
open: what a network partition, a security group change or a dead NAT looks like to a client
and to the server (no reset, no answer, and no FIN: a client that gives up and closes its
socket behind a partition is never heard closing it, so the server sees an idle session, not
a dead one). ``partition_on(marker)`` makes it fall silent at an exact point of the protocol:
when a client→server chunk contains ``marker`` (a fragment of a statement's SQL text, which
travels in the Parse message the first time a connection prepares the statement).
``heal()`` forwards again. ``slow_answers(seconds, piece)`` makes the server's answers late
and, with ``piece``, dribbled out a few bytes at a time. The upstream is the test database's
own address (a Unix socket for the embedded server, or 127.0.0.1), so nothing leaves the
machine.
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import suppress
from urllib.parse import urlencode, urlsplit

from pgdrain.db import parse_database_url

# The frontend's Sync message: pg8000 ends each round trip of the extended protocol with it.
_SYNC = b"S\x00\x00\x00\x04"


def _ends_round_trip(chunk: bytes) -> bool:
    """Whether a client→server chunk ends a round trip: its last message is Sync, or it is
    one whole simple Query."""
    if chunk.endswith(_SYNC):
        return True
    return chunk[:1] == b"Q" and int.from_bytes(chunk[1:5], "big") + 1 == len(chunk)


class SilentProxy:
    def __init__(self, database_url: str):
        self._params = parse_database_url(database_url)
        self._url = database_url
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.silent = threading.Event()
        """Set while partitioned: ``silent.wait(timeout)`` waits for a ``partition_on``."""
        self._sockets: list[socket.socket] = []
        self._closing = False
        self._lock = threading.Lock()
        self._marker: bytes | None = None
        self._forward = 0
        self._answer = False
        self._forwarded = 0
        self._armed = False  # the marker was seen; counting the chunks still forwarded
        self._delay = 0.0
        self._piece: int | None = None
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, application_name: str | None = None) -> str:
        """The test database's URL, through the proxy (TCP, no TLS); ``application_name``
        names the server sessions opened through it, so a test can find them in
        pg_stat_activity."""
        parts = urlsplit(self._url)
        query = {"sslmode": "disable"}
        if application_name:
            query["application_name"] = application_name
        user = parts.username or "postgres"
        return (f"postgresql://{user}@127.0.0.1:{self.port}/{self._params.database}"
                f"?{urlencode(query)}")

    def partition(self) -> None:
        self.silent.set()

    def partition_on(self, marker: bytes, *, forward: int = 0, answer: bool = False) -> None:
        """Fall silent when a client→server chunk contains ``marker``.

        ``forward`` = 0: that chunk is dropped, and everything after it both ways (the server
        never sees the statement). ``forward`` = n: that chunk's round trip and the n - 1
        client round trips after it are still forwarded (a round trip is the chunks up to one
        that ends with Sync: a message over pg8000's 8 KB buffer comes in two), and the
        silence starts right after the last of them
        (the server runs it, its answer is dropped), or with ``answer`` at the next client
        chunk (the client hears the answer; what it sends next is dropped). pg8000 prepares a
        statement in one round trip (Parse, the text) and runs it in the next (Bind/Execute),
        so ``forward=2`` delivers a statement's first run.
        """
        with self._lock:
            self._marker, self._forward, self._answer = marker, forward, answer
            self._forwarded, self._armed = 0, False

    def slow_answers(self, seconds: float, piece: int | None = None) -> None:
        """Hold each chunk the server sends ``seconds`` before forwarding it; with ``piece``,
        forward it ``piece`` bytes at a time, each after ``seconds`` (a reply that trickles
        in). ``slow_answers(0)`` forwards at once again."""
        self._delay, self._piece = seconds, piece

    def heal(self) -> None:
        with self._lock:
            self._marker, self._armed = None, False
        self.silent.clear()

    def close(self) -> None:
        self._closing = True
        with suppress(OSError):
            self._listener.close()
        for sock in list(self._sockets):
            with suppress(OSError):
                sock.close()

    def _upstream(self) -> socket.socket:
        if self._params.unix_sock:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self._params.unix_sock)
            return sock
        return socket.create_connection((self._params.host, self._params.port))

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            try:
                upstream = self._upstream()
            except OSError:
                client.close()
                continue
            self._sockets.append(upstream)
            if self._closing:  # close() ran while this one was accepted: it missed them
                client.close()
                upstream.close()
                return
            for source, target, to_server in ((client, upstream, True),
                                              (upstream, client, False)):
                threading.Thread(target=self._pump, args=(source, target, to_server),
                                 daemon=True).start()

    def _passes(self, data: bytes, tail: bytes) -> bool:
        """Whether a client→server chunk is forwarded (deciding the marker's silence)."""
        with self._lock:
            if self.silent.is_set():
                return False
            if not self._armed:
                # The tail of the previous chunk too: a marker cut in two is still seen.
                if self._marker is None or self._marker not in tail + data:
                    return True
                self._armed = True
            if self._forwarded >= self._forward:  # forward=0, or answered: drop from here
                self.silent.set()
                return False
            if not _ends_round_trip(data):
                # pg8000 writes through an 8 KB buffer: a longer Parse or Bind comes in more
                # than one chunk, and only the one that ends the round trip counts.
                return True
            self._forwarded += 1
            if self._forwarded == self._forward and not self._answer:
                # Set before the chunk goes out, so that no byte of the answer gets back.
                self.silent.set()
            return True

    def _pump(self, source: socket.socket, target: socket.socket, to_server: bool) -> None:
        tail = b""
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                # A closed socket behind a partition sends no FIN that arrives: the other
                # side keeps its connection open, as a real partition leaves it.
                if not self.silent.is_set():
                    with suppress(OSError):
                        target.shutdown(socket.SHUT_WR)
                return
            if to_server:
                passes = self._passes(data, tail)
                if self._marker:
                    tail = data[-len(self._marker):]
            else:
                passes = not self.silent.is_set()
            if not passes:
                continue  # dropped on the floor
            try:
                if not to_server and self._delay:
                    self._send_slowly(target, data)
                else:
                    target.sendall(data)
            except OSError:
                return

    def _send_slowly(self, target: socket.socket, data: bytes) -> None:
        piece = self._piece or len(data)
        for at in range(0, len(data), piece):
            time.sleep(self._delay)
            target.sendall(data[at:at + piece])
