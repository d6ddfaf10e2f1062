"""The console's pages (GET): each reads through the library's bounded reads and renders a
template. A database that does not answer is a page that says so (503), not a crash."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pgdrain import browse, scheduler, store
from pgdrain.cli import describe_failure
from pgdrain.errors import InvalidJobId, PgdrainError, QueryFailed

from . import filters, text
from .chart import chart
from .web import Request, Response

if TYPE_CHECKING:
    from .app import Console

PAGE_SIZE = 50
FAILURES_SHOWN = 10


def describe(exc: BaseException) -> str:
    """A failure in one line, as the CLI says it: the server's message and SQLSTATE, or the
    error's own words; never a connection string or password."""
    if isinstance(exc, QueryFailed):
        return f"the database refused it: {exc}"
    if isinstance(exc, PgdrainError):
        return str(exc)
    return describe_failure(exc)


def unavailable(console: Console, exc: Exception) -> Response:
    return console.refusal("503 Service Unavailable", f"the database did not answer: "
                           f"{describe(exc)}", signed_in=True)


def read_overview(console: Console) -> dict[str, Any]:
    """The overview's queues, failures and drains, read once for every tab
    (``Console.overview``)."""
    with console.connections.connection() as conn:
        return {"queues": browse.board(conn),
                "failures": browse.recent_failures(conn, limit=FAILURES_SHOWN),
                "slots": store.drain_slots_held(conn), "read_at": datetime.now(UTC)}


def read_minutes(console: Console) -> list[dict[str, Any]]:
    """The chart's minutes (``Console.minutes``)."""
    with console.connections.connection() as conn:
        return browse.minutes(conn)


def overview(console: Console, request: Request) -> Response:
    try:
        view, age = console.overview.get()
        minutes, _ = console.minutes.get()
    except Exception as exc:
        return unavailable(console, exc)
    failed = console.overview.error or console.minutes.error
    return console.render("overview.html", view=view, age=age, cap=browse.BOARD_CAP,
                          chart=chart(minutes, datetime.now(UTC)),
                          refresh=console.settings.refresh_seconds,
                          max_drains=console.settings.max_drains,
                          stale=None if failed is None else describe(failed),
                          notice=console.notices.take(request.query.get("notice")))


def jobs(console: Console, request: Request) -> Response:
    chosen = filters.read(request.query)
    before, problem = filters.page_start(request.query)
    problems = [*chosen.problems, *([problem] if problem else [])]
    page = None
    if not problems:
        try:
            with console.connections.connection() as conn:
                page = browse.job_page(conn, chosen.match, before=before, limit=PAGE_SIZE)
        except Exception as exc:
            return unavailable(console, exc)
    return console.render("jobs.html", "400 Bad Request" if problems else "200 OK",
                          chosen=chosen, page=page, problems=problems, before=before,
                          statuses=filters.STATUSES, waiting_for=filters.WAITING_FOR,
                          notice=console.notices.take(request.query.get("notice")),
                          now=datetime.now(UTC))


def job(console: Console, request: Request, ident: int) -> Response:
    try:
        with console.connections.connection() as conn:
            found = store.get_job(conn, ident)
    except InvalidJobId as exc:  # 19 digits past the largest id a job can have
        return console.refusal("404 Not Found", str(exc), signed_in=True)
    except Exception as exc:
        return unavailable(console, exc)
    if found is None:
        return console.refusal("404 Not Found", f"there is no job {ident} (deleted, purged "
                               "after it finished, or never enqueued)", signed_in=True)
    return console.render("job.html", job=found, attempts=text.attempts(found.get("errors")),
                          now=datetime.now(UTC),
                          notice=console.notices.take(request.query.get("notice")))


def schedules(console: Console, request: Request) -> Response:
    try:
        with console.connections.connection() as conn:
            entries = scheduler.schedule_view(conn)
    except Exception as exc:
        return unavailable(console, exc)
    return console.render("schedules.html", entries=entries, now=datetime.now(UTC))
