"""A real ``deliver-webhook`` handler: POST a JSON body to a URL, with the job's idempotency key.

Payload::

    {"url": "https://example.com/hooks",      # required; http or https, with a host
     "body": {"event": "order.paid"},           # any JSON; default {}
     "headers": {"Authorization": "Bearer x"}}  # optional extra string headers

The request carries ``Content-Type: application/json``, ``Idempotency-Key: <job.idempotency_key>``
(the same on every attempt, so the receiver can drop duplicates) and ``User-Agent: pgdrain``; the
payload's headers are added, but may not set ``Content-Type``, ``Idempotency-Key`` or the framing
headers (``Content-Length``, ``Transfer-Encoding``, ``Connection``). A ``user:password@`` in the
url is sent as HTTP Basic ``Authorization`` (unless the headers set one), as curl does.

Outcomes:

- 2xx: done;
- 429 or 503 with ``Retry-After`` (seconds or an HTTP date): ``Snooze`` for that long, at least
  1 s and at most an hour (the attempt is refunded);
- 5xx, 408, 429 without ``Retry-After``, connection errors and timeouts: ``WebhookError``,
  retried with backoff;
- 3xx: ``Discard``: redirects are not followed for a POST, the target is misconfigured;
- other 4xx, and an invalid payload: ``Discard`` (a permanent error).

Destinations: the drain runs inside the database's network, and any API caller can enqueue a
webhook, so only public addresses are reached. The host is resolved first (bounded by the
timeout) and every address it resolves to is checked: loopback, link-local (the instance
metadata service at 169.254.169.254), private, shared, reserved, multicast and unspecified
addresses, and IPv6 forms that embed one (IPv4-mapped, 6to4, NAT64, Teredo), are refused
(``Discard``) before any connection is opened; the connection then goes to the address that
was checked, so a second DNS answer cannot swap it. ``PGDRAIN_WEBHOOK_ALLOWED_NETWORKS``
(comma-separated networks, e.g. ``10.1.0.0/16,fd00:1::/64``) lets internal hooks through.
Proxy variables (``HTTPS_PROXY``) are not used.

``PGDRAIN_WEBHOOK_TIMEOUT_SECONDS`` (default 10, read on every call) bounds each network operation
(the DNS lookup, connect, send, each read); keep it well under the handler's 30 s budget, which
bounds the whole delivery. Error messages name the target as ``scheme://host/path`` only, never
its userinfo or query string, which may carry credentials; a secret kept in the path itself (as
some chat webhooks do) is not hidden. Nothing of a response body is kept: ``GET /jobs/{id}``
shows the job's errors to whoever may read the job, and a body could be anything the target
chose to say. At most 64 KiB of a 2xx response is read, and dropped.

This module is imported by the enqueue function just to learn the job types, so the HTTP
machinery (``http.client``, ``ssl``) is imported inside the handler, not here.
"""

from __future__ import annotations

from typing import Any, NoReturn

import pgdrain
from pgdrain.settings import DEFAULT_WEBHOOK_TIMEOUT_SECONDS, read

JOB_TYPE = "deliver-webhook"
HANDLER_TIMEOUT_SECONDS = 30
TIMEOUT_ENV = "PGDRAIN_WEBHOOK_TIMEOUT_SECONDS"
ALLOWED_NETWORKS_ENV = "PGDRAIN_WEBHOOK_ALLOWED_NETWORKS"
DEFAULT_TIMEOUT_SECONDS = DEFAULT_WEBHOOK_TIMEOUT_SECONDS
MAX_RESPONSE_BYTES = 64 * 1024
MAX_QUOTED_CHARS = 200
MIN_SNOOZE_SECONDS = 1.0
MAX_SNOOZE_SECONDS = 3600.0
USER_AGENT = "pgdrain"

_PAYLOAD_FIELDS = ("url", "body", "headers")
_RESERVED_HEADERS = ("content-type", "idempotency-key", "content-length", "transfer-encoding",
                     "connection")
# RFC 9110 token characters: the only ones allowed in a header name.
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789"
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


