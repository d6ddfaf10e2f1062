"""pgdrain's connections send each message at once (TCP_NODELAY): through pg8000's 8 KB write
buffer, a longer message went out in two writes and Nagle held the second until the server's
delayed ACK, 40 ms a statement (docs/benchmarks.md)."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest

from pgdrain import db


def test_a_tcp_connection_to_the_database_sends_without_delay(database_url):
    conn = db.connect(database_url)
    try:
        sock = conn._usock
        if sock.family == socket.AF_UNIX:
            pytest.skip("this server is reached over a Unix socket (no Nagle there)")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        conn.close()


def test_no_delay_is_set_on_a_loopback_socket_and_left_alone_on_a_unix_one():
    server = socket.create_server(("127.0.0.1", 0))
    with server, socket.create_connection(server.getsockname()) as tcp:
        db._no_delay(SimpleNamespace(_usock=tcp))
        assert tcp.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        db._no_delay(SimpleNamespace(_usock=left))  # no TCP option on a Unix socket: no error
