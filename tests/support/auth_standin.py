"""A loopback stand-in for a PostgreSQL server's login: it reads the startup message and asks
for a password the way a real server would (SCRAM, or cleartext), then records what came
back. Enough to see what a client does when it has no password, or which one it sends."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SCRAM = struct.pack("!i", 10) + b"SCRAM-SHA-256\x00\x00"
CLEARTEXT = struct.pack("!i", 3)


@contextmanager
def asking_for_a_password(request: bytes) -> Iterator[tuple[int, list[bytes]]]:
    """(the port, what each client answered to ``request``: its password message's body)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    answers: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with client:
                client.settimeout(5)
                try:
                    length = struct.unpack("!i", _read(client, 4))[0]
                    _read(client, length - 4)  # protocol version and parameters
                    client.sendall(b"R" + struct.pack("!i", 4 + len(request)) + request)
                    code = _read(client, 1)
                    body = _read(client, struct.unpack("!i", _read(client, 4))[0] - 4)
                    if code == b"p":
                        answers.append(body)
                except (OSError, struct.error):
                    pass

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1], answers
    finally:
        listener.close()


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data
