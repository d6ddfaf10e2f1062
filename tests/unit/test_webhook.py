"""The real ``deliver-webhook`` handler against a local HTTP server started by the tests."""

from __future__ import annotations

import base64
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import pgdrain

if "pgdrain_dev.demo_jobs.seed" in sys.modules:  # it registers a simulated deliver-webhook
    pytest.skip("pgdrain_dev.demo_jobs.seed is imported in this process",
                allow_module_level=True)

from pgdrain_jobs import webhook
from pgdrain_jobs.webhook import WebhookError, deliver_webhook


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay: float = 0.0


class Server:
    """A local HTTP server: ``routes`` maps a path to its ``Reply``; ``received`` records."""

    def __init__(self) -> None:
        self.routes: dict[str, Reply] = {}
        self.received: list[Received] = []
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                server.received.append(Received(self.command, self.path, dict(self.headers),
                                                self.rfile.read(length)))
                reply = server.routes.get(self.path.partition("?")[0], Reply(404))
                if reply.delay and server.stopping.wait(reply.delay):
                    return
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            do_GET = do_POST

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Quiet(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that timed out and hung up is expected here

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def reply(self, path: str, status: int = 200, **kwargs: Any) -> str:
        self.routes[path] = Reply(status, **kwargs)
        return self.url(path)


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    srv.thread.start()
    try:
        yield srv
    finally:
        srv.stopping.set()
        srv.httpd.shutdown()
        srv.httpd.server_close()
        srv.thread.join(timeout=5)


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                 "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setenv(webhook.TIMEOUT_ENV, "2")
    # The local test server is on loopback, which the handler refuses unless allowed.
    monkeypatch.setenv(webhook.ALLOWED_NETWORKS_ENV, "127.0.0.1/32")


def make_job(payload: Any, *, job_id: int = 42, attempts: int = 1) -> pgdrain.Job:
    now = datetime.now(UTC)
    return pgdrain.Job(id=job_id, job_type="deliver-webhook", payload=payload, attempts=attempts,
                       max_attempts=5, queue="default", priority=0, run_at=now, created_at=now,
                       claimed_at=now, lease_expires_at=now, lease_token="lease-token")


def deliver(payload: Any, **kwargs: Any) -> None:
    deliver_webhook(make_job(payload, **kwargs))


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_registered_with_a_timeout():
    handler = pgdrain.REGISTRY.get("deliver-webhook")
    assert handler is not None
    assert handler.func is deliver_webhook
    assert handler.timeout == webhook.HANDLER_TIMEOUT_SECONDS


def test_2xx_is_done_and_posts_the_json_body_with_the_idempotency_key(server):
    url = server.reply("/hook", 200, body=b'{"ok": true}')
    body = {"event": "order.paid", "amount": 12.5, "tags": ["a", "\u00e9"]}

    assert deliver({"url": url, "body": body, "headers": {"X-Signature": "sig"}}) is None

    (request,) = server.received
    assert (request.method, request.path) == ("POST", "/hook")
    assert json.loads(request.body) == body
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Idempotency-Key"] == make_job({}).idempotency_key == "pgdrain-job-42"
    assert request.headers["User-Agent"] == "pgdrain"
    assert request.headers["X-Signature"] == "sig"


def test_the_idempotency_key_is_the_same_on_every_attempt(server):
    url = server.reply("/hook", 204)
    deliver({"url": url}, job_id=7, attempts=1)
    deliver({"url": url}, job_id=7, attempts=2)
    deliver({"url": url}, job_id=8, attempts=1)
    keys = [r.headers["Idempotency-Key"] for r in server.received]
    assert keys == ["pgdrain-job-7", "pgdrain-job-7", "pgdrain-job-8"]


def test_the_body_defaults_to_an_empty_object(server):
    deliver({"url": server.reply("/hook", 201)})
    assert server.received[0].body == b"{}"


def test_userinfo_is_sent_as_basic_auth(server):
    url = server.reply("/hook", 200).replace("http://", "http://ann:p%40ss@")
    deliver({"url": url})
    expected = "Basic " + base64.b64encode(b"ann:p@ss").decode()
    assert server.received[0].headers["Authorization"] == expected


def test_a_payload_user_agent_replaces_the_default(server):
    deliver({"url": server.reply("/hook"), "headers": {"User-Agent": "acme/1"}})
    assert server.received[0].headers["User-Agent"] == "acme/1"


def test_500_is_retried(server):
    url = server.reply("/hook", 500, body=b"database is down\n" + b"x" * 5000)
    with pytest.raises(Exception) as info:
        deliver({"url": url})
    assert not isinstance(info.value, pgdrain.Snooze | pgdrain.Discard)
    assert isinstance(info.value, WebhookError)
    assert info.value.status == 500
    message = str(info.value)
    assert "HTTP 500" in message
    assert "database is down" not in message  # a response body is never kept


@pytest.mark.parametrize("status", [404, 410, 400, 401, 422])
def test_other_4xx_are_discarded(server, status):
    url = server.reply("/hook", status, body=b"no such hook")
    with pytest.raises(pgdrain.Discard, match=rf"HTTP {status}") as info:
        deliver({"url": url})
    assert "no such hook" not in str(info.value)


@pytest.mark.parametrize("status", [408, 429, 503])
def test_transient_statuses_without_retry_after_are_retried(server, status):
    with pytest.raises(WebhookError, match=f"HTTP {status}"):
        deliver({"url": server.reply("/hook", status)})


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_snoozes(server, status):
    url = server.reply("/hook", status, headers={"Retry-After": "7"})
    with pytest.raises(pgdrain.Snooze) as info:
        deliver({"url": url})
    assert info.value.delay_seconds == 7


@pytest.mark.parametrize(("retry_after", "expected"), [("86400", 3600), ("0", 1)])
def test_retry_after_is_capped_and_floored(server, retry_after, expected):
    url = server.reply("/hook", 429, headers={"Retry-After": retry_after})
    with pytest.raises(pgdrain.Snooze) as info:
        deliver({"url": url})
    assert info.value.delay_seconds == expected


def test_retry_after_as_an_http_date(server):
    when = format_datetime(datetime.fromtimestamp(time.time() + 120, UTC), usegmt=True)
    url = server.reply("/hook", 503, headers={"Retry-After": when})
    with pytest.raises(pgdrain.Snooze) as info:
        deliver({"url": url})
    assert 100 <= info.value.delay_seconds <= 121


def test_an_unparseable_retry_after_is_retried(server):
    url = server.reply("/hook", 429, headers={"Retry-After": "soon"})
    with pytest.raises(WebhookError, match="HTTP 429"):
        deliver({"url": url})


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirects_are_discarded_not_followed(server, status):
    server.reply("/moved", 200)
    url = server.reply("/hook", status, headers={"Location": "/moved?token=secret"})
    with pytest.raises(pgdrain.Discard, match="redirect") as info:
        deliver({"url": url})
    assert f"HTTP {status}" in str(info.value)
    assert server.url("/moved") in str(info.value)
    assert "secret" not in str(info.value)
    assert [r.path for r in server.received] == ["/hook"]


def test_a_slow_server_times_out_and_is_retried(server, monkeypatch):
    monkeypatch.setenv(webhook.TIMEOUT_ENV, "0.5")
    url = server.reply("/slow", 200, delay=3)
    started = time.monotonic()
    with pytest.raises(WebhookError, match="timed out") as info:
        deliver({"url": url})
    assert time.monotonic() - started < 2
    assert not isinstance(info.value, pgdrain.Snooze | pgdrain.Discard)


def test_a_refused_connection_is_retried():
    with pytest.raises(WebhookError) as info:
        deliver({"url": f"http://127.0.0.1:{closed_port()}/hook"})
    assert not isinstance(info.value, pgdrain.Snooze | pgdrain.Discard)
    assert "refused" in str(info.value).lower()


@pytest.mark.parametrize("value", ["0", "-1", "ten", "nan"])
def test_an_invalid_timeout_setting_is_a_config_error(server, monkeypatch, value):
    monkeypatch.setenv(webhook.TIMEOUT_ENV, value)
    with pytest.raises(pgdrain.ConfigError, match=webhook.TIMEOUT_ENV):
        deliver({"url": server.reply("/hook")})
    assert server.received == []


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({}, r"url: is required"),
        ({"body": {}}, r"url: is required"),
        ({"url": 7}, r"url: must be a non-empty string"),
        ({"url": ""}, r"url: must be a non-empty string"),
        ({"url": "ftp://example.com/x"}, r"url: must be http or https, got 'ftp'"),
        ({"url": "example.com/hook"}, r"url: must be http or https"),
        ({"url": "https:///hook"}, r"url: must have a host"),
        ({"url": "https://example.com/a hook"}, r"url: must not contain spaces"),
        ({"url": "https://example.com/\n"}, r"url: must not contain spaces or control"),
        ({"url": "https://example.com:99999/"}, r"url: is not a valid URL"),
        ({"url": "https://bücher.example/"}, r"url: must be ASCII"),
        ({"url": "https://e.com", "headers": ["X-A: 1"]}, r"headers: must be an object"),
        ({"url": "https://e.com", "headers": "X-A: 1"}, r"headers: must be an object"),
        ({"url": "https://e.com", "headers": {"X-A": 1}}, r"headers\.X-A: must be a string"),
        ({"url": "https://e.com", "headers": {"X-A": None}}, r"headers\.X-A: must be a string"),
        ({"url": "https://e.com", "headers": {"X A": "1"}}, r"headers: 'X A' is not a valid"),
        ({"url": "https://e.com", "headers": {"X-A": "1\r\nX-B: 2"}},
         r"headers\.X-A: must not contain CR, LF"),
        ({"url": "https://e.com", "headers": {"X-A": "\u2603"}}, r"headers\.X-A: must be Latin-1"),
        ({"url": "https://e.com", "headers": {"Idempotency-Key": "mine"}},
         r"headers\.Idempotency-Key: is set by pgdrain"),
        ({"url": "https://e.com", "headers": {"content-type": "text/plain"}},
         r"headers\.content-type: is set by pgdrain"),
        ({"url": "https://e.com", "body": float("nan")}, r"body: must be JSON-serialisable"),
        ({"url": "https://e.com", "header": {}}, r"payload: unknown field\(s\) 'header'"),
        (["https://e.com"], r"payload: must be a JSON object"),
        (None, r"payload: must be a JSON object"),
    ],
)
def test_invalid_payloads_are_discarded_naming_the_field(payload, message):
    with pytest.raises(pgdrain.Discard, match=message):
        deliver(payload)


