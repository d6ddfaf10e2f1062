"""A loopback TCP proxy in front of the test database that can fall silent.

``partition()`` makes it drop every byte in both directions while keeping the connections
open: what a network partition, a security group change or a dead NAT looks like to a client
(no reset, no answer). ``heal()`` forwards again. The upstream is the test database's own
address (a Unix socket for the embedded server, or 127.0.0.1), so nothing leaves the machine.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress
from urllib.parse import urlencode, urlsplit

from pgdrain.db import parse_database_url


class SilentProxy:
    def __init__(self, database_url: str):
        self._params = parse_database_url(database_url)
        self._url = database_url
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.silent = threading.Event()
        self._sockets: list[socket.socket] = []
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self) -> str:
        """The test database's URL, through the proxy (TCP, no TLS)."""
        parts = urlsplit(self._url)
        query = urlencode({"sslmode": "disable"})
        user = parts.username or "postgres"
        return f"postgresql://{user}@127.0.0.1:{self.port}/{self._params.database}?{query}"

    def partition(self) -> None:
        self.silent.set()

    def heal(self) -> None:
        self.silent.clear()

    def close(self) -> None:
        self._closing = True
        with suppress(OSError):
            self._listener.close()
        for sock in self._sockets:
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
            upstream = self._upstream()
            self._sockets += [client, upstream]
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                with suppress(OSError):
                    target.shutdown(socket.SHUT_WR)
                return
            if self.silent.is_set():
                continue  # dropped on the floor
            try:
                target.sendall(data)
            except OSError:
                return