class WebhookError(Exception):
    """A delivery that may succeed later (5xx, timeout, connection error): retried with backoff.

    ``status`` is the HTTP status, or None when no response came back.
    """

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@pgdrain.job(JOB_TYPE, timeout=HANDLER_TIMEOUT_SECONDS)
def deliver_webhook(job: pgdrain.Job) -> None:
    """POST ``job.payload["body"]`` as JSON to ``job.payload["url"]``; see the module docstring."""
    import json
    from contextlib import suppress
    from http.client import HTTPException
    from urllib.parse import urlsplit

    url, target, authorization, body, extra_headers = _parse_payload(job.payload)
    try:
        data = json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise pgdrain.Discard(f"deliver-webhook: body: must be JSON-serialisable ({exc})") from None
    timeout = _timeout_seconds()
    allowed = _allowed_networks()
    parts = urlsplit(url)
    https = parts.scheme.lower() == "https"
    port = parts.port or (443 if https else 80)
    where = f"POST {target}"
    address = _public_address(parts.hostname or "", port, timeout, allowed, where)

    headers = {"Content-Type": "application/json", "Idempotency-Key": job.idempotency_key}
    names = {name.lower() for name in extra_headers}
    if "user-agent" not in names:
        headers["User-Agent"] = USER_AGENT
    if authorization and "authorization" not in names:
        headers["Authorization"] = authorization
    headers.update(extra_headers)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    connection = _connection(parts.hostname or "", port, address, timeout, https)
    response = None
    try:
        connection.request("POST", path, body=data, headers=headers)
        response = connection.getresponse()
        status = response.status
        if 200 <= status < 300:
            # Delivered: a body that fails to arrive no longer matters. Read a bounded amount
            # so the server is not cut off mid-write, then drop it.
            with suppress(OSError, HTTPException):
                response.read(MAX_RESPONSE_BYTES)
            return
        retry_after = response.getheader("Retry-After")
        location = response.getheader("Location")
    except (OSError, HTTPException) as exc:  # refused, reset, timed out, TLS, bad response
        raise WebhookError(f"{where}: {_describe(exc, timeout)}") from None
    finally:
        if response is not None:
            response.close()
        connection.close()
    raise _status_error(where, status, retry_after, location, url)


def _connection(host: str, port: int, address: str, timeout: float, https: bool) -> Any:
    """An HTTP(S) connection to ``host`` that connects to ``address``, the checked one: the
    Host header, TLS server name and certificate check still use ``host``."""
    import http.client
    import socket

    if not https:
        class Pinned(http.client.HTTPConnection):
            def connect(self) -> None:
                self.sock = socket.create_connection((address, port), self.timeout)

        return Pinned(host, port, timeout=timeout)

    import ssl

    class PinnedTLS(http.client.HTTPSConnection):
        def connect(self) -> None:
            sock = socket.create_connection((address, port), self.timeout)
            self.sock = self._context.wrap_socket(sock, server_hostname=host)

    return PinnedTLS(host, port, timeout=timeout, context=ssl.create_default_context())


def _public_address(host: str, port: int, timeout: float, allowed: list[Any],
                    where: str) -> str:
    """The address to connect to: ``host`` resolved, every answer public or allowed.

    Discard if one is not (checked before any connection opens); WebhookError if the lookup
    fails or takes longer than ``timeout`` (the resolver may be slow: a retry may do better).
    """
    import ipaddress

    answers = _resolve(host, port, timeout, where)
    for answer in answers:
        address = ipaddress.ip_address(answer.partition("%")[0])
        refusal = _refusal(address)
        if refusal and not any(address in network for network in allowed):
            shown = host if host == answer else f"{host} ({answer})"
            raise pgdrain.Discard(
                f"deliver-webhook: {where}: refused: {shown} is {refusal}; webhooks go to "
                f"public addresses only (allow internal ones with {ALLOWED_NETWORKS_ENV})")
    return answers[0]


