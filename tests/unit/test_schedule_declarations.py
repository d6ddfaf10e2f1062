"""Declaring periodic jobs: `cron=` on @pgdrain.job and pgdrain.schedule check everything at
import (a bad expression, zone, option or payload is a ConfigError naming the entry), and
which ticks are due is a pure decision (scheduler.due_ticks)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import pgdrain
from pgdrain.registry import Registry
from pgdrain.scheduler import FIRST_SIGHT_SECONDS, due_ticks


def noop(job):
    return None


def test_cron_on_the_decorator_declares_an_entry_named_after_the_type():
    registry = Registry()
    pgdrain.job("report", cron="0 * * * *", tz="Europe/Paris", registry=registry)(noop)
    [entry] = registry.schedules()
    assert (entry.name, entry.job_type, entry.payload, entry.queue) == ("report", "report", {},
                                                                        "default")
    assert (entry.cron.expression, entry.cron.tz) == ("0 * * * *", "Europe/Paris")


@pytest.mark.parametrize(("cron", "tz", "words"), [
    ("61 * * * *", None, "report: cron '61 * * * *': minute 61 is out of range 0-59"),
    ("* * *", None, "needs 5 fields"),
    ("0 0 30 2 *", None, "never fires"),
    ("@reboot", None, "@reboot"),
    ("0 * * * *", "Mars/Base", "tz 'Mars/Base': unknown time zone"),
    (7, None, "cron must be a string"),
])
def test_a_bad_schedule_fails_at_import_saying_what_is_wrong(cron, tz, words):
    registry = Registry()
    with pytest.raises(pgdrain.ConfigError, match=words.replace("*", r"\*")
                       .replace("(", r"\(").replace(")", r"\)")):
        pgdrain.job("report", cron=cron, tz=tz, registry=registry)(noop)
    assert registry.schedules() == [] and len(registry) == 0


def test_tz_without_cron_is_refused():
    with pytest.raises(pgdrain.ConfigError, match="give cron= too"):
        pgdrain.job("report", tz="UTC")


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"queue": ""}, "queue: must be a non-empty string"),
    ({"priority": 99999}, "priority: must be between"),
    ({"run_at": "2030-01-01T00:00:00Z"}, "a schedule takes queue, priority, max_attempts, "
                                         "ttl_seconds, tenant, tags, meta, not run_at"),
    ({"dedupe_key": "k"}, "not dedupe_key"),
])
def test_schedule_options_are_checked_at_import(kwargs, words):
    with pytest.raises(pgdrain.ConfigError, match=words):
        pgdrain.schedule("0 * * * *", "report", registry=Registry(), **kwargs)


def test_a_payload_that_is_not_a_json_object_is_refused():
    with pytest.raises(pgdrain.ConfigError, match="payload is a dict"):
        pgdrain.schedule("0 * * * *", "report", ["x"], registry=Registry())
    with pytest.raises(pgdrain.ConfigError, match="payload"):
        pgdrain.schedule("0 * * * *", "report", {"x": float("nan")}, registry=Registry())


def test_two_entries_with_one_name_are_refused_the_same_one_twice_is_not():
    registry = Registry()
    pgdrain.schedule("0 * * * *", "report", {"a": 1}, name="hourly", registry=registry)
    pgdrain.schedule("0 * * * *", "report", {"a": 1}, name="hourly", registry=registry)
    with pytest.raises(pgdrain.ConfigError, match="'hourly' is declared twice"):
        pgdrain.schedule("30 * * * *", "report", name="hourly", registry=registry)
    # Without a name, entries differ by expression and zone.
    pgdrain.schedule("0 9 * * mon", "report", registry=registry)
    pgdrain.schedule("0 9 * * mon", "report", tz="Asia/Tokyo", registry=registry)
    assert [e.name for e in registry.schedules()] == [
        "hourly", "report 0 9 * * mon", "report 0 9 * * mon Asia/Tokyo"]


NOW = datetime(2026, 12, 1, 10, 30, 20, tzinfo=UTC)


def entry(cron: str):
    return pgdrain.schedule(cron, "report", name=cron, registry=Registry())


def test_due_ticks_new_entries_run_only_a_recent_tick():
    minute, hourly = entry("* * * * *"), entry("0 * * * *")
    due = due_ticks([minute, hourly], {}, NOW)
    assert due == [(minute, datetime(2026, 12, 1, 10, 30, tzinfo=UTC), True),
                   (hourly, datetime(2026, 12, 1, 10, 0, tzinfo=UTC), False)]
    assert FIRST_SIGHT_SECONDS == 60


def test_due_ticks_after_an_outage_only_the_latest_tick():
    minute = entry("* * * * *")
    last = {minute.name: NOW - timedelta(hours=5)}
    assert due_ticks([minute], last, NOW) == [
        (minute, datetime(2026, 12, 1, 10, 30, tzinfo=UTC), True)]
    assert due_ticks([minute], {minute.name: datetime(2026, 12, 1, 10, 30, tzinfo=UTC)},
                     NOW) == []
