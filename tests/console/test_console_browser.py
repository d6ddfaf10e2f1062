"""The console in a real browser: headless Chromium (Selenium) against a real PostgreSQL, doing
what an operator does (opening the printed URL, filling the filter form, clicking the buttons)
and checking what they would see, and what each action changed in the database, against what
the ``pgdrain`` command changes for the same request.

One Chromium serves the module; each test gets its own database and console and leaves the
browser with no cookie. With ``PGDRAIN_SCREENSHOTS=DIR`` (``make console-screenshots``), the
pages of a realistic queue are saved there as PNGs.
"""

from __future__ import annotations

import contextlib
import http.server
import itertools
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from pgdrain import cli
from pgdrain.cron import parse as parse_cron
from pgdrain.store import DRAIN_SLOT_LOCK_KEY
from tests.console.conftest import Running
from tests.support import browser

try:
    from selenium.common.exceptions import NoAlertPresentException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webelement import WebElement
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # a failure that says what to do, not a skip
    pytest.fail("the browser tests need Selenium: .venv/bin/pip install -r requirements-dev.txt "
                "(or make test)", pytrace=False)

SCREENSHOTS = os.environ.get("PGDRAIN_SCREENSHOTS")
QUIET = 3600.0
"""The overview's refresh in these tests: its page does not reload itself under a click."""


# --- the browser ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with browser.chromium() as driver:
        yield driver


@pytest.fixture
def web(chromium: Any) -> Iterator[Web]:
    """The module's browser, signed in nowhere; afterwards without cookies, on a blank page."""
    chromium.execute_cdp_cmd("Network.clearBrowserCookies", {})
    yield Web(chromium)
    with contextlib.suppress(NoAlertPresentException):
        chromium.switch_to.alert.dismiss()
    chromium.execute_cdp_cmd("Network.clearBrowserCookies", {})
    chromium.get("about:blank")
    chromium.get_log("browser")


class Web:
    """What a user does in the browser on one console: open, click, type, read."""

    def __init__(self, driver: Any):
        self.driver = driver
        self._console: Running | None = None

    @property
    def console(self) -> Running:
        assert self._console is not None, "sign_in first"
        return self._console

    def sign_in(self, console: Running, path: str = "/") -> Web:
        """Open the URL the console printed (for ``path``): the token becomes a cookie and
        leaves the address bar."""
        self._console = console
        self.driver.get(console.start_url(path))
        assert self.driver.current_url == console.url + path
        assert console.token not in self.driver.page_source
        return self

    def open(self, path: str) -> None:
        self.driver.get(self.console.url + path)

    def find(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def button(self, within: str, label: str) -> WebElement:
        """The button labelled ``label`` inside the element ``within`` (a CSS selector)."""
        [found] = [b for b in self.all(f"{within} button") if b.text == label]
        return found

    def click(self, element: WebElement) -> None:
        """Click a link or a form's button and wait for the page it leads to."""
        page = self.find("html")
        element.click()

        def left(_: Any) -> bool:
            # The old page's node is gone: stale, or (mid-navigation) a node ChromeDriver
            # can no longer find in any document.
            try:
                page.is_enabled()
            except WebDriverException:
                return True
            return False

        wait = WebDriverWait(self.driver, browser.WAIT_SECONDS)
        wait.until(left)
        wait.until(expected_conditions.presence_of_element_located((By.TAG_NAME, "main")))
        refusal = self.all("p#refusal")
        assert not refusal, f"the console answered {self.driver.title!r}: {refusal[0].text}"

    def fill(self, form: str | WebElement, **fields: str) -> None:
        """Type into (or choose in) the fields of ``form`` (a CSS selector or the form) by
        name; "" empties a field."""
        for name, value in fields.items():
            field = (self.find(f"{form} [name={name}]") if isinstance(form, str)
                     else form.find_element(By.NAME, name))
            if field.tag_name == "select":
                Select(field).select_by_value(value)
            else:
                field.clear()
                if value:
                    field.send_keys(value)

    def submit(self, form: str, **fields: str) -> None:
        """Fill ``form`` and press its submit button."""
        self.fill(form, **fields)
        self.click(self.find(f"{form} button[type=submit]"))

    @property
    def heading(self) -> str:
        return self.find("h1").text

    @property
    def notice(self) -> str:
        return self.find("p#notice").text

    @property
    def text(self) -> str:
        return self.find("body").text

    @property
    def path(self) -> str:
        url = self.driver.current_url
        assert url.startswith(self.console.url), url
        return url[len(self.console.url):]

    def rows(self, table: str) -> list[list[str]]:
        """The cells' text of each row of the table with that id."""
        return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
                for row in self.all(f"table#{table} tbody tr")]

    def row(self, table: str, first_cell: str) -> WebElement:
        """The row of the table whose first cell reads ``first_cell``."""
        [found] = [r for r in self.all(f"table#{table} tbody tr")
                   if r.find_element(By.TAG_NAME, "td").text == first_cell]
        return found

    def job_ids(self) -> list[int]:
        """The ids of the jobs listed, in the page's order."""
        return [int(cell.text) for cell in self.all("table#jobs tbody td:first-child")]

    def refused(self) -> bool:
        """Whether this is the console's 403 page."""
        return self.driver.title.startswith("Forbidden") and self.heading == "Forbidden"


# --- the database -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sql:
    """An SQL expression as a column's value (``Sql("now()")``), with its parameters."""

    text: str
    params: dict[str, Any] = field(default_factory=dict)