SECRET_PARTS = ("token=secret", "secret", "user:pw", "pw@")


@pytest.mark.parametrize(
    ("path", "status", "reply"),
    [
        ("/fail", 500, {}),
        ("/gone", 404, {}),
        ("/moved", 302, {"headers": {"Location": "http://user:pw@elsewhere/x?token=secret"}}),
        ("/busy", 429, {"headers": {"Retry-After": "5"}}),
        ("/slow", 200, {"delay": 3}),
    ],
)
def test_the_url_s_credentials_never_appear_in_errors(server, monkeypatch, path, status, reply):
    monkeypatch.setenv(webhook.TIMEOUT_ENV, "0.5")
    server.reply(path, status, **reply)
    url = f"http://user:pw@127.0.0.1:{server.port}{path}?token=secret"
    with pytest.raises(Exception) as info:
        deliver({"url": url})
    message = str(info.value)
    assert f"http://127.0.0.1:{server.port}{path}" in message
    for part in SECRET_PARTS:
        assert part not in message
    assert server.received[0].path == f"{path}?token=secret"  # the query string was sent


@pytest.mark.parametrize(
    "url",
    [
        "http://user:pw@127.0.0.1:{port}/hook?token=secret",  # connection refused
        "http://user:pw@127.0.0.1:{port}/a hook?token=secret",  # invalid
        "ftp://user:pw@127.0.0.1:{port}/hook?token=secret",  # invalid
    ],
)
def test_the_url_s_credentials_never_appear_in_other_errors(url):
    with pytest.raises(Exception) as info:
        deliver({"url": url.format(port=closed_port())})
    for part in SECRET_PARTS:
        assert part not in str(info.value)