def _resolve(host: str, port: int, timeout: float, where: str) -> list[str]:
    """``host``'s addresses (an IP literal is its own), the lookup bounded by ``timeout``.

    getaddrinfo cannot be given a timeout: it runs in a daemon thread that is left to finish
    on its own if it takes too long.
    """
    import socket
    import threading

    found: list[Any] = []

    def lookup() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            found.append(exc)

    thread = threading.Thread(target=lookup, name="pgdrain-webhook-dns", daemon=True)
    thread.start()
    thread.join(timeout)
    if not found:
        raise WebhookError(f"{where}: the DNS lookup of {host} timed out after {timeout:g} s")
    if isinstance(found[0], OSError):
        raise WebhookError(f"{where}: the DNS lookup of {host} failed: "
                           f"{found[0]}"[:MAX_QUOTED_CHARS])
    addresses = list(dict.fromkeys(info[4][0] for info in found[0]))
    if not addresses:
        raise WebhookError(f"{where}: {host} has no address")
    return addresses


def _refusal(address: Any) -> str | None:
    """Why ``address`` is not a public destination, or None if it is."""
    import ipaddress

    if address.version == 6:
        embedded = address.ipv4_mapped or address.sixtofour
        if address in ipaddress.ip_network(NAT64_PREFIX):
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            why = _refusal(embedded)
            return f"{why} (inside the IPv6 address {address})" if why else None
        if address.teredo is not None:
            return "a Teredo tunnel address"
        if address.is_site_local:
            return "a site-local address"
    for name, kind in (("is_loopback", "a loopback address"),
                       ("is_link_local", "a link-local address (instance metadata lives there)"),
                       ("is_unspecified", "the unspecified address"),
                       ("is_multicast", "a multicast address"),
                       ("is_private", "a private address"),
                       ("is_reserved", "a reserved address")):
        if getattr(address, name):
            return kind
    if not address.is_global:
        return "not a public address"
    return None


def _allowed_networks() -> list[Any]:
    """The networks of PGDRAIN_WEBHOOK_ALLOWED_NETWORKS (read on every call)."""
    import ipaddress

    networks = []
    for entry in read(ALLOWED_NETWORKS_ENV):
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            # A configuration error, not the job's: retried, so fixing the setting saves it.
            raise pgdrain.ConfigError(f"{ALLOWED_NETWORKS_ENV}: {entry[:60]!r} is not a network "
                                      "(e.g. 10.0.0.0/8 or fd00::/8)") from None
    return networks


def _parse_payload(payload: Any) -> tuple[str, str, str | None, Any, dict[str, str]]:
    """Validate the payload; Discard if invalid.

    Returns the url to request (without userinfo), its printable form, the Authorization its
    userinfo gives (or None), the body and the extra headers.
    """
    if not isinstance(payload, dict):
        _invalid("payload", f"must be a JSON object, got {type(payload).__name__}")
    unknown = sorted(str(k) for k in payload if k not in _PAYLOAD_FIELDS)
    if unknown:
        _invalid("payload", f"unknown field(s) {', '.join(map(repr, unknown))[:MAX_QUOTED_CHARS]} "
                            f"(expected {', '.join(_PAYLOAD_FIELDS)})")
    url, target, authorization = _check_url(payload.get("url"))
    body = payload.get("body", {})  # an explicit null is sent as null
    headers = payload.get("headers")
    if headers is None:
        headers = {}
    if not isinstance(headers, dict):
        _invalid("headers", f"must be an object of string values, got {type(headers).__name__}")
    for name, value in headers.items():
        if not isinstance(name, str) or not name or not set(name) <= _TOKEN_CHARS:
            _invalid("headers", f"{_quote(name)} is not a valid header name")
        if not isinstance(value, str):
            _invalid(f"headers.{name}", f"must be a string, got {type(value).__name__}")
        if any(c in value for c in "\r\n\x00"):
            _invalid(f"headers.{name}", "must not contain CR, LF or NUL")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            _invalid(f"headers.{name}", "must be Latin-1 text (encode other characters)")
        if name.lower() in _RESERVED_HEADERS:
            _invalid(f"headers.{name}", "is set by pgdrain and cannot be overridden")
    return url, target, authorization, body, headers