def seconds_from_now(seconds: float) -> Sql:
    return Sql(f"now() + make_interval(secs => {float(seconds)})")


def ago(seconds: float) -> Sql:
    return seconds_from_now(-seconds)


JSON_COLUMNS = {"payload", "errors", "result", "progress", "state", "wait_result"}


def add_job(sql: Callable[..., list[dict[str, Any]]], job_type: str = "send-email",
            **columns: Any) -> int:
    """Insert a job as the queue would hold it; returns its id."""
    columns = {"job_type": job_type, **columns}
    params, values = {}, []
    for name, value in columns.items():
        if isinstance(value, Sql):
            values.append(value.text)
            params.update(value.params)
        else:
            params[name] = json.dumps(value) if name in JSON_COLUMNS else value
            values.append(f":{name}::jsonb" if name in JSON_COLUMNS else f":{name}")
    [row] = sql(f"INSERT INTO jobs ({', '.join(columns)}) VALUES ({', '.join(values)}) "
                "RETURNING id", **params)
    return int(row["id"])


def failed_job(sql: Callable[..., list[dict[str, Any]]], job_type: str = "deliver-webhook",
               *, errors: Iterable[str] = ("ConnectionError: timed out",),
               finished: float = 60.0, **columns: Any) -> int:
    """A job that failed each of its attempts with ``errors``, 30 s apart, the last one
    ``finished`` seconds ago, recorded as a drain records them."""
    errors = list(errors)
    last = len(errors)
    history = ", ".join(
        f"jsonb_build_object('attempt', {n}, 'at', now() - make_interval(secs => "
        f"{finished + 30 * (last - n)}), 'error', :error_{n}::text)" for n in range(1, last + 1))
    return add_job(sql, job_type, **{
        "status": "failed", "attempts": last, "max_attempts": last,
        "errors": Sql(f"jsonb_build_array({history})",
                      {f"error_{n}": e for n, e in enumerate(errors, 1)}),
        "last_error": errors[-1], "created_at": ago(finished + 30 * last),
        "run_at": ago(finished + 1), "started_at": ago(finished + 1),
        "finished_at": ago(finished), "updated_at": ago(finished), **columns})


def attempts_at(sql: Callable[..., list[dict[str, Any]]], ident: int) -> list[str]:
    """When each attempt of a job failed, as its error history says, in UTC to the second."""
    return [datetime.fromisoformat(r["at"]).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
            for r in sql("SELECT e->>'at' AS at FROM jobs, "
                         "jsonb_array_elements(errors) AS e WHERE id = :id", id=ident)]


def job_row(sql: Callable[..., list[dict[str, Any]]], ident: int) -> dict[str, Any] | None:
    rows = sql("SELECT *, run_at <= now() AS due FROM jobs WHERE id = :id", id=ident)
    return rows[0] if rows else None


def shape(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A job's row as two jobs acted on alike compare: every column but its id, each time (and
    each attempt's time) only set or not, and ``due``: whether it may run now."""
    if row is None:
        return None
    shaped = {k: (v is not None) if isinstance(v, datetime) else v
              for k, v in row.items() if k != "id"}
    shaped["errors"] = [{**e, "at": bool(e["at"])} for e in row["errors"]]
    return shaped


def queue_row(sql: Callable[..., list[dict[str, Any]]], queue: str) -> dict[str, Any] | None:
    rows = sql("SELECT paused_at IS NOT NULL AS paused, max_running, rate_limit, rate_period "
               "FROM pgdrain_queues WHERE queue = :queue", queue=queue)
    return rows[0] if rows else None


@pytest.fixture
def pgdrain_command(database_url: str, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str]) -> Callable[..., str]:
    """Run ``pgdrain ARGS`` on this test's database, as an operator would; returns stdout."""
    monkeypatch.setenv("DATABASE_URL", database_url)

    def run(*args: str) -> str:
        code = cli.main(list(args))
        out = capsys.readouterr()
        assert code == 0, out.err
        return out.out

    return run


# --- what every page must hold --------------------------------------------------------------

HOSTILE = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "javascript:alert(1)",
    "invoice\u202egpj.exe",
    "bell\x07 esc\x1b[31m red",
)
ESCAPES = {"\u202e": "\\u202e", "\x1b": "\\x1b", "\x07": "\\x07"}
"""Each invisible character of HOSTILE, and how the console shows it (as the CLI does)."""
INVISIBLE = tuple(ESCAPES)


def shown(text: str) -> str:
    """``text`` as the console shows it: a bidi override or a control character as its
    escape, as the CLI prints it."""
    for char, escape in ESCAPES.items():
        text = text.replace(char, escape)
    return text


def shown_in_json(text: str) -> str:
    """``text`` as a string inside the pretty-printed JSON of a payload."""
    return json.dumps(text, ensure_ascii=False)[1:-1].replace("\u202e", "\\u202e")


def assert_inert(web: Web, texts: Iterable[str] = ()) -> None:
    """No script ran or was even attempted, no element came from a value, every link stays in
    the console, and ``texts`` are on the page as text."""
    driver = web.driver
    with pytest.raises(NoAlertPresentException):
        _ = driver.switch_to.alert
    injected = web.all("script, img, iframe, object, embed, [onerror], [onload]")
    assert injected == [], [e.get_attribute("outerHTML") for e in injected]
    links = [a.get_dom_attribute("href") or "" for a in web.all("a")]
    assert links and all(h.startswith("/") and not h.startswith("//") for h in links), links
    assert not [a for a in web.all("a") if (a.get_attribute("href") or "").startswith(
        "javascript:")]
    targets = [f.get_dom_attribute("action") or "" for f in web.all("form")]
    assert all(t.startswith("/") and not t.startswith("//") for t in targets), targets
    text = web.text
    for char in INVISIBLE:
        assert char not in text, f"{char!r} reached the page as itself"
    for expected in texts:
        assert expected in text
    refused = [e["message"] for e in driver.get_log("browser") if e.get("source") == "security"]
    assert refused == [], refused


