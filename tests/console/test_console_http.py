"""The console over HTTP, as a browser without a browser: who gets in, what each page shows
from a real database, and what each action changes there (the browser tests drive the same
pages in Chromium)."""

from __future__ import annotations

import json
import re
import threading

import pytest

from tests.console.conftest import Client

HOSTILE = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>',
           "javascript:alert(1)", "evil\u202eexe.txt", "bell\x07esc\x1b[31m"]


def _job(sql, **columns) -> int:
    names = ", ".join(columns)
    values = ", ".join(f":{name}" for name in columns)
    return sql(f"INSERT INTO jobs ({names}) VALUES ({values}) RETURNING id", **columns)[0]["id"]


def _status(sql, ident: int) -> str | None:
    rows = sql("SELECT status FROM jobs WHERE id = :id", id=ident)
    return rows[0]["status"] if rows else None


# --- who gets in ---------------------------------------------------------------------------


def test_without_the_token_every_page_is_refused_and_says_nothing_of_the_database(console):
    stranger = Client(console)
    for path in ("/", "/jobs", "/jobs/1", "/schedules"):
        page = stranger.get(path)
        assert page.status == 403
        assert "open the URL the console printed" in page.body
        assert "tester@" not in page.body and console.csrf not in page.body


def test_a_wrong_token_is_refused(console):
    page = Client(console).get(f"/?token={console.token[:-2]}xx")
    assert page.status == 403 and "not the one this console" in page.body


def test_the_token_becomes_a_cookie_and_leaves_the_address(console):
    visitor = Client(console)
    first = visitor.get(console.start_url("/jobs?status=failed"), follow=False)
    assert first.status == 303
    assert first.headers["Location"] == "/jobs?status=failed"
    cookie = first.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    page = visitor.get("/jobs")
    assert page.status == 200 and "tester@127.0.0.1/test" in page.body


def test_the_redirect_that_drops_the_token_stays_on_the_console(console):
    first = Client(console).get(f"//evil.example/x?token={console.token}", follow=False)
    assert first.status == 303 and first.headers["Location"] == "/evil.example/x"
    split = Client(console).get(f"/jobs%0d%0aSet-Cookie:%20x=1?token={console.token}",
                                follow=False)
    assert split.headers["Location"] == "/jobs%0D%0ASet-Cookie%3A%20x%3D1"
    assert split.headers.get_all("Set-Cookie") == [
        f"pgdrain_console_{console.url.rsplit(':', 1)[1]}={console.token}; HttpOnly; "
        "SameSite=Strict; Path=/"]


def test_a_request_naming_another_host_is_refused(client):
    """A DNS-rebinding page reaches the console under its own name: refused."""
    page = client.get("/", headers={"Host": "attacker.example:80"})
    assert page.status == 403


def test_every_page_forbids_scripts_framing_and_caching(client):
    page = client.get("/")
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "script" not in policy.replace(
        "default-src 'none'", "")
    assert "frame-ancestors 'none'" in policy
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert page.headers["Cache-Control"] == "no-store"
    assert page.headers["Referrer-Policy"] == "same-origin"  # no-referrer makes Origin null
    assert "<script" not in page.body


def test_a_read_only_console_refuses_every_action(client, sql):
    ident = _job(sql, job_type="a", status="failed", finished_at="now()")
    page = client.post(f"/jobs/{ident}", {"action": "retry"})
    assert page.status == 403 and "--allow-actions" in page.body
    assert _status(sql, ident) == "failed"
    assert "<form method=\"post\"" not in client.get(f"/jobs/{ident}").body


def test_an_action_without_the_csrf_token_is_refused(acting_client, sql):
    ident = _job(sql, job_type="a", status="failed", finished_at="now()")
    page = acting_client.post(f"/jobs/{ident}", {"action": "retry"}, csrf=False)
    assert page.status == 403 and "CSRF" in page.body
    page = acting_client.post(f"/jobs/{ident}", {"action": "retry", "csrf": "0" * 64},
                              csrf=False)
    assert page.status == 403
    assert _status(sql, ident) == "failed"


def test_an_action_from_another_origin_is_refused(acting_client, sql):
    ident = _job(sql, job_type="a")
    page = acting_client.post(f"/jobs/{ident}", {"action": "cancel"},
                              headers={"Origin": "http://127.0.0.1:9"})
    assert page.status == 403
    assert _status(sql, ident) == "pending"


def test_a_malformed_form_is_refused_with_a_reason(acting_client):
    page = acting_client.post("/queues", {"action": "x" * 70_000})
    assert page.status == 400 and "at most" in page.body


