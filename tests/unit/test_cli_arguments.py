"""The command line's parsers and printers: pure functions, no database."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

import pytest

from pgdrain.cli import arguments, output, top


@pytest.mark.parametrize(("raw", "seconds"), [
    ("90s", 90), ("15m", 900), ("1h", 3600), ("7d", 604800), ("2w", 1209600), ("30", 30),
    (" 1.5h ", 5400), ("10min", 600), ("0s", 0),
])
def test_durations(raw, seconds):
    assert arguments.duration(raw) == seconds


@pytest.mark.parametrize("raw", ["", "7 days", "-1d", "1y", "h", "1e400s", "nan",
                                 "99999999999d"])
def test_bad_durations_say_what_a_duration_is(raw):
    with pytest.raises(argparse.ArgumentTypeError, match="a duration is a number with a unit"):
        arguments.duration(raw)


@pytest.mark.parametrize("raw", ["0", "-1", "1.5", "x", "10000001", "٣"])
def test_counts_are_whole_positive_numbers(raw):
    with pytest.raises(argparse.ArgumentTypeError, match="a whole number from 1 to 1000000"):
        arguments.positive_int(raw)


def test_names_refuse_control_characters():
    assert arguments.name("crm-sync") == "crm-sync"
    for raw in ("", "a\nb", "\x1b[2J", "x" * 201):
        with pytest.raises(argparse.ArgumentTypeError, match="without control characters"):
            arguments.name(raw)


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "-"), (0, "-"), (0.25, "0.2s"), (45, "45s"), (200, "3m 20s"), (7500, "2h 5m"),
    (3 * 86400 + 4 * 3600 + 59, "3d 4h"),
])
def test_ages_in_two_units(seconds, text):
    assert output.age(seconds) == text


def test_tables_align_numbers_right_and_escape_control_characters():
    text = output.table([{"id": 7, "name": "a\x1b[31mred"}, {"id": 1234, "name": "b"}],
                        [("id", "ID"), ("name", "NAME")])
    assert text.splitlines() == ["ID    NAME", "   7  a\\x1b[31mred", "1234  b"]


def test_a_long_cell_is_cut_short():
    text = output.table([{"e": "x" * 100}], [("e", "E")], max_width=10)
    assert text.splitlines()[1] == "x" * 9 + "…"


def test_json_carries_times_as_iso_8601():
    moment = datetime(2026, 12, 1, 5, 0, tzinfo=UTC)
    assert output.to_json({"at": moment}) == '{\n  "at": "2026-12-01T05:00:00+00:00"\n}'


def test_top_sums_types_per_queue_with_rates_over_the_minute():
    rows = [
        {"queue": "crm", "job_type": "a", "due": 3, "scheduled": 1, "running": 2, "failed": 0,
         "oldest_due_seconds": 12.0, "done_last_minute": 120, "failed_last_minute": 6},
        {"queue": "crm", "job_type": "b", "due": 1, "scheduled": 0, "running": 0, "failed": 4,
         "oldest_due_seconds": 70.0, "done_last_minute": 0, "failed_last_minute": 0},
    ]
    [crm] = top.by_queue(rows)
    assert (crm["due"], crm["running"], crm["failed"], crm["done_rate"], crm["failed_rate"],
            crm["oldest_due"]) == (4, 2, 4, 2.0, 0.1, "1m 10s")
    screen = top.frame(top.View(rows, [{"slot": 0, "pid": 42, "connected_seconds": 5.0,
                                         "state": "active", "state_seconds": 0.5,
                                         "application_name": ""}]),
                       max_drains=4, now=datetime(2026, 12, 1, tzinfo=UTC))
    assert "drains running: 1 of 4 slots" in screen
    assert screen.splitlines()[-1].split() == ["0", "42", "5s", "in", "a", "statement", "0.5s"]


def test_top_shows_each_queues_state_the_running_jobs_and_what_a_drain_is_doing():
    rows = [{"queue": "crm", "job_type": "a", "due": 3, "scheduled": 0, "running": 1,
             "failed": 0, "oldest_due_seconds": 1.0, "done_last_minute": 0,
             "failed_last_minute": 0}]
    states = [{"queue": "crm", "paused_at": datetime(2026, 12, 1, tzinfo=UTC),
               "max_running": 3, "rate": "10/s"},
              {"queue": "partner", "paused_at": None, "max_running": None, "rate": "5/min"}]
    running = [{"id": 7, "job_type": "export", "queue": "crm", "attempts": 2,
                "running_seconds": 125.0, "progress": '{"fraction": 0.4, "message": "rows"}',
                "cancel_requested": True}]
    slots = [{"slot": 1, "pid": 9, "connected_seconds": 60.0, "state": "idle",
              "state_seconds": 3.0, "application_name": "pgdrain"}]
    screen = top.frame(top.View(rows, slots, states, running), max_drains=4,
                       now=datetime(2026, 12, 1, tzinfo=UTC), where="app@db:5432/app (URL)")
    lines = screen.splitlines()
    assert lines[1] == "database app@db:5432/app (URL)"
    crm = next(line for line in lines if line.startswith("crm "))
    assert "PAUSED, cap 3, rate 10/s" in crm
    assert any(line.startswith("partner") and "rate 5/min" in line for line in lines)
    job = next(line for line in lines if line.split()[:1] == ["7"])
    assert job.split()[:6] == ["7", "export", "crm", "2", "2m", "5s"]
    assert job.endswith("cancel asked; 40% rows")
    assert lines[-1].endswith("between statements 3s")
    narrow = top.frame(top.View(rows, slots, states, running), max_drains=4,
                       now=datetime(2026, 12, 1, tzinfo=UTC), width=30)
    assert max(len(line) for line in narrow.splitlines()) <= 30


def test_top_shows_an_outage_with_since_when_and_why():
    since = datetime(2026, 12, 1, 5, 0, 0, tzinfo=UTC)
    screen = top.outage(since=since, error="DatabaseUnavailable: network error",
                        now=datetime(2026, 12, 1, 5, 0, 42, tzinfo=UTC))
    assert "DATABASE UNREACHABLE for 42s (since 05:00:00 UTC): DatabaseUnavailable: network " \
           "error" in screen
    assert "connecting again at every refresh" in screen


def test_a_record_keeps_a_tracebacks_lines_and_escapes_the_rest():
    text = output.record({"id": 7, "last_error": "boom\nTraceback: line 2\x1b[2J"})
    assert text.splitlines() == ["id          7", "last_error  boom",
                                 "            Traceback: line 2\\x1b[2J"]


@pytest.mark.parametrize(("text", "shown"), [
    ("plain name", "plain name"), ("ünï cödé 名前", "ünï cödé 名前"),
    ("a\x1b[2Jb", "a\\x1b[2Jb"), ("ok\rEVIL", "ok\\rEVIL"), ("ding\x07", "ding\\x07"),
    ("csi\x9b31m", "csi\\x9b31m"), ("del\x7f", "del\\x7f"),
    # Format and separator characters: U+202E shows what follows reversed.
    ("evil\u202etxt.exe", "evil\\u202etxt.exe"), ("a\u2028b", "a\\u2028b"),
    ("zero\u200bwidth", "zero\\u200bwidth"), ("tag\U000e0041", "tag\\U000e0041"),
    ("lone\udcff", "lone\\udcff"),  # an argument that was not UTF-8: printing it would fail
])
def test_every_printed_value_is_escaped_by_one_function(text, shown):
    assert output.escape(text) == output.cell(text) == shown
    assert output.quoted(text) == f"'{shown}'"


def test_json_escapes_what_a_terminal_acts_on_and_stays_the_same_json():
    import json

    value = {"queue": "\x1b[2J\x9b\x7f\u202e\u2028\U000e0041 ünï", "n": [1, "a\nb"]}
    text = output.to_json(value)
    assert json.loads(text) == value
    assert text.isascii() is False and "ünï" in text  # readable names stay readable
    assert all(c == "\n" or c.isprintable() for c in text), text
    assert "\\u202e" in text and "\\u009b" in text and "\\u007f" in text
    assert output.escape_json('{"a": "\u202e"}') == '{"a": "\\u202e"}'


def test_a_bad_argument_is_quoted_escaped():
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        arguments.name("a\x1b[2Jb")
    assert str(caught.value).endswith("not 'a\\x1b[2Jb'")


@pytest.mark.parametrize("raw", ["", "x" * 64, "é" * 32, "role\nname"])
def test_a_role_name_postgresql_would_not_keep_is_refused(raw):
    with pytest.raises(argparse.ArgumentTypeError, match="a role name of 1 to 63 bytes"):
        arguments.role(raw)


@pytest.mark.parametrize("raw", ["pgdrain_app", "x" * 63, 'odd "name" with spaces'])
def test_any_role_name_of_up_to_63_bytes_is_taken_as_given(raw):
    assert arguments.role(raw) == raw