# --- pages ------------------------------------------------------------------------------------


def test_every_page_renders_what_the_queue_holds(web, start_console, sql):
    due = add_job(sql, "send-email", queue="emails", payload={"to": "ana@example.com"},
                  run_at=ago(300))
    later = add_job(sql, "send-email", queue="emails", run_at=seconds_from_now(3600))
    running = add_job(sql, "export-csv", queue="exports", status="running", attempts=1,
                      claimed_at=ago(5), started_at=ago(5),
                      lease_expires_at=seconds_from_now(300))
    payload = {"url": "https://hooks.example.com/orders", "event": "order.paid",
               "body": {"order": 48213, "lines": [1, 2]}}
    errors = ["Traceback (most recent call last):\n  File \"hooks.py\", line 12, in deliver\n"
              "ConnectionError: timed out", "HTTPError: 502 Bad Gateway", "HTTPError: 503"]
    failed = failed_job(sql, queue="webhooks", payload=payload, errors=errors,
                        tenant="acme", ordering_key="order-48213")
    done = [add_job(sql, "send-email", queue="emails", status="done", attempts=1,
                    finished_at=ago(60 * minutes_ago))
            for minutes_ago in (3, 3, 10, 25)]
    sql("INSERT INTO pgdrain_schedule_declarations (name, cron, tz, job_type, queue) "
        "VALUES ('nightly-report', '0 6 * * *', 'Europe/Paris', 'build-report', 'reports')")
    sql("INSERT INTO pgdrain_schedules (name, last_tick, last_job_id) "
        "VALUES ('nightly-report', now(), :job)", job=due)
    web.sign_in(start_console(refresh_seconds=QUIET))

    assert web.heading == "Overview"
    assert "read-only" in web.find("header").text
    queues = {r[0]: r[1:] for r in web.rows("queues")}
    assert list(queues) == ["emails", "exports", "webhooks"]
    # Queue, then: State, Due, Scheduled, Running, Waiting, Failed, Oldest due
    assert queues["emails"][0] == "runs"
    assert queues["emails"][1:6] == ["1", "1", "0", "0", "0"]
    assert queues["emails"][6].startswith("5m")
    assert queues["exports"][3] == "1"
    assert queues["webhooks"][5] == "1"
    bars = web.all("svg#chart g")
    assert len(bars) == 60
    heights = [float(r.get_attribute("height")) for r in web.all("svg#chart rect.done")]
    assert len([h for h in heights if h > 0]) == 3  # three minutes had jobs done
    assert "4 done, 1 failed" in web.text
    assert web.rows("failures")[0][:3] == [str(failed), "deliver-webhook", "webhooks"]
    assert web.rows("failures")[0][4] == "HTTPError: 503"
    assert web.all("form") == []  # read-only: no action anywhere

    web.click(web.find("nav a[href='/jobs']"))
    assert web.path == "/jobs"
    assert web.job_ids() == sorted([due, later, running, failed, *done], reverse=True)
    assert web.all("#bulk") == []

    web.click(web.find(f"table#jobs a[href='/jobs/{failed}']"))
    assert web.path == f"/jobs/{failed}"
    assert web.heading == f"Job {failed} failed"
    assert web.find("#payload pre").text == json.dumps(payload, indent=2, sort_keys=True)
    attempts = web.all("#errors article.attempt")
    headings = [a.find_element(By.TAG_NAME, "h3").text for a in attempts]
    expected = [f"Attempt {n} · {at} UTC (" for n, at in enumerate(attempts_at(sql, failed), 1)]
    assert len(headings) == len(expected) and all(
        h.startswith(e) for h, e in zip(headings, expected, strict=True)), (headings, expected)
    assert [a.find_element(By.TAG_NAME, "pre").text for a in attempts] == errors
    fields = web.find("#fields").text
    assert "Tenant\nacme" in fields and "Ordering key\norder-48213" in fields
    assert "Attempts\n3 of 3" in fields
    assert web.all("#job-actions") == []

    web.click(web.find("nav a[href='/schedules']"))
    [entry] = web.rows("schedules")
    assert entry[:6] == ["nightly-report", "declared", "0 6 * * *", "Europe/Paris",
                         "build-report", "reports"]
    assert "(in " in entry[6]  # the next run, ahead
    assert entry[8] == str(due)


