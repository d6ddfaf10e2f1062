"""Fixtures for the console: it runs in this process, on a free loopback port, against this
test's database, exactly as ``pgdrain console`` serves it; ``Client`` is a browser without a
browser (it keeps the cookie the token gets and sends the CSRF token with every form)."""

from __future__ import annotations

import http.cookiejar
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from pgdrain.db import connect

pytest.importorskip("jinja2", reason="the console's dependencies: pip install -e console/")


@dataclass
class Running:
    url: str
    """``http://127.0.0.1:PORT``."""
    token: str
    csrf: str
    app: Any
    host: str = "127.0.0.1"
    opened: list[Any] = field(default_factory=list)

    def start_url(self, path: str = "/") -> str:
        return f"{self.url}{path}{'&' if '?' in path else '?'}token={self.token}"


@dataclass
class Page:
    status: int
    body: str
    headers: Any
    url: str

    def links(self, pattern: str = r".*") -> list[str]:
        return [h for h in re.findall(r'href="([^"]*)"', self.body) if re.fullmatch(pattern, h)]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Client:
    """Requests to the console as a browser sends them, cookies kept (signed in by ``sign_in``)."""

    def __init__(self, running: Running):
        self.running = running
        self.jar = http.cookiejar.CookieJar()
        self.follow = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.stay = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar),
                                                _NoRedirect)

    def sign_in(self) -> Page:
        return self.get(self.running.start_url("/"))

    def get(self, path: str, *, follow: bool = True, headers: dict[str, str] | None = None
            ) -> Page:
        url = path if path.startswith("http") else self.running.url + path
        return self._open(urllib.request.Request(url, headers=headers or {}), follow)

    def post(self, path: str, fields: dict[str, str], *, csrf: bool = True, follow: bool = True,
             headers: dict[str, str] | None = None) -> Page:
        form = {**fields, **({"csrf": self.running.csrf} if csrf else {})}
        request = urllib.request.Request(
            self.running.url + path, data=urllib.parse.urlencode(form).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded", **(headers or {})},
            method="POST")
        return self._open(request, follow)

    def _open(self, request: urllib.request.Request, follow: bool) -> Page:
        opener = self.follow if follow else self.stay
        try:
            with opener.open(request, timeout=30) as answer:
                return Page(answer.status, answer.read().decode(), answer.headers, answer.url)
        except urllib.error.HTTPError as answer:
            return Page(answer.code, answer.read().decode(), answer.headers, request.full_url)


@pytest.fixture
def start_console(database_url: str) -> Iterator[Callable[..., Running]]:
    """Start a console on this test's database: ``start_console(allow_actions=True)``."""
    from pgdrain_console.app import Console, Settings
    from pgdrain_console.connections import Connections
    from pgdrain_console.guard import Guard, new_token
    from pgdrain_console.server import serve

    servers: list[Any] = []

    def start(*, allow_actions: bool = False, refresh_seconds: float = 0.0,
              open_connection: Callable[[], Any] | None = None) -> Running:
        server = serve(None, "127.0.0.1", 0)
        port = server.server_address[1]
        guard = Guard(new_token(), "127.0.0.1", port)
        connections = Connections(open_connection or (lambda: connect(database_url)))
        app = Console(connections=connections, guard=guard, settings=Settings(
            where="tester@127.0.0.1/test (DATABASE_URL)", allow_actions=allow_actions,
            refresh_seconds=refresh_seconds, max_drains=4))
        server.set_app(app)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                  daemon=True)
        thread.start()
        servers.append((server, thread, connections))
        return Running(f"http://127.0.0.1:{port}", guard.token, guard.csrf, app)

    yield start
    for server, thread, connections in servers:
        server.shutdown()
        server.server_close()
        thread.join(10)
        connections.close()


@pytest.fixture
def console(start_console: Callable[..., Running]) -> Running:
    """A read-only console."""
    return start_console()


@pytest.fixture
def acting_console(start_console: Callable[..., Running]) -> Running:
    """A console started with --allow-actions."""
    return start_console(allow_actions=True)


@pytest.fixture
def client(console: Running) -> Client:
    signed = Client(console)
    signed.sign_in()
    return signed


@pytest.fixture
def acting_client(acting_console: Running) -> Client:
    signed = Client(acting_console)
    signed.sign_in()
    return signed