# --- destinations: only public addresses, unless allowed ------------------------------------
# No test here sends a packet anywhere but loopback: names resolve through a patched
# getaddrinfo, and a patched create_connection fails the test if a refused address is dialled.


def _resolving(monkeypatch, answers: dict[str, list[str]]) -> None:
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in answers:
            return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                     (a, port)) for a in answers[host]]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture
def dialled(monkeypatch) -> list[tuple[str, int]]:
    """Every address the handler connects to; nothing is actually connected."""
    calls: list[tuple[str, int]] = []

    def create_connection(address, *args, **kwargs):
        calls.append(address)
        raise ConnectionRefusedError("the test refuses every connection")

    monkeypatch.setattr(socket, "create_connection", create_connection)
    return calls


def test_a_loopback_url_is_refused_and_nothing_reaches_the_server(server, monkeypatch):
    monkeypatch.delenv(webhook.ALLOWED_NETWORKS_ENV)
    url = server.reply("/hook", 200)
    with pytest.raises(pgdrain.Discard, match=r"refused: 127\.0\.0\.1 is a loopback address"):
        deliver({"url": url})
    with pytest.raises(pgdrain.Discard, match="loopback"):
        deliver({"url": f"http://localhost:{server.port}/hook"})
    assert server.received == []


def test_an_allowed_network_is_reached(server):
    deliver({"url": server.reply("/hook", 204)})
    assert [r.path for r in server.received] == ["/hook"]


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("169.254.169.254", "link-local"),
        ("10.0.0.5", "private"),
        ("172.16.3.4", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "not a public address"),
        ("127.0.0.2", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved|private"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("fd00:ec2::254", "private"),
        ("fec0::1", "site-local"),
        ("::ffff:169.254.169.254", "link-local"),
        ("::ffff:10.0.0.1", "private"),
        ("2002:a9fe:a9fe::1", "link-local"),
        ("64:ff9b::a9fe:a9fe", "link-local"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
    ],
)
def test_non_public_destinations_are_refused_before_any_connection(monkeypatch, dialled,
                                                                   address, why):
    monkeypatch.delenv(webhook.ALLOWED_NETWORKS_ENV)
    _resolving(monkeypatch, {"hook.example": [address]})
    with pytest.raises(pgdrain.Discard, match=why) as info:
        deliver({"url": "https://hook.example/in"})
    assert "refused" in str(info.value) and address in str(info.value)
    assert dialled == []


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]:9/hook",
    "http://2130706433/hook",  # 127.0.0.1 as one number
    "http://0x7f.1/hook",
    "http://[::ffff:127.0.0.1]/hook",
])
def test_ip_literals_in_any_form_are_checked(monkeypatch, dialled, url):
    monkeypatch.delenv(webhook.ALLOWED_NETWORKS_ENV)
    with pytest.raises(pgdrain.Discard, match="refused"):
        deliver({"url": url})
    assert dialled == []