def test_the_filter_form_selects_the_jobs_listed(web, console, sql):
    emails = [add_job(sql, "send-email", queue="emails", tenant="acme",
                      payload={"to": "ana@example.com"}),
              add_job(sql, "send-email", queue="emails", tenant="globex",
                      payload={"to": "bo@example.org"}, ordering_key="user-7")]
    failed_mail = failed_job(sql, "send-email", queue="emails", tenant="acme")
    failed_hooks = [failed_job(sql, queue="webhooks", dedupe_key=f"order-{n}") for n in (1, 2)]
    old_export = add_job(sql, "export-csv", queue="exports",
                         created_at=ago(7200), run_at=ago(7200))
    waiting = add_job(sql, "charge-card", queue="payments", status="waiting",
                      wait_signal="payment-received", run_at=seconds_from_now(3600))
    web.sign_in(console, "/jobs")
    everything = sorted([*emails, failed_mail, *failed_hooks, old_export, waiting], reverse=True)
    assert web.job_ids() == everything

    def listed(**fields: str) -> list[int]:
        web.open("/jobs")
        web.submit("form#filters", **fields)
        for name, value in fields.items():  # the form shows the filter again
            assert web.find(f"form#filters [name={name}]").get_attribute("value") == value
        return web.job_ids()

    assert listed(status="failed") == sorted([failed_mail, *failed_hooks], reverse=True)
    assert listed(status="failed", queue="emails") == [failed_mail]
    assert listed(type="export-csv") == [old_export]
    assert listed(tenant="acme") == sorted([emails[0], failed_mail], reverse=True)
    assert listed(ordering_key="user-7") == [emails[1]]
    assert listed(dedupe_key="order-2") == [failed_hooks[1]]
    assert listed(q="EXAMPLE.ORG") == [emails[1]]
    assert listed(older_than="1h") == [old_export]
    assert listed(newer_than="1h", queue="exports") == []
    assert web.find("#empty").text == "No job matches."
    assert listed(waiting_for="signal") == [waiting]
    assert listed(waiting_for="parents") == []

    web.open("/jobs")
    web.submit("form#filters", older_than="soon")
    assert web.all("table#jobs") == []
    assert "older than" in web.find("#problems").text

    web.click(web.find("form#filters a[href='/jobs']"))  # Clear
    assert web.path == "/jobs"
    assert web.job_ids() == everything


def test_older_pages_follow_without_overlap(web, console, sql):
    ids = [r["id"] for r in sql("INSERT INTO jobs (job_type, queue, payload) "
                                "SELECT 'resize-image', 'images', jsonb_build_object('n', n) "
                                "FROM generate_series(1, 120) AS n RETURNING id")]
    newest_first = sorted(ids, reverse=True)
    web.sign_in(console, "/jobs")
    assert web.all("#newest") == []
    first = web.job_ids()
    assert first == newest_first[:50]

    web.click(web.find("a#older"))
    second = web.job_ids()
    assert second == newest_first[50:100]
    web.click(web.find("a#older"))
    third = web.job_ids()
    assert third == newest_first[100:]
    assert web.all("a#older") == []
    assert sorted(first + second + third, reverse=True) == newest_first  # each once

    web.click(web.find("a#newest"))
    assert web.job_ids() == first


# --- actions ------------------------------------------------------------------------------------


def act_on_job(web: Web, ident: int, label: str) -> None:
    web.open(f"/jobs/{ident}")
    web.click(web.button("#job-actions", label))


def test_each_job_button_changes_the_job_as_the_command_does(web, start_console, sql,
                                                             pgdrain_command):
    def twins(**columns: Any) -> tuple[int, int]:
        return add_job(sql, **columns), add_job(sql, **columns)

    retried = (failed_job(sql, queue="webhooks"), failed_job(sql, queue="webhooks"))
    cancelled = twins(queue="emails", run_at=seconds_from_now(600))
    hurried = twins(queue="emails", run_at=seconds_from_now(86_400))
    deleted = twins(queue="emails", status="failed", last_error="gone", attempts=3,
                    finished_at=ago(60))
    web.sign_in(start_console(allow_actions=True, refresh_seconds=QUIET), "/jobs")
    assert "actions allowed" in web.find("header").text

    act_on_job(web, retried[0], "Retry")
    assert web.path.startswith(f"/jobs/{retried[0]}?notice=")
    assert web.notice == f"job {retried[0]}: Retry: 1 requeued"
    assert web.find("h1 .status").text == "pending"
    pgdrain_command("requeue", "--id", str(retried[1]))
    assert job_row(sql, retried[0])["status"] == "pending"

    act_on_job(web, cancelled[0], "Cancel")
    assert web.notice == f"job {cancelled[0]}: Cancel: 1 cancelled"
    assert web.find("h1 .status").text == "cancelled"
    pgdrain_command("cancel", str(cancelled[1]))
    assert job_row(sql, cancelled[0])["status"] == "cancelled"

    act_on_job(web, hurried[0], "Run now")
    assert web.notice == f"job {hurried[0]}: Run now: 1 due now"
    pgdrain_command("run-now", str(hurried[1]))
    assert job_row(sql, hurried[0])["due"] is True

    act_on_job(web, deleted[0], "Delete")
    assert web.path.startswith("/jobs?notice=")
    assert web.notice == f"job {deleted[0]}: Delete: 1 deleted"
    assert deleted[0] not in web.job_ids()
    pgdrain_command("delete", str(deleted[1]), "--yes")
    assert job_row(sql, deleted[0]) is None

    for by_console, by_command in (retried, cancelled, hurried, deleted):
        assert shape(job_row(sql, by_console)) == shape(job_row(sql, by_command))


def test_a_job_offers_the_buttons_its_status_allows(web, acting_console, sql):
    jobs = {
        "pending": add_job(sql),
        "running": add_job(sql, status="running", attempts=1, claimed_at=seconds_from_now(0),
                           lease_expires_at=seconds_from_now(300)),
        "failed": failed_job(sql),
        "done": add_job(sql, status="done", attempts=1, finished_at=ago(1)),
    }
    web.sign_in(acting_console)
    offered = {}
    for status, ident in jobs.items():
        web.open(f"/jobs/{ident}")
        offered[status] = [b.text for b in web.all("#job-actions button")]
    assert offered == {"pending": ["Run now", "Cancel", "Delete"], "running": ["Cancel"],
                       "failed": ["Retry", "Delete"], "done": ["Delete"]}


