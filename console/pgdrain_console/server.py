"""The console's HTTP server: the standard library's WSGI server, a thread per request, each
connection's reads bounded, and a log line per request that never holds the query string (the
first request's carries the access token)."""

from __future__ import annotations

import socket
import sys
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

REQUEST_SECONDS = 30
"""How long the server waits for a request's bytes (a stalled client holds a thread no longer)."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's backlog is 5: a browser opening several tabs at once had its sixth
    # connection dropped and retried a second later.
    request_queue_size = 128


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(WSGIRequestHandler):
    timeout = REQUEST_SECONDS

    def log_message(self, format: str, *args: Any) -> None:
        path = self.path.split("?", 1)[0] if hasattr(self, "path") else "-"
        command = getattr(self, "command", None) or "-"
        status = args[1] if len(args) > 1 and format.startswith('"%s"') else ""
        sys.stderr.write(f"pgdrain console: {command} {path} {status}\n")

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        path = self.path.split("?", 1)[0] if hasattr(self, "path") else "-"
        sys.stderr.write(f"pgdrain console: {self.command} {path} {code}\n")


def serve(app: Any, host: str, port: int) -> WSGIServer:
    """A server bound to ``host``:``port`` (0: any free port), not yet serving."""
    server_class = _Server6 if ":" in host else _Server
    return make_server(host, port, app, server_class=server_class, handler_class=_Handler)
