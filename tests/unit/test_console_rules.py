"""The console's decisions without I/O: who gets in (guard), what a filter means (filters), how
values look (text) and the chart's geometry (chart)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("jinja2", reason="the console's dependencies: pip install -e console/")

from pgdrain_console import chart, filters, text
from pgdrain_console.guard import Guard, new_token

GUARD = Guard("t" * 43, "127.0.0.1", 8477)


def test_tokens_are_long_random_and_url_safe():
    tokens = {new_token() for _ in range(50)}
    assert len(tokens) == 50
    assert all(len(t) >= 43 and t.replace("-", "").replace("_", "").isalnum() for t in tokens)


def test_the_token_and_the_csrf_token_are_checked_whole():
    assert GUARD.token_ok("t" * 43)
    assert not GUARD.token_ok("t" * 42) and not GUARD.token_ok(None) and not GUARD.token_ok("")
    assert GUARD.csrf != GUARD.token and GUARD.csrf_ok(GUARD.csrf)
    assert not GUARD.csrf_ok(GUARD.token) and not GUARD.csrf_ok(None)
    assert Guard("u" * 43, "127.0.0.1", 8477).csrf != GUARD.csrf


@pytest.mark.parametrize(("host", "ok"), [
    ("127.0.0.1:8477", True), ("localhost:8477", True), ("LOCALHOST:8477", True),
    ("127.0.0.1:8478", False), ("127.0.0.1", False), ("evil.example:8477", False),
    ("127.0.0.2:8477", False), ("[::1]:8477", False), ("", False), (None, False),
    ("127.0.0.1:notaport", False),
])
def test_the_host_header_must_name_the_console(host, ok):
    assert GUARD.host_ok(host) is ok


def test_a_console_on_every_address_answers_any_name_and_ipv6_loopback_its_own():
    assert Guard("t", "0.0.0.0", 80).host_ok("build-box.internal:80")
    six = Guard("t", "::1", 9000)
    assert six.host_ok("[::1]:9000") and six.host_ok("localhost:9000")
    assert not six.host_ok("127.0.0.1:9000")
    assert six.url("/") == "http://[::1]:9000/"


@pytest.mark.parametrize(("origin", "ok"), [
    (None, True), ("http://127.0.0.1:8477", True), ("http://127.0.0.1:9999", False),
    ("https://127.0.0.1:8477", False), ("null", False), ("http://evil.example:8477", False),
])
def test_an_origin_must_be_the_console(origin, ok):
    assert GUARD.origin_ok(origin) is ok


def test_the_cookie_is_http_only_strict_and_named_after_the_port():
    assert GUARD.set_cookie() == (f"pgdrain_console_8477={'t' * 43}; HttpOnly; "
                                  "SameSite=Strict; Path=/")
    header = f"other=1; pgdrain_console_8477={'t' * 43}; pgdrain_console_9000=x"
    assert GUARD.cookie_token(header) == "t" * 43
    assert GUARD.cookie_token("pgdrain_console_9000=x") is None
    assert GUARD.cookie_token('bad"cookie') is None and GUARD.cookie_token(None) is None


def test_filters_read_each_field_and_say_what_is_wrong():
    chosen = filters.read({"status": "failed", "type": " export ", "q": "Zoë", "older_than":
                           "2h", "tenant": "", "queue": "x" * 501, "waiting_for": "nobody"})
    assert chosen.match.status == "failed" and chosen.match.job_type == " export "  # exact
    assert chosen.match.search == "Zoë" and chosen.match.older_than_seconds == 7200
    assert chosen.match.tenant is None and chosen.match.queue is None
    assert chosen.problems == ("waiting for is parents or signal",
                               "queue is at most 500 characters")
    assert "tenant" not in chosen.raw
    assert filters.read({"status": "lost"}).problems == (
        "status is one of pending, running, done, failed, cancelled, waiting",)
    assert filters.read({"newer_than": "soon"}).problems[0].startswith("newer than: a duration")


def test_a_filters_link_carries_every_field_encoded():
    chosen = filters.read({"queue": "a&b=c", "q": "javascript:alert(1)"})
    assert chosen.query(before=10) == "queue=a%26b%3Dc&q=javascript%3Aalert%281%29&before=10"


@pytest.mark.parametrize(("raw", "start"), [
    ({}, (None, None)), ({"before": "42"}, (42, None)), ({"before": "-1"}, (None,
     "before is a job id")), ({"before": "9" * 20}, (None, "before is a job id")),
    ({"before": "٣"}, (None, "before is a job id")),
])
def test_a_page_starts_below_a_job_id(raw, start):
    assert filters.page_start(raw) == start


def test_invisible_characters_are_shown_as_escapes():
    assert text.visible("evil\u202eexe") == "evil\\u202eexe"
    assert text.visible("a\x1b[31mb\x07") == "a\\x1b[31mb\\x07"
    assert text.visible("zero\u200bwidth") == "zero\\u200bwidth"
    assert text.visible("plain <b> & Zoë") == "plain <b> & Zoë"  # HTML is the template's
    assert text.visible(None) == "" and text.visible(12) == "12"
    assert text.visible_lines("one\n\x1btwo") == "one\n\\x1btwo"
    assert text.pretty_json({"k": "\u202e"}) == '{\n  "k": "\\u202e"\n}'


def test_ages_counts_and_times_read_at_a_glance():
    assert [text.age(s) for s in (0, 59, 61, 601, 3661, 90000)] == [
        "0s", "59s", "1m 1s", "10m", "1h 1m", "1d 1h"]
    assert text.count(9_999, 10_000) == "9,999" and text.count(10_000, 10_000) == "10,000+"
    now = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
    assert text.when(now - timedelta(minutes=5), now) == "2026-12-04 17:55:00 UTC (5m 0s ago)"
    assert text.when(now + timedelta(hours=2), now) == "2026-12-04 20:00:00 UTC (in 2h 0m)"
    assert text.when("2026-12-04T19:00:00+01:00", now) == "2026-12-04 18:00:00 UTC (0s ago)"
    assert text.when("soon\u202e", now) == "soon\\u202e"
    assert text.when(None) == ""


def test_the_chart_has_a_bar_a_minute_scaled_to_the_busiest():
    now = datetime(2026, 12, 4, 18, 30, 45, tzinfo=UTC)
    this = now.replace(second=0)
    rows = [{"minute": this, "done": 8, "failed": 2},
            {"minute": this - timedelta(minutes=1), "done": 5, "failed": 0},
            {"minute": this - timedelta(minutes=1), "done": 5, "failed": 0},  # another queue
            {"minute": this - timedelta(minutes=90), "done": 99, "failed": 0}]  # too old
    drawn = chart.chart(rows, now, width=600, height=104)
    assert len(drawn.bars) == 60 and drawn.peak == 10
    assert (drawn.done, drawn.failed) == (18, 2)
    last = drawn.bars[-1]
    assert last.done_height == 80 and last.failed_height == 20 and last.failed_y == 4
    assert drawn.bars[-2].done_height == 100 and drawn.bars[0].done_height == 0
    assert last.label == "18:30 UTC: 8 done, 2 failed" and drawn.start == "17:31"
    assert chart.chart([], now).peak == 0


def test_an_error_history_is_listed_entry_by_entry_whatever_plain_sql_wrote():
    assert text.attempts([{"attempt": 1, "at": "2026-12-04T10:00:00+00:00", "error": "E"},
                          [1], "two", {"error": None}]) == [
        {"attempt": 1, "at": "2026-12-04T10:00:00+00:00", "error": "E"},
        {"attempt": None, "at": None, "error": "[\n  1\n]"},
        {"attempt": None, "at": None, "error": '"two"'},
        {"attempt": None, "at": None, "error": None}]
    assert text.attempts(None) == [] and text.attempts({"attempt": 1}) == []


def test_a_name_with_white_space_at_an_end_is_quoted():
    assert text.name("emails ") == "'emails '" and text.name(" a") == "' a'"
    assert text.name("emails") == "emails" and text.name("two words") == "two words"
    assert text.name("x\u202e ") == "'x\\u202e '" and text.name(None) == ""