def queue_form(web: Web, queue: str, which: str = "form") -> WebElement:
    return web.row("queues", queue).find_element(By.CSS_SELECTOR, f"td.actions {which}")


def set_limits(web: Web, queue: str, **fields: str) -> None:
    form = queue_form(web, queue, "form.limits")
    web.fill(form, **fields)
    web.click(form.find_element(By.TAG_NAME, "button"))


def test_pause_resume_and_limits_change_the_queue_as_the_command_does(
        web, start_console, sql, pgdrain_command):
    for queue in ("emails", "emails-cli", "exports", "exports-cli"):
        add_job(sql, queue=queue)
    web.sign_in(start_console(allow_actions=True, refresh_seconds=QUIET))

    web.click(queue_form(web, "emails").find_element(By.TAG_NAME, "button"))
    assert web.path.startswith("/?notice=")
    assert web.notice == "queue 'emails' paused: drains claim none of its jobs"
    pgdrain_command("pause", "emails-cli")
    assert queue_row(sql, "emails") == queue_row(sql, "emails-cli")
    assert queue_row(sql, "emails")["paused"] is True

    web.sign_in(start_console(allow_actions=True, refresh_seconds=QUIET))  # read anew
    assert web.row("queues", "emails").find_element(By.CSS_SELECTOR, ".bad").text.startswith(
        "paused")
    web.click(queue_form(web, "emails").find_element(By.TAG_NAME, "button"))
    assert web.notice == "queue 'emails' resumed"
    pgdrain_command("resume", "emails-cli")
    assert queue_row(sql, "emails") == queue_row(sql, "emails-cli")
    assert queue_row(sql, "emails")["paused"] is False

    set_limits(web, "exports", max_running="3", rate="10/s")
    assert web.notice == "queue 'exports': at most 3 running, rate 10/s"
    pgdrain_command("queue", "set", "exports-cli", "--max-running", "3", "--rate", "10/s")
    assert queue_row(sql, "exports") == queue_row(sql, "exports-cli") == {
        "paused": False, "max_running": 3, "rate_limit": 10, "rate_period": 1.0}

    web.sign_in(start_console(allow_actions=True, refresh_seconds=QUIET))
    exports = web.row("queues", "exports")
    assert [t.text for t in exports.find_elements(By.CSS_SELECTOR, ".tag")] == [
        "cap 3", "rate 10/s"]
    set_limits(web, "exports", rate="fast")
    assert web.notice.startswith("queue 'exports' not changed: ")
    assert queue_row(sql, "exports")["rate_limit"] == 10

    web.sign_in(start_console(allow_actions=True, refresh_seconds=QUIET))
    set_limits(web, "exports", max_running="", rate="")  # blank lifts both
    assert web.notice == "queue 'exports': at most any number running, rate unlimited"
    pgdrain_command("queue", "set", "exports-cli", "--max-running", "none", "--rate", "none")
    assert queue_row(sql, "exports") == queue_row(sql, "exports-cli") == {
        "paused": False, "max_running": None, "rate_limit": None, "rate_period": None}


def test_a_bulk_retry_confirms_the_count_and_requeues_only_what_the_filter_selects(
        web, acting_console, sql):
    hooks = [failed_job(sql, queue="webhooks") for _ in range(3)]
    others = [failed_job(sql, queue="emails"), failed_job(sql, queue="emails"),
              add_job(sql, "deliver-webhook", queue="webhooks"),
              add_job(sql, "deliver-webhook", queue="webhooks", status="done", attempts=1,
                      finished_at=ago(5))]
    untouched = {i: job_row(sql, i) for i in others}
    web.sign_in(acting_console, "/jobs")
    web.submit("form#filters", queue="webhooks")
    web.click(web.button("#bulk", "Retry all…"))

    assert web.path == "/bulk"
    assert web.heading == "Retry: confirm"
    assert web.find("#count").text.startswith("3 jobs (failed)")
    assert [li.text for li in web.all("#filter li")] == ["queue = webhooks"]
    late = failed_job(sql, queue="webhooks")  # enqueued after the count: not among them
    web.click(web.button("form#confirm", "Retry 3 jobs"))

    assert web.path.startswith("/jobs?queue=webhooks&notice=")
    assert web.notice == "Retry: 3 requeued"
    for ident in hooks:
        row = job_row(sql, ident)
        assert (row["status"], row["attempts"], row["due"]) == ("pending", 0, True)
    assert {i: job_row(sql, i) for i in others} == untouched
    assert job_row(sql, late)["status"] == "failed"


def test_the_overview_an_action_returns_to_shows_what_it_did(web, start_console, sql):
    add_job(sql, queue="emails")
    web.sign_in(start_console(allow_actions=True, refresh_seconds=5.0))  # the default
    web.click(queue_form(web, "emails").find_element(By.TAG_NAME, "button"))
    assert web.notice == "queue 'emails' paused: drains claim none of its jobs"
    assert queue_row(sql, "emails")["paused"] is True
    assert web.row("queues", "emails").find_element(By.CSS_SELECTOR, "td:nth-child(2)"
                                                     ).text.startswith("paused")
    assert queue_form(web, "emails").find_element(By.TAG_NAME, "button").text == "Resume"


