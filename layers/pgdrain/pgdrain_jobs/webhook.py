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

``PGDRAIN_WEBHOOK_TIMEOUT_SECONDS`` (default 10, read on every call) bounds each network operation
(connect, send, each read); keep it well under the handler's 30 s budget, which bounds the whole
delivery. Error messages name the target as ``scheme://host/path`` only, never its userinfo or
query string, which may carry credentials; a secret kept in the path itself (as some chat
webhooks do) is not hidden. At most 64 KiB of a response is read and 200 characters of it quoted.

This module is imported by the enqueue function just to learn the job types, so the HTTP
machinery (``urllib.request``, about 50 ms) is imported inside the handler, not here.
"""

from __future__ import annotations

import math
import os
from typing import Any, NoReturn

import pgdrain
from pgdrain.settings import DEFAULT_WEBHOOK_TIMEOUT_SECONDS

JOB_TYPE = "deliver-webhook"
HANDLER_TIMEOUT_SECONDS = 30
TIMEOUT_ENV = "PGDRAIN_WEBHOOK_TIMEOUT_SECONDS"
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
    import urllib.error
    import urllib.request
    from contextlib import suppress
    from http.client import HTTPException

    url, target, authorization, body, extra_headers = _parse_payload(job.payload)
    try:
        data = json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise pgdrain.Discard(f"deliver-webhook: body: must be JSON-serialisable ({exc})") from None
    timeout = _timeout_seconds()

    request = urllib.request.Request(url, data=data, method="POST")
    for name, value in extra_headers.items():
        request.add_header(name, value)
    if authorization and not request.has_header("Authorization"):
        request.add_header("Authorization", authorization)
    request.add_header("Content-Type", "application/json")
    request.add_header("Idempotency-Key", job.idempotency_key)
    if not request.has_header("User-agent"):  # add_header stores names str.capitalize()d
        request.add_header("User-Agent", USER_AGENT)

    opener = urllib.request.build_opener(_no_redirects_handler(urllib.request))
    opener.addheaders = []  # no default "Python-urllib" User-Agent
    where = f"POST {target}"
    try:
        with opener.open(request, timeout=timeout) as response:
            # Delivered: a body that fails to arrive no longer matters. Read a bounded amount;
            # the connection is closed afterwards anyway.
            with suppress(OSError, HTTPException):
                response.read(MAX_RESPONSE_BYTES)
            return
    except urllib.error.HTTPError as exc:
        try:
            status = exc.code
            retry_after = exc.headers.get("Retry-After") if exc.headers else None
            location = exc.headers.get("Location") if exc.headers else None
            excerpt = _excerpt(exc)
        finally:
            with suppress(Exception):
                exc.close()
        raise _status_error(where, status, excerpt, retry_after, location, url) from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise WebhookError(f"{where}: {_describe(reason, timeout)}") from None
    except (OSError, HTTPException) as exc:  # a timeout or reset after the request was sent
        raise WebhookError(f"{where}: {_describe(exc, timeout)}") from None


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
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        # A configuration error, not the job's: retried, so fixing the setting saves the job.
        raise pgdrain.ConfigError(f"{TIMEOUT_ENV} must be a positive number of seconds, "
                                  f"got {raw[:50]!r}")
    return value


def _status_error(where: str, status: int, excerpt: str, retry_after: str | None,
                  location: str | None, url: str) -> BaseException:
    """The exception for a non-2xx response."""
    said = f": {excerpt}" if excerpt else ""
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
        return WebhookError(f"{where}: HTTP {status}{said}", status)
    if 400 <= status < 500:
        return pgdrain.Discard(f"{where}: HTTP {status} (permanent, not retried){said}")
    return WebhookError(f"{where}: unexpected HTTP {status}{said}", status)


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


def _excerpt(response: Any) -> str:
    """The first characters of a response body, on one line; '' if unreadable."""
    try:
        raw = response.read(MAX_RESPONSE_BYTES)
    except Exception:  # a reset or timeout while reading an error body: the status says enough
        return ""
    text = (raw or b"").decode("utf-8", errors="replace")
    return " ".join(text.split())[:MAX_QUOTED_CHARS]


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


def _no_redirects_handler(request_module: Any) -> Any:
    """A redirect handler that follows nothing: a 3xx surfaces as an HTTPError.

    urllib would otherwise turn a 301/302/303 answer to a POST into a GET of the new address,
    silently dropping the body.
    """

    class NoRedirects(request_module.HTTPRedirectHandler):
        def redirect_request(self, req, fp, code, msg, headers, newurl):
            return None

    return NoRedirects()