# --- what the pages show -----------------------------------------------------------------


def test_the_overview_shows_each_queue_its_state_and_the_last_hours_work(client, sql):
    for _ in range(3):
        _job(sql, job_type="send", queue="emails")
    _job(sql, job_type="send", queue="emails", run_at="2999-01-01")
    _job(sql, job_type="hook", queue="webhooks", status="failed", finished_at="now()",
         last_error="boom: the far end said 500")
    sql("INSERT INTO jobs (job_type, queue, status, finished_at) "
        "SELECT 'send', 'emails', 'done', now() - g * interval '1 minute' "
        "FROM generate_series(1, 30) AS g")
    sql("INSERT INTO pgdrain_queues (queue, paused_at, max_running) "
        "VALUES ('webhooks', now(), 3)")
    page = client.get("/")
    assert page.status == 200
    emails = re.search(r"<tr>\s*<td><a href=\"/jobs\?queue=emails\">emails</a>.*?</tr>",
                       page.body, re.S)
    assert emails is not None
    cells = re.findall(r'<td class="n">([^<]*)</td>', emails[0])
    assert cells[:4] == ["3", "1", "0", "0"]  # due, scheduled, running, waiting
    webhooks = page.body[page.body.index("queue=webhooks"):]
    assert "paused" in webhooks.split("</tr>")[0] and "cap 3" in webhooks.split("</tr>")[0]
    assert "boom: the far end said 500" in page.body  # recent failures
    assert "30 done, 1 failed" in page.body
    assert page.body.count('class="done"') >= 30  # one bar a minute in the chart


