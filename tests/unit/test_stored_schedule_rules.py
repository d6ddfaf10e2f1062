"""Schedules made at run time: the pure decisions (a new or re-timed entry's first tick, the
tick a due entry takes after an outage, a resumed entry's next tick) and the checks made before
anything is written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import pgdrain
from pgdrain.cron import parse
from pgdrain.stored_schedules import (
    FIRST_SIGHT_SECONDS,
    checked,
    first_tick,
    resume_tick,
    schedule_name,
    tick_to_take,
)


def at(hour, minute=0, second=0, day=4):
    return datetime(2026, 12, day, hour, minute, second, tzinfo=UTC)


def test_a_new_entry_runs_a_tick_at_most_first_sight_seconds_old():
    hourly = parse("0 * * * *")
    assert first_tick(hourly, at(10, 0, 30)) == at(10)
    assert first_tick(hourly, at(10) + timedelta(seconds=FIRST_SIGHT_SECONDS)) == at(10)
    assert first_tick(hourly, at(10, 1, 1)) == at(11)
    assert first_tick(hourly, at(10, 30)) == at(11)


def test_after_an_outage_only_the_latest_tick_is_taken_and_the_next_is_after_now():
    hourly = parse("0 * * * *")
    assert tick_to_take(hourly, at(3), at(10, 30)) == (at(10), at(11))
    assert tick_to_take(hourly, at(10), at(10, 0, 5)) == (at(10), at(11))


def test_a_tick_earlier_than_the_one_waited_for_is_never_taken():
    # The cron's latest tick before now lies before the next tick read (a zone's clock moved):
    # the entry takes the tick it waited for, never an earlier one.
    daily = parse("0 9 * * *")
    assert tick_to_take(daily, at(9, day=5), at(9, 0, 1, day=5))[0] == at(9, day=5)


def test_a_resumed_entry_waits_for_the_next_tick_missed_ones_are_not_run():
    assert resume_tick(parse("*/15 * * * *"), at(10, 20)) == at(10, 30)
    assert resume_tick(parse("0 9 * * *", "Europe/Paris"), at(10, 20)) == at(8, day=5)


@pytest.mark.parametrize(("name", "ok"), [
    ("report:customer-42", True), ("a", True), ("x" * 200, True), ("é ü/ß", True),
    ("", False), ("   ", False), (" x", False), ("x ", False), ("x" * 201, False),
    ("a\tb", False), ("a\x00b", False), (42, False), (None, False),
])
def test_names_are_1_to_200_printable_characters(name, ok):
    if ok:
        assert schedule_name(name) == name
    else:
        with pytest.raises(pgdrain.InvalidSchedule) as refused:
            schedule_name(name)
        assert refused.value.field == "name"


def test_everything_is_checked_before_a_write():
    name, cron, job_type, payload, options = checked(
        "r", "0 9 * * mon-fri", "report", {"c": 1}, "Europe/Paris", {"queue": "reports"})
    assert (name, cron.expression, cron.tz, job_type, payload, options) == (
        "r", "0 9 * * mon-fri", "Europe/Paris", "report", '{"c":1}', {"queue": "reports"})
    with pytest.raises(pgdrain.InvalidSchedule, match="never fires") as refused:
        checked("r", "0 0 30 2 *", "report", None, None, {})
    assert refused.value.field == "cron"
    with pytest.raises(pgdrain.InvalidSchedule, match="run_at") as refused:
        checked("r", "* * * * *", "report", None, None, {"run_at": at(9)})
    assert refused.value.field == "run_at"


def test_schedule_tells_a_declared_entry_from_a_stored_one_by_its_first_argument():
    registry = pgdrain.Registry()
    declared = pgdrain.schedule("0 * * * *", "report", {"a": 1}, name="h", registry=registry)
    assert isinstance(declared, pgdrain.Schedule) and registry.schedules() == [declared]
    keywords = pgdrain.schedule(cron="0 * * * *", job_type="report", name="k",
                                registry=registry)
    assert keywords.name == "k"
    with pytest.raises(TypeError, match="registry="):
        pgdrain.schedule(object(), "0 * * * *", "report", name="x", registry=registry)
    with pytest.raises(TypeError, match="both"):
        pgdrain.schedule(object(), "0 * * * *", "report", name="x", conn=object())
    with pytest.raises(TypeError, match="twice"):
        pgdrain.schedule("0 * * * *", "report", job_type="report")
    with pytest.raises(TypeError, match="needs a cron"):
        pgdrain.schedule(object(), "0 * * * *", name="x")


def test_an_invalid_stored_entry_is_refused_before_the_connection_is_used():
    class Untouchable:
        def run(self, *args, **kwargs):
            raise AssertionError("no statement for an invalid entry")

    with pytest.raises(pgdrain.InvalidSchedule):
        pgdrain.schedule(Untouchable(), "0 * * * *", "report", name="x", colour="red")


def test_a_pass_with_nothing_declared_and_nothing_due_runs_no_statement():
    from pgdrain.scheduler import enqueue_due

    class Untouchable:
        def run(self, *args, **kwargs):
            raise AssertionError("no statement when no schedule is declared nor due")

    assert enqueue_due(Untouchable(), pgdrain.Registry(), stored_due=False) == 0