def test_a_name_with_one_private_answer_among_public_ones_is_refused(monkeypatch, dialled):
    _resolving(monkeypatch, {"hook.example": ["93.184.216.34", "10.0.0.7"]})
    with pytest.raises(pgdrain.Discard, match=r"10\.0\.0\.7"):
        deliver({"url": "https://hook.example/in"})
    assert dialled == []


def test_a_public_destination_is_dialled_at_the_checked_address(monkeypatch, dialled):
    # The answer is checked once and that address is dialled: a second lookup that could
    # answer differently (DNS rebinding) never happens.
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host == "hook.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in next(answers)]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    with pytest.raises(WebhookError, match="ConnectionRefusedError"):
        deliver({"url": "https://hook.example:8443/in"})
    assert dialled == [("93.184.216.34", 8443)]


def test_a_slow_dns_lookup_times_out_and_is_retried(monkeypatch, dialled):
    monkeypatch.setenv(webhook.TIMEOUT_ENV, "0.3")
    release = threading.Event()

    def getaddrinfo(*args, **kwargs):
        release.wait(5)
        raise socket.gaierror("too late")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    started = time.monotonic()
    try:
        with pytest.raises(WebhookError, match=r"DNS lookup of hook\.example timed out"):
            deliver({"url": "https://hook.example/in"})
    finally:
        release.set()
    assert time.monotonic() - started < 2
    assert dialled == []


@pytest.mark.parametrize("value", ["10.0.0.0/33", "hooks.internal", "10.0.0.0/8,nonsense"])
def test_an_invalid_allow_list_is_a_config_error(monkeypatch, dialled, value):
    monkeypatch.setenv(webhook.ALLOWED_NETWORKS_ENV, value)
    with pytest.raises(pgdrain.ConfigError, match=webhook.ALLOWED_NETWORKS_ENV):
        deliver({"url": "https://hook.example/in"})
    assert dialled == []
