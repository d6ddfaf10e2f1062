"""Requests and responses of the console's WSGI application, without a framework: what a
request carries (bounded: a form is at most ``MAX_FORM`` bytes) and the headers every
response gets (a strict Content-Security-Policy: no script, no inline style, nothing from
elsewhere; no caching, no referrer, no framing)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

MAX_FORM = 64 * 1024

SECURITY_HEADERS = (
    ("Content-Security-Policy",
     "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
     "frame-ancestors 'none'; base-uri 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    # same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` with the
    # console's own forms, which the guard must refuse as it refuses another site's.
    ("Referrer-Policy", "same-origin"),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
)


class BadRequest(Exception):
    """The request is malformed (its message says how); answered 400."""


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: Mapping[str, str]
    form: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_environ(cls, environ: Mapping[str, Any]) -> Request:
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        # PEP 3333 hands the path over as latin-1 text of the raw bytes: back to UTF-8.
        raw_path = str(environ.get("PATH_INFO", "/"))
        try:
            path = raw_path.encode("latin-1").decode("utf-8")
        except UnicodeError:
            raise BadRequest("the path is not UTF-8") from None
        headers = {key[5:].replace("_", "-").lower(): str(value)
                   for key, value in environ.items() if key.startswith("HTTP_")}
        request = cls(method, path, _fields(str(environ.get("QUERY_STRING", ""))), headers)
        if method == "POST":
            request.form = _read_form(environ)
        return request


def _fields(text: str) -> dict[str, str]:
    try:
        parsed = parse_qs(text, keep_blank_values=True, strict_parsing=False,
                          encoding="utf-8", errors="strict", max_num_fields=100)
    except (UnicodeError, ValueError) as exc:
        raise BadRequest(f"the query or form is malformed: {exc}") from None
    return {name: values[-1] for name, values in parsed.items()}


def _read_form(environ: Mapping[str, Any]) -> dict[str, str]:
    kind = str(environ.get("CONTENT_TYPE", "")).split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise BadRequest("a form is sent as application/x-www-form-urlencoded")
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise BadRequest("Content-Length is not a number") from None
    if not 0 <= length <= MAX_FORM:
        raise BadRequest(f"a form is at most {MAX_FORM} bytes")
    body = environ["wsgi.input"].read(length) if length else b""
    try:
        return _fields(body.decode("ascii"))
    except UnicodeError:
        raise BadRequest("a urlencoded form is ASCII") from None


@dataclass
class Response:
    status: str
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def redirect(cls, location: str) -> Response:
        return cls("303 See Other", headers=[("Location", location)])

    def send(self, start_response: Callable[..., Any]) -> Iterable[bytes]:
        headers = [("Content-Type", self.content_type),
                   ("Content-Length", str(len(self.body))), *SECURITY_HEADERS, *self.headers]
        start_response(self.status, headers)
        return [self.body]