def test_a_queues_link_lists_that_queue_alone(web, console, sql):
    plain = failed_job(sql, queue="emails")
    spaced = failed_job(sql, queue="emails ")  # a name enqueue accepts
    web.sign_in(console)
    links = web.all("table#queues td:first-child a")
    assert [link.text for link in links] == ["emails", "'emails '"]  # told apart
    web.click(links[1])
    assert plain != spaced
    assert web.job_ids() == [spaced]


# --- hostile values -----------------------------------------------------------------------------


def hostile_queue(sql: Callable[..., list[dict[str, Any]]]) -> dict[str, dict[str, int]]:
    """For each hostile string, a failed and a waiting job naming it everywhere, its queue
    paused, capped and rate-limited, and a schedule entry named after it."""
    made = {}
    for text in HOSTILE:
        failed = failed_job(
            sql, text, queue=text, tenant=text, ordering_key=text, dedupe_key=text,
            payload={"note": text, text: [text]}, result={"r": text}, progress={"p": text},
            state={"s": text},
            errors=[f"Traceback (most recent call last):\n  File \"{text}\"\nValueError: {text}"])
        sql("UPDATE jobs SET errors = jsonb_set(errors, '{0,at}', to_jsonb(:text::text)) "
            "WHERE id = :id", text=text, id=failed)
        waiting = add_job(sql, text, queue=text, status="waiting", wait_signal=text,
                          run_at=seconds_from_now(3600))
        sql("INSERT INTO pgdrain_queues (queue, paused_at, max_running, rate_limit, "
            "rate_period) VALUES (:q, now(), 2, 5, 60)", q=text)
        sql("INSERT INTO pgdrain_schedule_declarations (name, cron, tz, job_type, queue) "
            "VALUES (:t, :t, :t, :t, :t)", t=text)
        sql("INSERT INTO pgdrain_schedules (name, last_tick, last_job_id) "
            "VALUES (:t, now(), :job)", t=text, job=failed)
        made[text] = {"failed": failed, "waiting": waiting}
    return made


def test_hostile_values_stay_text_on_every_page(web, start_console, sql):
    made = hostile_queue(sql)
    web.sign_in(start_console(allow_actions=True, refresh_seconds=QUIET))
    every = [shown(t) for t in HOSTILE]

    assert_inert(web, every)
    names = [a.text for a in web.all("table#queues td:first-child a")]
    assert sorted(names) == sorted(every)
    assert [r[2] for r in web.rows("failures")] == [shown(t) for t in reversed(HOSTILE)]

    for path in ("/jobs", "/jobs?status=failed", "/schedules"):
        web.open(path)
        assert_inert(web, every)
    assert sorted(r[0] for r in web.rows("schedules")) == sorted(every)

    for text, jobs in made.items():
        for name in ("queue", "type", "tenant", "ordering_key", "dedupe_key"):
            web.open("/jobs?" + urlencode({name: text}))
            assert_inert(web, [shown(text)])
            assert web.find(f"form#filters [name={name}]").get_attribute("value") == text
            assert jobs["failed"] in web.job_ids()
        web.open(f"/jobs/{jobs['failed']}")
        assert_inert(web, [shown(text), shown_in_json(text)])
        assert web.find("#fields dd a").text == shown(text)  # the queue, linked
        assert web.find("#errors h3").text == f"Attempt 1 · {shown(text)}"
        assert f"ValueError: {shown(text)}" in web.find("#errors pre").text
        for section in ("payload", "result", "progress", "state"):
            assert shown_in_json(text) in web.find(f"#{section} pre").text
        web.open(f"/jobs/{jobs['waiting']}")
        assert_inert(web, [f"Waits for signal\n{shown(text)}"])


def test_hostile_names_go_back_to_the_console_intact_through_its_forms(web, start_console,
                                                                       sql):
    """The hidden fields a form sends back hold the hostile names exactly: resuming a queue
    resumes that queue, a bulk retry on its filter retries its job alone."""
    made = hostile_queue(sql)
    web.sign_in(start_console(allow_actions=True, refresh_seconds=QUIET))
    for text in HOSTILE:
        resume = queue_form(web, shown(text)).find_element(By.TAG_NAME, "button")
        assert resume.text == "Resume"
        web.click(resume)
        assert_inert(web, [f"queue {text!r} resumed"])
        assert queue_row(sql, text)["paused"] is False

    for text, jobs in made.items():
        web.open("/jobs?" + urlencode({"queue": text}))
        web.click(web.button("#bulk", "Retry all…"))
        assert_inert(web, [f"queue = {shown(text)}"])
        assert web.find("#count").text.startswith("1 job (failed)")
        web.click(web.button("form#confirm", "Retry 1 job"))
        assert_inert(web, ["Retry: 1 requeued"])
        assert web.find("form#filters [name=queue]").get_attribute("value") == text
        assert job_row(sql, jobs["failed"])["status"] == "pending"
    assert sql("SELECT count(*) AS n FROM jobs WHERE status = 'failed'") == [{"n": 0}]


# --- who may use it -------------------------------------------------------------------------


