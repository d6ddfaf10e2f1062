"""pgdrain.testing's pure rules: an attempt's outcome in a test's words, and which schedules
advance() makes due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import pgdrain
from pgdrain.cron import parse
from pgdrain.registry import Schedule
from pgdrain.testing import outcome_of, schedule_rewinds

NOON = datetime(2026, 3, 2, 12, 30, tzinfo=UTC)
HOURLY = Schedule("hourly", parse("0 * * * *", None), "report", {}, {})


@pytest.mark.parametrize(("count", "error", "status", "outcome"), [
    ("done", None, "done", "done"),
    ("done", None, None, "done"),
    ("retried", ValueError("x"), "pending", "retried"),
    ("retried", ValueError("x"), "cancelled", "cancelled"),
    ("failed", ValueError("x"), "failed", "failed"),
    ("failed", None, "cancelled", "cancelled"),
    ("snoozed", pgdrain.Snooze(10), "pending", "snoozed"),
    ("snoozed", pgdrain.Continue(), "pending", "continued"),
    ("snoozed", None, "pending", "continued"),
    ("snoozed", pgdrain.WaitFor("paid", timeout=60), "waiting", "waiting"),
    ("snoozed", pgdrain.WaitFor("paid", timeout=60), "pending", "waiting"),
    ("released", None, "pending", "released"),
    ("stale", None, "pending", "stale"),
])
def test_an_attempt_is_named_by_its_count_error_and_status(count, error, status, outcome):
    assert outcome_of(count, error, status) == outcome


def test_a_schedule_becomes_due_when_its_next_tick_comes_within_the_advance():
    last = {"hourly": NOON.replace(minute=0)}  # took 12:00; now 12:30, next 13:00
    assert schedule_rewinds([HOURLY], last, NOON, 29 * 60) == []
    assert schedule_rewinds([HOURLY], last, NOON, 30 * 60) == [
        ("hourly", NOON.replace(minute=0) - timedelta(microseconds=1))]
    # Past several ticks: one run, as the catch-up rule runs a missed tick once.
    assert len(schedule_rewinds([HOURLY], last, NOON, 10 * 3600)) == 1


def test_a_schedule_due_already_or_never_seen_is_left_alone():
    due = {"hourly": NOON - timedelta(hours=2)}
    assert schedule_rewinds([HOURLY], due, NOON, 3600) == []  # the next drain takes it
    assert schedule_rewinds([HOURLY], {}, NOON, 3600) == []  # the first drain records it
