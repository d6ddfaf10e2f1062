"""Cron schedules: the syntax, the errors' words, and when schedules fire (leap days, DST), checked
against a minute-by-minute reference. Pure: no database, no clock."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from pgdrain.cron import CronError, parse
from pgdrain.errors import PgdrainError

NEW_YORK, LONDON = "America/New_York", "Europe/London"


def at(*parts):
    return datetime(*parts, tzinfo=UTC)


def firings(cron, start, count):
    found = []
    for _ in range(count):
        start = cron.next_after(start)
        found.append(start)
    return found


@pytest.mark.parametrize(("field", "minutes"), [
    ("*", set(range(60))),
    ("7", {7}),
    ("1-3", {1, 2, 3}),
    ("*/15", {0, 15, 30, 45}),
    ("10-20/5", {10, 15, 20}),
    ("10-21/5", {10, 15, 20}),
    ("50/3", {50, 53, 56, 59}),
    ("1,2,5-6,*/30", {0, 1, 2, 5, 6, 30}),
    ("59,0", {0, 59}),
    ("*/100", {0}),
])
def test_each_field_form(field, minutes):
    assert parse(f"{field} * * * *").minutes == minutes


def test_the_fields_in_order_and_whitespace_between():
    cron = parse("  5\t4   3-4 2\n1  ")
    assert (cron.expression, cron.tz) == ("5\t4   3-4 2\n1", "UTC")
    assert (cron.minutes, cron.hours, cron.days, cron.months, cron.weekdays) == (
        {5}, {4}, {3, 4}, {2}, {1})
    assert (cron.day_restricted, cron.weekday_restricted) == (True, True)


def test_month_and_day_names_in_any_case():
    cron = parse("0 0 * JAN-mar,Dec mon-FRI,Sun")
    assert cron.months == {1, 2, 3, 12}
    assert cron.weekdays == {0, 1, 2, 3, 4, 5}
    assert parse("0 0 * feb/3 *").months == {2, 5, 8, 11}
    assert parse("0 0 * * sat").weekdays == {6}


def test_seven_is_sunday():
    assert parse("0 0 * * 7").weekdays == {0}
    assert parse("0 0 * * 5-7").weekdays == {0, 5, 6}
    assert parse("0 0 * * */2").weekdays == {0, 2, 4, 6}
    sunday = parse("0 12 * * 7").next_after(at(2024, 6, 5))
    assert sunday == at(2024, 6, 9, 12) and sunday.isoweekday() == 7


@pytest.mark.parametrize(("macro", "same_as"), [
    ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *"), ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"), (" @DAILY ", "0 0 * * *"),
])
def test_macros(macro, same_as):
    cron, expanded = parse(macro), parse(same_as)
    assert cron.expression == macro.strip()
    assert cron.next_after(at(2024, 5, 17, 13, 7)) == expanded.next_after(at(2024, 5, 17, 13, 7))
    fields = ("minutes", "hours", "days", "months", "weekdays", "day_restricted",
              "weekday_restricted")
    assert all(getattr(cron, f) == getattr(expanded, f) for f in fields)


def test_both_day_fields_restricted_fire_on_either():
    days = firings(parse("0 0 13 * 5"), at(2024, 9, 1), 8)
    assert [d.strftime("%a %d") for d in days] == [
        "Fri 06", "Fri 13", "Fri 20", "Fri 27", "Fri 04", "Fri 11", "Sun 13", "Fri 18"]


def test_a_star_day_field_leaves_the_other_alone():
    assert {d.day for d in firings(parse("0 0 13 * *"), at(2024, 1, 1), 5)} == {13}
    assert {d.isoweekday() for d in firings(parse("0 0 * * 5"), at(2024, 1, 1), 5)} == {5}


def test_a_field_starting_with_star_is_unrestricted_so_both_must_match():
    # As cronie: '*/2' is unrestricted, so a 13th fires only on a Sunday, Tuesday, Thursday or
    # Saturday.
    cron = parse("0 0 13 * */2")
    assert (cron.day_restricted, cron.weekday_restricted) == (True, False)
    days = firings(cron, at(2024, 1, 1), 4)
    assert all(d.day == 13 and d.isoweekday() % 7 in {0, 2, 4, 6} for d in days)
    assert days == [at(2024, 1, 13), at(2024, 2, 13), at(2024, 4, 13), at(2024, 6, 13)]
    assert parse("0 0 */2 * 5").day_restricted is False


@pytest.mark.parametrize(("expression", "message"), [
    ("61 * * * *", "cron '61 * * * *': minute 61 is out of range 0-59"),
    ("* * *", "cron '* * *': needs 5 fields (minute hour day-of-month month day-of-week), got 3"),
    ("", "cron '': needs 5 fields (minute hour day-of-month month day-of-week), got 0"),
    ("* * * * * *", "needs 5 fields (minute hour day-of-month month day-of-week), got 6"),
    ("*/0 * * * *", "cron '*/0 * * * *': minute step 0 must be at least 1"),
    ("0 24 * * *", "hour 24 is out of range 0-23"),
    ("0 0 0 * *", "day-of-month 0 is out of range 1-31"),
    ("0 0 32 * *", "day-of-month 32 is out of range 1-31"),
    ("0 0 * 13 *", "month 13 is out of range 1-12"),
    ("0 0 * * 8", "day-of-week 8 is out of range 0-7"),
    ("30-10 * * * *", "cron '30-10 * * * *': minute range 30-10 runs backwards"),
    ("0 0 * * fri-sun", "day-of-week range fri-sun runs backwards"),
    ("1,,2 * * * *", "cron '1,,2 * * * *': minute '1,,2' has an empty item"),
    ("1, * * * *", "minute '1,' has an empty item"),
    ("x * * * *", "minute value 'x' is not a number"),
    ("jan * * * *", "minute value 'jan' is not a number"),
    ("0 0 * june *", "month value 'june' is not a number or a name"),
    ("٣ * * * *", "minute value '٣' is not a number"),
    ("-5 * * * *", "minute value '' is not a number"),
    ("1- * * * *", "minute value '' is not a number"),
    ("*/x * * * *", "minute step 'x' is not a number"),
    ("*/ * * * *", "minute step '' is not a number"),
    ("1-2-3 * * * *", "minute value '2-3' is not a number"),
    ("@reboot", "cron '@reboot': @reboot is not supported"),
    ("@fortnightly", "cron '@fortnightly': unknown macro, use one of @yearly, @annually"),
    ("0 0 30 2 *", "cron '0 0 30 2 *': never fires: no month it allows has a day 30"
                   " (the longest has 29 days)"),
    ("0 0 31 4 *", "cron '0 0 31 4 *': never fires: no month it allows has a day 31"),
    ("0 0 31 4,jun,9,11 *", "never fires"),
    ("0 0 30,31 feb */2", "never fires"),
])
def test_errors_say_what_is_wrong(expression, message):
    with pytest.raises(CronError, match=re.escape(message)):
        parse(expression)


@pytest.mark.parametrize("tz", ["Mars/Base", "", "America", "../etc/passwd", "/etc/localtime",
                                "utc"])
def test_an_unknown_zone(tz):
    with pytest.raises(CronError, match=re.escape(f"tz '{tz}': unknown time zone")):
        parse("* * * * *", tz)


def test_cron_errors_are_value_errors_and_pgdrain_errors():
    assert issubclass(CronError, ValueError) and issubclass(CronError, PgdrainError)


@pytest.mark.parametrize("expression", ["0 0 29 2 *", "0 0 31 * *", "0 0 30 2 1",
                                        "0 0 31 4 1", "0 0 31 1-4 *"])
def test_days_that_some_month_has_or_a_weekday_can_fire(expression):
    parse(expression).next_after(at(2024, 1, 1))


@pytest.mark.parametrize(("expression", "start", "expected"), [
    ("0 0 1 * *", at(2024, 1, 31, 23, 59), at(2024, 2, 1)),
    ("59 23 31 12 *", at(2024, 12, 31, 23, 59), at(2025, 12, 31, 23, 59)),
    ("0 0 1 1 *", at(2024, 12, 31, 23, 59, 59, 999999), at(2025, 1, 1)),
    ("0 0 31 * *", at(2024, 4, 15), at(2024, 5, 31)),
    ("0 0 29 2 *", at(2024, 2, 28, 12), at(2024, 2, 29)),
    ("0 0 29 2 *", at(2024, 2, 29), at(2028, 2, 29)),
    ("0 0 29 2 *", at(2096, 3, 1), at(2104, 2, 29)),  # 2100 is no leap year
    ("0 0 29 2 mon", at(2024, 2, 27), at(2024, 2, 29)),  # OR: the 29th beats the Monday
    ("*/15 9-17 * * mon-fri", at(2024, 6, 7, 17, 45), at(2024, 6, 10, 9)),
    ("0 */6 * * *", at(2024, 6, 7, 18), at(2024, 6, 8)),
])
def test_next_after(expression, start, expected):
    assert parse(expression).next_after(start) == expected


def test_next_after_is_strictly_after_and_on_whole_minutes():
    every = parse("* * * * *")
    assert every.next_after(at(2024, 1, 1, 10)) == at(2024, 1, 1, 10, 1)
    assert every.next_after(at(2024, 1, 1, 10, 0, 30)) == at(2024, 1, 1, 10, 1)
    assert every.next_after(at(2024, 1, 1, 10, 0, 59, 999999)) == at(2024, 1, 1, 10, 1)
    assert parse("0 10 * * *").next_after(at(2024, 1, 1, 10)) == at(2024, 1, 2, 10)


def test_any_aware_moment_and_a_utc_answer():
    india = datetime(2024, 1, 1, 15, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    found = parse("0 10 * * *").next_after(india)  # 10:00 UTC is exactly that moment
    assert found == at(2024, 1, 2, 10) and found.tzinfo is UTC
    assert parse("0 10 * * *").latest_at_or_before(india) == at(2024, 1, 1, 10)


def test_a_naive_moment_is_refused():
    with pytest.raises(ValueError, match="has no time zone"):
        parse("* * * * *").next_after(datetime(2024, 1, 1))


@pytest.mark.parametrize(("expression", "moment", "expected"), [
    ("0 10 * * *", at(2024, 1, 1, 10), at(2024, 1, 1, 10)),  # a firing itself
    ("0 10 * * *", at(2024, 1, 1, 9, 59, 59), at(2023, 12, 31, 10)),
    ("* * * * *", at(2024, 1, 1, 10, 0, 59), at(2024, 1, 1, 10)),
    ("0 0 29 2 *", at(2027, 6, 1), at(2024, 2, 29)),
    ("0 0 29 2 *", at(2104, 2, 28), at(2096, 2, 29)),
    ("0 0 1 1 *", at(2024, 1, 1), at(2024, 1, 1)),
    ("0 0 13 * 5", at(2024, 10, 16), at(2024, 10, 13)),
])
def test_latest_at_or_before(expression, moment, expected):
    assert parse(expression).latest_at_or_before(moment) == expected


def test_latest_is_none_before_the_calendar_starts():
    assert parse("0 0 2 1 *").latest_at_or_before(at(1, 1, 1, 12)) is None


def test_a_time_zone_fires_on_its_wall_clock_and_answers_in_utc():
    cron = parse("0 9 * * *", LONDON)
    summer, winter = cron.next_after(at(2024, 7, 1)), cron.next_after(at(2024, 1, 1))
    assert (summer, winter) == (at(2024, 7, 1, 8), at(2024, 1, 1, 9))
    assert summer.tzinfo is UTC and winter.tzinfo is UTC
    assert cron.tz == LONDON and parse("0 9 * * *").tz == "UTC"


def test_the_spring_forward_gap_is_skipped():
    # New York, 2024-03-10: 02:00 EST becomes 03:00 EDT, so 02:30 does not happen that day.
    ny = parse("30 2 * * *", NEW_YORK)
    assert firings(ny, at(2024, 3, 9, 12), 2) == [at(2024, 3, 11, 6, 30), at(2024, 3, 12, 6, 30)]
    assert ny.latest_at_or_before(at(2024, 3, 11, 6)) == at(2024, 3, 9, 7, 30)
    # London, 2024-03-31: 01:00 GMT becomes 02:00 BST.
    assert parse("30 1 * * *", LONDON).next_after(at(2024, 3, 30, 12)) == at(2024, 4, 1, 0, 30)
    every = parse("* * * * *", NEW_YORK)
    assert every.next_after(at(2024, 3, 10, 6, 59)) == at(2024, 3, 10, 7)  # 01:59 -> 03:00


def test_the_fall_back_hour_fires_once_at_its_first_pass():
    # New York, 2024-11-03: 01:30 EDT (05:30 UTC), then 01:30 again in EST (06:30 UTC).
    ny = parse("30 1 * * *", NEW_YORK)
    assert firings(ny, at(2024, 11, 2, 12), 2) == [at(2024, 11, 3, 5, 30), at(2024, 11, 4, 6, 30)]
    assert ny.next_after(at(2024, 11, 3, 6)) == at(2024, 11, 4, 6, 30)  # inside the second pass
    assert ny.latest_at_or_before(at(2024, 11, 3, 6, 45)) == at(2024, 11, 3, 5, 30)
    # In the second pass, a later minute of the first pass is the latest firing.
    assert parse("50 1 * * *", NEW_YORK).latest_at_or_before(at(2024, 11, 3, 6, 10)) == at(
        2024, 11, 3, 5, 50)
    # London, 2024-10-27: 02:00 BST becomes 01:00 GMT.
    london = parse("30 1 * * *", LONDON)
    assert firings(london, at(2024, 10, 26, 12), 2) == [at(2024, 10, 27, 0, 30),
                                                        at(2024, 10, 28, 1, 30)]
    hourly = firings(parse("0 * * * *", NEW_YORK), at(2024, 11, 3, 4, 30), 3)
    assert hourly == [at(2024, 11, 3, 5), at(2024, 11, 3, 7), at(2024, 11, 3, 8)]


def test_a_schedule_that_only_falls_in_gaps_never_fires():
    # The second Sunday of March at 02:30 is inside New York's gap since 2007; before that, DST
    # began in April.
    cron = parse("30 2 8-14 3 */7", NEW_YORK)
    with pytest.raises(CronError, match="no firing within 400 years"):
        cron.next_after(at(2024, 1, 1))
    assert cron.latest_at_or_before(at(2024, 1, 1)) == at(2006, 3, 12, 7, 30)


def test_common_schedules_answer_many_calls():
    # No timing assertion (project rule): a pathological search would make this loop crawl.
    for expression in ["* * * * *", "*/5 * * * *", "0 * * * *", "0 0 * * *", "0 9 * * mon-fri",
                       "0 0 1 * *", "0 0 29 2 *", "0 0 13 * 5", "@yearly"]:
        for tz in (None, NEW_YORK):
            cron, moment = parse(expression, tz), at(2024, 1, 1)
            for _ in range(250):
                moment = cron.next_after(moment)
            assert cron.latest_at_or_before(moment) == moment


def _fires_at(cron, instant):
    """The reference: does this UTC minute fire? Read on the wall clock, first pass only."""
    local = instant.astimezone(ZoneInfo(cron.tz))
    if local.fold:
        return False
    by_day = local.day in cron.days
    by_weekday = local.isoweekday() % 7 in cron.weekdays
    either = cron.day_restricted and cron.weekday_restricted
    day_ok = (by_day or by_weekday) if either else (by_day and by_weekday)
    return (local.minute in cron.minutes and local.hour in cron.hours
            and local.month in cron.months and day_ok)


def _reference(cron, first, step, minutes):
    """The first firing from `first` on, a minute at a time in direction `step`, or None."""
    for i in range(minutes):
        instant = first + timedelta(minutes=step * i)
        if _fires_at(cron, instant):
            return instant
    return None


def _random_field(rng, low, high):
    start = rng.randint(low, high)
    return rng.choice([
        "*", str(start), f"*/{rng.randint(1, 7)}", f"{start}-{rng.randint(start, high)}",
        f"{start}/{rng.randint(1, 5)}", f"{rng.randint(low, high)},{rng.randint(low, high)}",
    ])


def _random_cron(rng, tz):
    # Hours lean to those of the DST changes (01:00-03:00) and the other fields to '*', so that
    # most cases fire within the reference's window, many of them in a gap or a fold.
    while True:
        fields = [_random_field(rng, 0, 59),
                  rng.choice(["1", "2", "1-3", "*/2", _random_field(rng, 0, 23)]),
                  rng.choice(["*", "*", _random_field(rng, 1, 31)]),
                  rng.choice(["*", "*", "*", _random_field(rng, 1, 12)]),
                  rng.choice(["*", "*", _random_field(rng, 0, 7)])]
        try:
            return parse(" ".join(fields), tz)
        except CronError:  # never fires
            continue


def test_searches_agree_with_a_minute_by_minute_reference():
    rng = random.Random(20240310)
    # Each zone's DST changes in 2024 (gap, then fold), and a leap day.
    anchors = [(NEW_YORK, at(2024, 3, 10, 7)), (NEW_YORK, at(2024, 11, 3, 6)),
               (LONDON, at(2024, 3, 31, 1)), (LONDON, at(2024, 10, 27, 1)),
               ("UTC", at(2024, 2, 29))]
    window = 2 * 24 * 60
    for _ in range(150):
        tz, anchor = rng.choice(anchors)
        cron = _random_cron(rng, tz)
        spread = rng.choice([90, 1500])  # often inside the changing hour itself
        start = anchor + timedelta(minutes=rng.randint(-spread, spread),
                                   seconds=rng.choice([0, 17]))
        case = (cron.expression, cron.tz, start)
        floor = start.replace(second=0)
        after = _reference(cron, floor + timedelta(minutes=1), 1, window)
        found = cron.next_after(start)
        assert found == after if after else found > floor + timedelta(minutes=window), case
        before = _reference(cron, floor, -1, window)
        latest = cron.latest_at_or_before(start)
        assert latest == before if before else (
            latest is None or latest <= floor - timedelta(minutes=window)), case