def test_without_the_token_or_with_a_wrong_one_nothing_is_shown(web, console, sql):
    add_job(sql, "secret-report", queue="payroll")
    for path in ("/", "/jobs", "/jobs/1", "/schedules", "/jobs?token=not-the-token",
                 "/?token=" + console.token[:-1]):
        web.driver.get(console.url + path)
        assert web.driver.title == "Forbidden · pgdrain console", path
        assert web.heading == "Forbidden"
        source = web.driver.page_source
        assert "payroll" not in source and "secret-report" not in source
        assert console.csrf not in source and console.token not in source
        assert web.all("header nav") == [] and web.all("#database") == []
        assert web.driver.get_cookies() == []
    web.sign_in(console)  # the right one still works
    cookie = web.driver.get_cookies()[0]
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
    assert "payroll" in web.text
    web.driver.get(console.url + "/jobs?token=wrong")  # a wrong token, even with the cookie
    assert web.heading == "Forbidden"
    assert "payroll" not in web.driver.page_source


@pytest.fixture
def attacker() -> Iterator[Callable[[str], str]]:
    """Another site on this machine (loopback, another port): serve(html) gives its URL."""
    pages: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def serve(html: str) -> str:
        path = f"/page{len(pages)}.html"
        pages[path] = html.encode()
        return f"http://127.0.0.1:{server.server_address[1]}{path}"

    yield serve
    server.shutdown()
    server.server_close()
    thread.join(10)


def test_a_form_from_another_site_changes_nothing(web, acting_console, sql, attacker):
    failed = failed_job(sql, queue="emails")
    before = job_row(sql, failed)
    web.sign_in(acting_console)  # the browser holds the console's cookie
    forms = {
        "/queues": {"action": "pause", "queue": "emails"},
        f"/jobs/{failed}": {"action": "retry"},
        "/bulk/run": {"action": "delete", "upto": str(failed)},
    }
    # The page sends its own Origin, or "null" with no-referrer: refused either way, for the
    # Origin or for the CSRF token it cannot know.
    for policy, (path, fields) in itertools.product(
            ("", '<meta name="referrer" content="no-referrer">'), forms.items()):
        inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">'
                         for k, v in fields.items())
        page = attacker(f'{policy}<form id="f" method="post" '
                        f'action="{acting_console.url}{path}">{inputs}</form>'
                        '<script>document.getElementById("f").submit()</script>')
        web.driver.get(page)
        WebDriverWait(web.driver, browser.WAIT_SECONDS).until(
            lambda d, p=path: d.current_url == acting_console.url + p)
        assert web.refused(), (policy, path)
    assert job_row(sql, failed) == before
    assert queue_row(sql, "emails") is None
    web.open("/")  # and the console still answers its own pages
    assert web.heading == "Overview"


# --- the pages as the docs show them --------------------------------------------------------


