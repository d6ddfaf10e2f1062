"""The console's WSGI application: every request checked by the guard, then routed to a page
(GET) or an action (POST, only with ``--allow-actions``)."""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined

from . import actions, pages, text
from .connections import Busy, Connections, Shared
from .guard import Guard
from .web import BadRequest, Request, Response

log = logging.getLogger("pgdrain.console")

_JOB = re.compile(r"/jobs/([0-9]{1,19})")
CHART_SECONDS = 30.0
"""How often the chart of the last hour is read at most."""


@dataclass(frozen=True)
class Settings:
    where: str
    """The database, as every CLI command names it (no password)."""
    allow_actions: bool = False
    refresh_seconds: float = 5.0
    """How often the overview is read at most (and how often its page reloads)."""
    max_drains: int = 0


class Notices:
    """What an action did, shown once on the page it sends the browser back to: kept here by a
    random id (the URL carries the id, never the text, so no link can make a page say
    something the console did not)."""

    def __init__(self, most: int = 200):
        self._most = most
        self._lock = threading.Lock()
        self._texts: OrderedDict[str, str] = OrderedDict()

    def add(self, message: str) -> str:
        from secrets import token_urlsafe

        key = token_urlsafe(9)
        with self._lock:
            self._texts[key] = message
            while len(self._texts) > self._most:
                self._texts.popitem(last=False)
        return key

    def take(self, key: str | None) -> str | None:
        if not key:
            return None
        with self._lock:
            return self._texts.pop(key, None)


class Console:
    def __init__(self, *, connections: Connections, guard: Guard, settings: Settings):
        self.connections = connections
        self.guard = guard
        self.settings = settings
        self.notices = Notices()
        self.templates = Environment(loader=PackageLoader("pgdrain_console"), autoescape=True,
                                     undefined=StrictUndefined, trim_blocks=True,
                                     lstrip_blocks=True)
        self.templates.filters.update(visible=text.visible, name=text.name,
                                      lines=text.visible_lines, pretty=text.pretty_json,
                                      age=text.age, when=text.when, count=text.count)
        self.overview = Shared(lambda: pages.read_overview(self), seconds=settings.refresh_seconds)
        # The chart's minutes change once a minute, and read the last hour's finished jobs.
        self.minutes = Shared(lambda: pages.read_minutes(self),
                              seconds=settings.refresh_seconds and max(
                                  settings.refresh_seconds, CHART_SECONDS))
        self.stylesheet = resources.files(__package__).joinpath(
            "static/console.css").read_bytes()

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            response = self.answer(Request.from_environ(environ))
        except BadRequest as exc:
            response = self.refusal("400 Bad Request", str(exc))
        except Busy as exc:
            response = self.refusal("503 Service Unavailable", str(exc))
        except Exception:
            log.exception("console: a request failed")
            response = self.refusal("500 Internal Server Error",
                                    "the console failed to answer; its terminal says why")
        return response.send(start_response)

    def answer(self, request: Request) -> Response:
        guard = self.guard
        if not guard.host_ok(request.headers.get("host")):
            return self.refusal("403 Forbidden", "this console answers only at the address it "
                                "printed")
        if request.method == "GET" and request.path == "/static/console.css":
            return Response("200 OK", self.stylesheet, "text/css; charset=utf-8")
        if request.method == "GET" and request.path == "/favicon.ico":  # a browser asks
            return Response("204 No Content", content_type="image/x-icon")
        if request.method == "GET" and "token" in request.query:
            if not guard.token_ok(request.query["token"]):
                return self.refusal("403 Forbidden", "that token is not the one this console "
                                    "printed: open the URL it printed when it started")
            rest = {k: v for k, v in request.query.items() if k != "token"}
            # One leading slash (`//host/x` would send the browser to another host), and the
            # path encoded again (a decoded CR LF would end the header).
            location = quote("/" + request.path.lstrip("/")) + (
                f"?{urlencode(rest)}" if rest else "")
            redirect = Response.redirect(location)
            redirect.headers.append(("Set-Cookie", guard.set_cookie()))
            return redirect
        if not guard.token_ok(guard.cookie_token(request.headers.get("cookie"))):
            return self.refusal("403 Forbidden", "open the URL the console printed when it "
                                "started (it carries the access token)")
        if request.method == "POST":
            if not guard.origin_ok(request.headers.get("origin")):
                return self.refusal("403 Forbidden", "a form from another site")
            if not guard.csrf_ok(request.form.get("csrf")):
                return self.refusal("403 Forbidden", "the form has no valid CSRF token: "
                                    "reload the page and try again")
            if not self.settings.allow_actions:
                return self.refusal("403 Forbidden", "this console is read-only: start it "
                                    "with --allow-actions to change the queue", signed_in=True)
            return self._post(request)
        if request.method != "GET":
            return self.refusal("405 Method Not Allowed", "only GET and POST are answered",
                                signed_in=True)
        return self._get(request)

    def _get(self, request: Request) -> Response:
        if request.path == "/":
            return pages.overview(self, request)
        if request.path == "/jobs":
            return pages.jobs(self, request)
        if request.path == "/schedules":
            return pages.schedules(self, request)
        match = _JOB.fullmatch(request.path)
        if match:
            return pages.job(self, request, int(match[1]))
        return self.refusal("404 Not Found", "there is no such page", signed_in=True)

    def _post(self, request: Request) -> Response:
        match = _JOB.fullmatch(request.path)
        if match:
            return actions.on_job(self, request, int(match[1]))
        if request.path == "/queues":
            return actions.on_queue(self, request)
        if request.path == "/bulk":
            return actions.bulk_confirm(self, request)
        if request.path == "/bulk/run":
            return actions.bulk_run(self, request)
        return self.refusal("404 Not Found", "there is no such action", signed_in=True)

    def render(self, template: str, status: str = "200 OK", **context: Any) -> Response:
        values = {"where": self.settings.where, "allow_actions": self.settings.allow_actions,
                  "csrf": self.guard.csrf, "notice": None, **context}
        page = self.templates.get_template(template).render(**values)
        return Response(status, page.encode("utf-8"))

    def refusal(self, status: str, message: str, *, signed_in: bool = False) -> Response:
        """An error page; to a request without the token, it says nothing of the database
        (nor holds the CSRF token)."""
        extra = {} if signed_in else {"where": None, "csrf": "", "allow_actions": False}
        return self.render("refusal.html", status, title=status.split(" ", 1)[1],
                           message=message, **extra)

    def back(self, location: str, message: str) -> Response:
        """Send the browser to ``location`` (one of the console's own paths), where
        ``message`` is shown once, and the overview as the action left the queue."""
        self.overview.forget()
        key = self.notices.add(message)
        joiner = "&" if "?" in location else "?"
        return Response.redirect(f"{location}{joiner}notice={key}")