def _check_url(url: Any) -> tuple[str, str, str | None]:
    """Validate ``url``: (url without userinfo, ``scheme://host[:port]/path`` safe to print,
    the Basic Authorization its userinfo gives or None)."""
    from urllib.parse import unquote, urlsplit

    if url is None:
        _invalid("url", "is required")
    if not isinstance(url, str) or not url:
        _invalid("url", "must be a non-empty string")
    if any(c <= " " or c == "\x7f" for c in url):
        _invalid("url", "must not contain spaces or control characters (percent-encode them)")
    if not url.isascii():
        _invalid("url", "must be ASCII (percent-encode other characters, punycode the host)")
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError when out of range or not a number
    except ValueError:
        _invalid("url", "is not a valid URL (bad host or port)")
    if parts.scheme.lower() not in ("http", "https"):
        _invalid("url", f"must be http or https, got {_quote(parts.scheme or 'no scheme')}")
    if not parts.hostname:
        _invalid("url", "must have a host")
    userinfo, at, host = parts.netloc.rpartition("@")
    authorization = None
    if at:  # urllib would take user:password@host for the host name; send it as Basic auth
        import base64

        user, _, password = userinfo.partition(":")
        credentials = f"{unquote(user)}:{unquote(password)}".encode()
        authorization = f"Basic {base64.b64encode(credentials).decode('ascii')}"
        url = parts._replace(netloc=host).geturl()
    printable = host if port is not None else host.rstrip(":")
    return url, f"{parts.scheme.lower()}://{printable}{parts.path or '/'}", authorization


def _timeout_seconds() -> float:
    # A bad value is a configuration error, not the job's: retried, so fixing it saves the job.
    return float(read(TIMEOUT_ENV))


def _status_error(where: str, status: int, retry_after: str | None, location: str | None,
                  url: str) -> BaseException:
    """The exception for a non-2xx response (its status only: never the body)."""
    if status in (429, 503) and retry_after is not None:
        delay = _retry_after_seconds(retry_after)
        if delay is not None:
            return pgdrain.Snooze(delay, f"{where}: HTTP {status}, Retry-After {delay:g} s")
    if 300 <= status < 400:
        to = f" to {_redirect_target(url, location)}" if location else ""
        return pgdrain.Discard(f"{where}: HTTP {status} redirect{to}; redirects are not followed "
                               f"for a webhook POST, so the url is misconfigured: update it to "
                               f"the final address")
    if status >= 500 or status in (408, 429):
        return WebhookError(f"{where}: HTTP {status}", status)
    if 400 <= status < 500:
        return pgdrain.Discard(f"{where}: HTTP {status} (permanent, not retried)")
    return WebhookError(f"{where}: unexpected HTTP {status}", status)


def _retry_after_seconds(value: str) -> float | None:
    """``Retry-After`` as seconds in [1, 3600]: delta-seconds or an HTTP date; None if invalid."""
    value = value.strip()
    if value.isascii() and value.isdigit():
        seconds = float(value)
    else:
        from datetime import UTC, datetime
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    # At least a second: a server answering "Retry-After: 0" forever would otherwise spin the job
    # without ever using up an attempt.
    return min(max(seconds, MIN_SNOOZE_SECONDS), MAX_SNOOZE_SECONDS)


def _redirect_target(url: str, location: str) -> str:
    from urllib.parse import urljoin, urlsplit

    try:
        parts = urlsplit(urljoin(url, location.strip()))
        host = parts.netloc.rpartition("@")[2]
    except ValueError:
        return "an invalid Location"
    return f"{parts.scheme}://{host}{parts.path or '/'}"[:MAX_QUOTED_CHARS]


def _describe(reason: Any, timeout: float) -> str:
    """A connection error's description; it never includes the URL."""
    if isinstance(reason, TimeoutError) or "timed out" in str(reason):
        return f"timed out after {timeout:g} s"
    if isinstance(reason, BaseException):
        detail = str(reason) or "no detail"
        return f"{type(reason).__name__}: {detail}"[:MAX_QUOTED_CHARS]
    return f"connection failed: {reason}"[:MAX_QUOTED_CHARS]


def _invalid(field: str, message: str) -> NoReturn:
    raise pgdrain.Discard(f"deliver-webhook: invalid payload: {field}: {message}")


def _quote(value: Any) -> str:
    return repr(value)[:60]


# The well-known NAT64 prefix: the last 32 bits are an IPv4 address, reached through it.
NAT64_PREFIX = "64:ff9b::/96"