def test_the_overview_is_read_once_for_every_open_tab(start_console, sql):
    running = start_console(refresh_seconds=60)
    tabs = [Client(running) for _ in range(8)]
    for tab in tabs:
        tab.sign_in()
    reads_before = running.app.overview.reads
    answers: list[int] = []
    threads = [threading.Thread(target=lambda t=tab: answers.append(t.get("/").status))
               for tab in tabs for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert answers == [200] * 24
    assert running.app.overview.reads == reads_before  # the sign-ins' read served them all


def test_the_jobs_page_filters_by_every_field(client, sql):
    keep = _job(sql, job_type="export", queue="reports", tenant="acme",
                ordering_key="acct-1", dedupe_key="export-42",
                payload=json.dumps({"Customer": "Zoë & Co"}))
    _job(sql, job_type="export", queue="reports", tenant="other")
    _job(sql, job_type="send", queue="emails", tenant="acme")
    for query in ("type=export&tenant=acme", "queue=reports&tenant=acme",
                  "ordering_key=acct-1", "dedupe_key=export-42", "q=zo%C3%AB+%26+co",
                  "status=pending&newer_than=1h&type=export&tenant=acme"):
        page = client.get(f"/jobs?{query}")
        assert page.status == 200
        assert page.links(r"/jobs/\d+") == [f"/jobs/{keep}"], query
    assert client.get("/jobs?older_than=1h").links(r"/jobs/\d+") == []


def test_a_bad_filter_is_refused_with_what_is_wrong(client):
    page = client.get("/jobs?status=lost&older_than=soon&before=x")
    assert page.status == 400
    assert "status is one of pending" in page.body
    assert "older than: a duration" in page.body
    assert "before is a job id" in page.body


def test_pages_of_jobs_follow_the_keyset_and_cover_every_job_once(client, sql):
    sql("INSERT INTO jobs (job_type) SELECT 'noop' FROM generate_series(1, 120)")
    seen: list[str] = []
    page = client.get("/jobs")
    while True:
        seen += page.links(r"/jobs/\d+")
        older = [h for h in page.links() if "before=" in h]
        if not older:
            break
        assert "offset" not in older[0].lower()
        page = client.get(older[0].replace("&amp;", "&"))
    ids = [int(h.rsplit("/", 1)[1]) for h in seen]
    assert len(ids) == 120 and ids == sorted(ids, reverse=True) and len(set(ids)) == 120


def test_a_job_page_shows_every_field_its_payload_and_each_attempts_error(client, sql):
    errors = [{"attempt": 1, "at": "2026-12-04T10:00:00+00:00",
               "error": "Traceback (most recent call last):\n  File \"x.py\"\nValueError: one"},
              {"attempt": 2, "at": "2026-12-04T10:01:00+00:00", "error": "ValueError: two"}]
    parent = _job(sql, job_type="parent", status="done", finished_at="now()")
    ident = _job(sql, job_type="export", status="failed", attempts=2, finished_at="now()",
                 payload=json.dumps({"pages": [1, 2], "to": "a@example.com"}),
                 errors=json.dumps(errors), last_error="ValueError: two",
                 state=json.dumps({"page": 7}), tenant="acme")
    sql("INSERT INTO job_edges (parent_id, child_id) VALUES (:p, :c)", p=parent, c=ident)
    page = client.get(f"/jobs/{ident}")
    assert page.status == 200
    assert "&#34;pages&#34;: [\n    1,\n    2\n  ]" in page.body  # pretty-printed
    assert "ValueError: one" in page.body and "ValueError: two" in page.body
    assert "  File &#34;x.py&#34;\nValueError: one" in page.body  # the traceback's lines
    assert "&#34;page&#34;: 7" in page.body  # the checkpoint
    assert f'href="/jobs/{parent}"' in page.body
    assert "acme" in page.body
    assert client.get("/jobs/999999").status == 404


def test_a_traced_jobs_page_shows_its_trace_and_a_hostile_one_is_text(client, sql):
    xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    ident = _job(sql, job_type="t", trace_context=json.dumps({"xray": xray}))
    body = client.get(f"/jobs/{ident}").body
    assert "<dt>Trace</dt>" in body and xray in body
    odd = _job(sql, job_type="t", trace_context=json.dumps(
        {"traceparent": "<script>alert(1)</script>"}))
    body = client.get(f"/jobs/{odd}").body
    assert "&lt;script&gt;" in body and "<script>" not in body
    listed = _job(sql, job_type="t", trace_context=json.dumps(["not", "a", "mapping"]))
    assert client.get(f"/jobs/{listed}").status == 200


def test_hostile_values_are_shown_as_text_on_every_page(client, sql):
    ids = []
    for text in HOSTILE:
        ids.append(_job(sql, job_type=text, queue=text, tenant=text, ordering_key=text,
                        status="failed", finished_at="now()", last_error=text,
                        payload=json.dumps({"v": text})))
    pages = [client.get(p).body for p in ("/", "/jobs", *(f"/jobs/{i}" for i in ids))]
    for body in pages:
        assert "<script>" not in body and "<img" not in body
        assert "\u202e" not in body and "\x1b" not in body and "\x07" not in body
        assert not re.search(r'href="\s*javascript:', body, re.I)
    overview = pages[0]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in overview
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in overview
    assert "evil\\u202eexe.txt" in overview and "bell\\x07esc\\x1b[31m" in overview


def test_the_schedules_page_lists_each_entry(client, sql):
    sql("INSERT INTO pgdrain_schedules (name, last_tick) VALUES ('nightly <b>', now())")
    page = client.get("/schedules")
    assert page.status == 200 and "nightly &lt;b&gt;" in page.body


def test_the_schedules_page_shows_those_made_at_run_time_and_their_pause(client, conn):
    import pgdrain

    pgdrain.schedule(conn, "0 9 * * *", "report", name="report:customer-42")
    pgdrain.schedule(conn, "0 10 * * *", "report", name="report:customer-43")
    pgdrain.pause_schedule(conn, "report:customer-43")
    page = client.get("/schedules")
    assert page.status == 200
    assert page.body.count("made at run time") == 2 and "report:customer-42" in page.body
    assert "paused " in page.body


def test_a_database_that_does_not_answer_is_a_page_that_says_so(start_console):
    def refuse():
        raise ConnectionRefusedError(111, "Connection refused")

    running = start_console(open_connection=refuse)
    visitor = Client(running)
    page = visitor.sign_in()
    assert page.status == 503 and "did not answer" in page.body
    assert visitor.get("/jobs").status == 503


# --- what the actions change -----------------------------------------------------------------


def test_each_job_action_changes_the_job_as_the_cli_does(acting_client, sql):
    failed = _job(sql, job_type="a", status="failed", finished_at="now()", attempts=3)
    page = acting_client.post(f"/jobs/{failed}", {"action": "retry"})
    assert page.status == 200 and "requeued" in page.body
    assert sql("SELECT status, attempts FROM jobs WHERE id = :id", id=failed) == [
        {"status": "pending", "attempts": 0}]
    later = _job(sql, job_type="a", run_at="2999-01-01")
    acting_client.post(f"/jobs/{later}", {"action": "run_now"})
    assert sql("SELECT run_at <= now() AS due FROM jobs WHERE id = :id", id=later)[0]["due"]
    acting_client.post(f"/jobs/{later}", {"action": "cancel"})
    assert _status(sql, later) == "cancelled"
    page = acting_client.post(f"/jobs/{later}", {"action": "delete"})
    assert _status(sql, later) is None and page.url.split("?")[0].endswith("/jobs")
    assert "deleted" in page.body


def test_queue_actions_pause_resume_and_set_limits(acting_client, sql):
    _job(sql, job_type="a", queue="emails")
    acting_client.post("/queues", {"action": "pause", "queue": "emails"})
    assert sql("SELECT paused_at IS NOT NULL AS p FROM pgdrain_queues")[0]["p"]
    acting_client.post("/queues", {"action": "set", "queue": "emails", "max_running": "5",
                                   "rate": "10/s"})
    row = sql("SELECT max_running, rate_limit, rate_period FROM pgdrain_queues")[0]
    assert row["max_running"] == 5 and row["rate_limit"] == 10
    page = acting_client.post("/queues", {"action": "set", "queue": "emails",
                                          "max_running": "lots", "rate": ""})
    assert "not changed" in page.body and "a cap is a whole number" in page.body
    assert sql("SELECT max_running FROM pgdrain_queues")[0]["max_running"] == 5
    acting_client.post("/queues", {"action": "resume", "queue": "emails"})
    assert not sql("SELECT paused_at IS NOT NULL AS p FROM pgdrain_queues")[0]["p"]


def test_a_bulk_action_counts_asks_and_acts_only_on_what_it_counted(acting_client, sql):
    for _ in range(4):
        _job(sql, job_type="export", status="failed", finished_at="now()")
    other = _job(sql, job_type="send", status="failed", finished_at="now()")
    pending = _job(sql, job_type="export")
    confirm = acting_client.post("/bulk", {"action": "retry", "type": "export"})
    assert confirm.status == 200
    assert re.search(r"<strong>4</strong> jobs\s*\(failed\)", confirm.body)
    upto = re.search(r'name="upto" value="(\d+)"', confirm.body)[1]
    late = _job(sql, job_type="export", status="failed", finished_at="now()")
    done = acting_client.post("/bulk/run", {"action": "retry", "type": "export",
                                            "upto": upto})
    assert "Retry: 4 requeued" in done.body
    rows = sql("SELECT id, status FROM jobs ORDER BY id")
    assert {r["id"]: r["status"] for r in rows if r["id"] in (other, pending, late)} == {
        other: "failed", pending: "pending", late: "failed"}
    assert sum(r["status"] == "pending" for r in rows) == 5


def test_an_action_on_a_job_that_cannot_take_it_says_so(acting_client, sql):
    ident = _job(sql, job_type="a", status="done", finished_at="now()")
    page = acting_client.post(f"/jobs/{ident}", {"action": "cancel"})
    assert "already done" in page.body
    assert _status(sql, ident) == "done"
    page = acting_client.post(f"/jobs/{ident}", {"action": "explode"})
    assert page.status == 400


@pytest.mark.parametrize("path", ["/jobs/1/../../etc", "/static/../app.py", "/nothing"])
def test_unknown_paths_are_not_found(client, path):
    assert client.get(path).status in (403, 404)


def test_a_job_plain_sql_wrote_oddly_still_has_its_page(client, sql):
    """Plain SQL may store what the library never writes: entries of the error history that
    are not entries, a payload that is not an object, a number Python cannot hold, times at
    infinity. The page shows each as it is, and the rest of the job."""
    odd = [
        {"errors": '[[1], {"attempt": 1}]', "payload": "[1, 2]"},
        {"errors": '[1, "two", {"attempt": "x"}, {"at": "soon", "error": null}]',
         "payload": '"just text"'},
        {"errors": "[]", "payload": "{}", "result": "1" + "0" * 5000,
         "run_at": "infinity", "finished_at": "-infinity"},
    ]
    for columns in odd:
        ident = _job(sql, job_type="odd", status="failed", **columns)
        page = client.get(f"/jobs/{ident}")
        assert page.status == 200, page.body[-2000:]
        assert f"Job {ident}" in page.body
    assert "&#34;just text&#34;" in page.body or "just text" in client.get(
        f"/jobs/{ident - 1}").body
    listing = client.get("/jobs?type=odd")
    assert listing.status == 200 and len(listing.links(r"/jobs/\d+")) == 3


def test_an_id_no_job_can_have_is_not_found(client):
    page = client.get("/jobs/9999999999999999999")
    assert page.status == 404 and "an integer from 1 to 9223372036854775807" in page.body
