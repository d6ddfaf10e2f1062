"""Who may use the console, decided without I/O.

The console prints its URL with a random token, as Jupyter does. The first request that brings
the token in the URL gets it back as a cookie (HttpOnly, SameSite=Strict, named after the port:
cookies ignore ports) and is sent on to the same page without it, so the token leaves the
address bar and the history. Every later request must bring the cookie; anything else is
refused. Every state-changing request is a POST that must also carry the CSRF token, a value
derived from the access token that only the console's own forms hold: another page on this
machine (same site, since sites ignore ports) cannot forge one. The Host header must name the
address the console listens on (a DNS-rebinding page names its own), and an Origin, when the
browser sends one, must be the console's.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlsplit


def new_token() -> str:
    """256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


@dataclass(frozen=True)
class Guard:
    token: str
    host: str
    """The address the console listens on (127.0.0.1 unless told otherwise)."""
    port: int

    @property
    def cookie_name(self) -> str:
        return f"pgdrain_console_{self.port}"

    @property
    def csrf(self) -> str:
        return hmac.new(self.token.encode(), b"pgdrain console csrf", hashlib.sha256).hexdigest()

    def url(self, path: str = "/") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"

    def token_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(),
                                                             self.token.encode())

    def csrf_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(),
                                                             self.csrf.encode())

    def cookie_token(self, header: str | None) -> str | None:
        if not header:
            return None
        try:
            jar = SimpleCookie(header)
        except CookieError:
            return None
        morsel = jar.get(self.cookie_name)
        return None if morsel is None else morsel.value

    def set_cookie(self) -> str:
        return f"{self.cookie_name}={self.token}; HttpOnly; SameSite=Strict; Path=/"

    def host_ok(self, header: str | None) -> bool:
        """Whether a request's Host names this console: its address or, on loopback,
        ``localhost``, with its port. Any name when it listens on every address (0.0.0.0)."""
        if not header:
            return False
        parts = urlsplit(f"//{header}")
        try:
            port = parts.port
        except ValueError:
            return False
        if port != self.port:
            return False
        name = (parts.hostname or "").lower()
        if self.host in ("0.0.0.0", "::"):
            return True
        if loopback(self.host):
            return name == "localhost" or (loopback(name) and name != "localhost"
                                           and _same_address(name, self.host))
        return name == self.host.lower()

    def origin_ok(self, header: str | None) -> bool:
        """No Origin (a browser may leave it out of a same-origin request) or this console's."""
        if header is None:
            return True
        parts = urlsplit(header)
        return parts.scheme == "http" and self.host_ok(parts.netloc)


def _same_address(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a.strip("[]")) == ipaddress.ip_address(b.strip("[]"))
    except ValueError:
        return False