def realistic_queue(sql: Callable[..., list[dict[str, Any]]], connect_to: Callable[[], Any]
                    ) -> dict[str, int]:
    """A working day's queue: an hour of jobs done and failed, due, scheduled, running,
    waiting and failed jobs in a few queues, one paused, one capped and rate-limited, two
    drains running and three schedule entries."""
    kinds = (("emails", "send-receipt", 14), ("webhooks", "deliver-webhook", 9),
             ("exports", "export-csv", 2), ("images", "resize-image", 6))
    for queue, job_type, base in kinds:  # per minute: a base, some noise, a busy spell
        sql("INSERT INTO jobs (job_type, queue, status, attempts, payload, created_at, run_at, "
            "started_at, finished_at) "
            "SELECT :job_type, :queue, 'done', 1, jsonb_build_object('n', i), "
            "now() - make_interval(mins => m, secs => i % 50 + 9), "
            "now() - make_interval(mins => m, secs => i % 50 + 9), "
            "now() - make_interval(mins => m, secs => i % 50 + 2), "
            "now() - make_interval(mins => m, secs => i % 50) "
            "FROM generate_series(1, 58) AS m CROSS JOIN LATERAL generate_series(1, "
            ":base + (m * 37) % 11 + CASE WHEN m BETWEEN 18 AND 26 THEN 2 * :base ELSE 0 END"
            ") AS i", job_type=job_type, queue=queue, base=base)
    tracebacks = [
        "Traceback (most recent call last):\n  File \"/var/task/jobs/webhook.py\", line 48, in "
        "deliver\n    response.raise_for_status()\n  File \"/opt/python/urllib3/response.py\", "
        "line 1020, in raise_for_status\nHTTPError: 502 Bad Gateway from "
        "https://hooks.example.com/orders",
        "Traceback (most recent call last):\n  File \"/var/task/jobs/webhook.py\", line 41, in "
        "deliver\n    conn = pool.urlopen(\"POST\", url, body=body, timeout=10)\n"
        "TimeoutError: https://hooks.example.com/orders did not answer in 10 s",
        "HTTPError: 503 Service Unavailable from https://hooks.example.com/orders",
    ]
    for n, minutes_ago in enumerate((57, 51, 44, 38, 31, 29, 22, 17, 12, 6, 3)):
        queue, job_type = ("emails", "send-receipt") if n % 3 == 2 else (
            "webhooks", "deliver-webhook")
        failed_job(sql, job_type, queue=queue, errors=tracebacks, finished=60 * minutes_ago + 7,
                   payload={"order_id": 48_000 + n, "event": "order.paid"})
    for name, cron, tz, job_type, queue in (
            ("nightly-sales-report", "0 6 * * *", "Europe/Paris", "build-report", "reports"),
            ("purge-sessions", "*/15 * * * *", None, "purge-sessions", "default"),
            ("weekly-digest", "0 9 * * 1", "America/New_York", "send-digest", "emails")):
        schedule = parse_cron(cron, tz)
        [now] = [r["now"] for r in sql("SELECT now()")]
        tick = schedule.next_after(now - timedelta(days=8))
        while schedule.next_after(tick) <= now:
            tick = schedule.next_after(tick)
        last = add_job(sql, job_type, queue=queue, status="done", attempts=1,
                       created_at=tick, run_at=tick, finished_at=tick + timedelta(seconds=3))
        sql("INSERT INTO pgdrain_schedule_declarations (name, cron, tz, job_type, queue) "
            "VALUES (:name, :cron, :tz, :job_type, :queue)", name=name, cron=cron, tz=tz,
            job_type=job_type, queue=queue)
        sql("INSERT INTO pgdrain_schedules (name, last_tick, last_job_id) "
            "VALUES (:name, :tick, :job)", name=name, tick=tick, job=last)
    shown_job = failed_job(
        sql, "deliver-webhook", queue="webhooks", errors=tracebacks, tenant="acme",
        ordering_key="order-48213", finished=95,
        payload={"event": "order.paid", "url": "https://hooks.example.com/orders",
                 "body": {"order_id": 48213, "total": "129.90", "currency": "EUR",
                          "lines": [{"sku": "TSHIRT-M", "qty": 2}, {"sku": "MUG", "qty": 1}]},
                 "headers": {"X-Signature": "sha256=9f2c…e41a"}})
    live: list[tuple[float, dict[str, Any]]] = []  # (enqueued seconds ago, the job)
    for n in range(4):  # waiting behind the paused queue
        live.append((1500 + 60 * n, {"job_type": "export-csv", "queue": "exports",
                                     "payload": {"report": f"sales-2026-{n + 1:02d}"}}))
    for n in range(7):
        live.append((3000 - 300 * n, {"job_type": "send-reminder", "queue": "emails",
                                      "run_at": seconds_from_now(600 * (n + 1)),
                                      "payload": {"user": 300 + n}}))
    live.append((240, {"job_type": "build-report", "queue": "reports", "status": "waiting",
                       "parents_left": 2, "after_parents": "done",
                       "payload": {"report": "sales-2026-12"}}))
    for n, (queue, job_type) in enumerate([("webhooks", "deliver-webhook")] * 2 + [
            ("emails", "send-receipt")] * 3 + [("images", "resize-image")]):
        live.append((9 + n, {"job_type": job_type, "queue": queue, "status": "running",
                             "attempts": 1, "claimed_at": ago(4), "started_at": ago(4),
                             "lease_expires_at": seconds_from_now(296),
                             "payload": {"order_id": 49_300 + n}}))
    for n in range(12):
        live.append((80 - 5 * n, {"job_type": "deliver-webhook", "queue": "webhooks",
                                  "payload": {"order_id": 49_100 + n}}))
    for n in range(23):
        live.append((240 - 9 * n, {"job_type": "send-receipt", "queue": "emails",
                                   "tenant": ("acme", "globex", "initech")[n % 3],
                                   "payload": {"order_id": 49_000 + n}}))
    for seconds, job in sorted(live, key=lambda j: -j[0]):  # ids in the order enqueued
        add_job(sql, **{"created_at": ago(seconds), "run_at": ago(seconds), **job})
    sql("INSERT INTO pgdrain_queues (queue, paused_at) VALUES ('exports', now() - interval "
        "'25 minutes')")
    sql("INSERT INTO pgdrain_queues (queue, max_running, rate_limit, rate_period) "
        "VALUES ('webhooks', 2, 10, 1)")
    for slot in (0, 1):  # two drains running
        connect_to().run("SELECT pg_advisory_lock(:key::int, :slot::int)",
                         key=DRAIN_SLOT_LOCK_KEY, slot=slot)
    return {"failed": shown_job}


def test_the_pages_of_a_realistic_queue(web, start_console, sql, connect_to):
    """The pages the README shows, on a realistic queue; saved as PNGs into
    ``$PGDRAIN_SCREENSHOTS`` when it is set (``make console-screenshots``)."""
    made = realistic_queue(sql, connect_to)
    web.sign_in(start_console(allow_actions=True, refresh_seconds=60))
    saved = []

    def page(name: str) -> None:
        assert_inert(web)
        if SCREENSHOTS:
            browser.full_page_screenshot(web.driver, Path(SCREENSHOTS) / f"{name}.png")
            saved.append(name)

    queues = {r[0]: r for r in web.rows("queues")}
    assert list(queues) == ["emails", "exports", "images", "reports", "webhooks"]
    assert queues["exports"][1].startswith("paused 25m")
    webhooks = web.row("queues", "webhooks")
    assert [t.text for t in webhooks.find_elements(By.CSS_SELECTOR, ".tag")] == [
        "cap 2", "rate 10/s"]
    done = [float(r.get_attribute("height")) for r in web.all("svg#chart rect.done")]
    assert len([h for h in done if h > 0]) >= 55
    assert len(web.rows("drains")) == 2
    page("overview")

    web.click(web.find("nav a[href='/jobs']"))
    assert len(web.job_ids()) == 50
    page("jobs")

    web.open(f"/jobs/{made['failed']}")
    assert len(web.all("#errors article.attempt")) == 3
    page("job")

    web.click(web.find("nav a[href='/schedules']"))
    assert len(web.rows("schedules")) == 3
    page("schedules")

    web.open("/jobs?status=failed&queue=webhooks")
    web.click(web.button("#bulk", "Retry all…"))
    assert web.find("#count").text.startswith("9 jobs (failed)")
    page("confirm")
    assert saved == (["overview", "jobs", "job", "schedules", "confirm"] if SCREENSHOTS else [])
