"""Cron schedules: five-field expressions parsed into sets, and the instants they fire at.

Pure: no I/O, no clock; the caller passes the moment. Syntax is Vixie cron's (as cronie reads
it): ``minute hour day-of-month month day-of-week``, each field ``*``, ``n``, ``a-b``, ``*/s``,
``a-b/s`` or ``n/s`` (n to the field's end), or a comma list of those; month names jan-dec and
day names sun-sat in any case; 0 and 7 are both Sunday; macros ``@yearly`` (``@annually``),
``@monthly``, ``@weekly``, ``@daily`` (``@midnight``) and ``@hourly``.

Days, as cronie: a day field that starts with ``*`` (``*``, but also ``*/2``) is unrestricted.
When both day fields are restricted a day fires if EITHER matches (``0 0 13 * 5``: the 13th and
every Friday); otherwise it must match both, so a plain ``*`` leaves the other field alone.

Schedules run on the wall clock of their time zone, and two DST rules follow from that:
a wall-clock time that does not exist (the spring-forward gap) is skipped, that day has no such
firing; a wall-clock time that happens twice (the fall-back hour) fires once, at its first
occurrence. Results are aware datetimes in UTC, on whole minutes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import MAXYEAR, MINYEAR, UTC, date, datetime, timedelta, tzinfo

from .errors import PgdrainError

SEARCH_YEARS = 400
"""How far either search looks (``0 0 29 2 *`` fires every 4 to 8 years). The calendar repeats
every 400 years, so a schedule without a firing in that span has every one in a DST gap."""

_FIELD_NAMES = "minute hour day-of-month month day-of-week"
_MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
           "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
           "@hourly": "0 * * * *"}
_LONGEST_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_ZERO = timedelta(0)


class CronError(PgdrainError, ValueError):
    """A cron expression or time zone that cannot be used; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[0] is worth `low`


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_FIELDS = (
    _Field("minute", 0, 59), _Field("hour", 0, 23), _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, _MONTHS), _Field("day-of-week", 0, 7, _WEEKDAYS),
)


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed schedule (build it with ``parse``). ``weekdays`` counts 0=Sunday to 6.

    ``day_restricted`` and ``weekday_restricted`` say whether that field did not start with
    ``*``: they pick between the OR and the AND rule for days (see the module docstring).
    """

    expression: str
    tz: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    day_restricted: bool
    weekday_restricted: bool

    def next_after(self, moment: datetime) -> datetime:
        """First firing strictly after ``moment`` (aware), in UTC.

        Raises CronError when none comes within ``SEARCH_YEARS`` (or before year 10000).
        """
        zone, local, instant = self._locate(moment)
        found = self._search(zone, local.replace(tzinfo=None), 1, lambda t: t > instant)
        if found is None:
            raise CronError(f"cron '{self.expression}': no firing within {SEARCH_YEARS} years"
                            f" after {moment.isoformat()}")
        return found

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        """Last firing at or before ``moment`` (aware), in UTC; None if none within
        ``SEARCH_YEARS`` (or after year 1)."""
        zone, local, instant = self._locate(moment)
        # In the repeated hour's second pass (fold=1), later wall-clock minutes of the first
        # pass have fired already: start that much later on the wall clock.
        shift = (local.replace(fold=0).utcoffset() or _ZERO) - (local.utcoffset() or _ZERO)
        begin = local.replace(tzinfo=None) + shift
        return self._search(zone, begin, -1, lambda t: t <= instant)

    def _locate(self, moment: datetime) -> tuple[tzinfo, datetime, datetime]:
        """The zone, ``moment`` on its wall clock, and ``moment`` in UTC."""
        if moment.utcoffset() is None:
            raise ValueError(f"cron '{self.expression}': moment {moment} has no time zone")
        zone = _zone(self.tz)
        return zone, moment.astimezone(zone), moment.astimezone(UTC)

    def _search(self, zone: tzinfo, begin: datetime, step: int,
                accept: Callable[[datetime], bool]) -> datetime | None:
        # Wall-clock order is UTC order here (fold=0 only, gaps skipped), so the first
        # accepted candidate in the direction of `step` is the answer.
        for day in self._dates(begin.date(), step):
            first = begin if day == begin.date() else None
            for wall in self._times(day, step, first):
                instant = _to_utc(wall, zone)
                if instant is not None and accept(instant):
                    return instant
        return None

    def _dates(self, start: date, step: int) -> Iterator[date]:
        """Days that fire, from ``start`` on in the direction of ``step`` (1 or -1)."""
        months = sorted(self.months, reverse=step < 0)
        start_month = start.year * 12 + start.month
        for year in range(start.year, start.year + step * SEARCH_YEARS, step):
            if not MINYEAR <= year <= MAXYEAR:
                return
            for month in months:
                if (year * 12 + month - start_month) * step < 0:
                    continue
                last = _days_in(year, month)
                for number in range(1, last + 1) if step > 0 else range(last, 0, -1):
                    day = date(year, month, number)
                    if (day - start).days * step >= 0 and self._fires_on(day):
                        yield day

    def _times(self, day: date, step: int, first: datetime | None) -> Iterator[datetime]:
        """Wall-clock minutes that fire on ``day``, from ``first``'s minute on if given."""
        for hour in sorted(self.hours, reverse=step < 0):
            if first is not None and (hour - first.hour) * step < 0:
                continue
            for minute in sorted(self.minutes, reverse=step < 0):
                if first is not None and hour == first.hour and (minute - first.minute) * step < 0:
                    continue
                yield datetime(day.year, day.month, day.day, hour, minute)

    def _fires_on(self, day: date) -> bool:
        by_day = day.day in self.days
        by_weekday = day.isoweekday() % 7 in self.weekdays
        if self.day_restricted and self.weekday_restricted:
            return by_day or by_weekday
        return by_day and by_weekday


def parse(expression: str, tz: str | None = None) -> Cron:
    """The schedule ``expression`` in time zone ``tz`` (an IANA name; None means UTC)."""
    text = expression.strip()
    fields = _expand_macro(text).split()
    if len(fields) != 5:
        raise CronError(f"cron '{text}': needs 5 fields ({_FIELD_NAMES}), got {len(fields)}")
    zone_name = "UTC" if tz is None else tz
    _zone(zone_name)
    minutes, hours, days, months, weekdays = (
        _parse_field(spec, field, text) for spec, field in zip(_FIELDS, fields, strict=True))
    cron = Cron(text, zone_name, minutes, hours, days, months, frozenset(d % 7 for d in weekdays),
                day_restricted=not fields[2].startswith("*"),
                weekday_restricted=not fields[4].startswith("*"))
    _check_fires(cron)
    return cron


def _expand_macro(text: str) -> str:
    if not text.startswith("@"):
        return text
    if text.lower() == "@reboot":
        raise CronError(f"cron '{text}': @reboot is not supported: it fires when a cron daemon"
                        " starts, and there is none here")
    if text.lower() not in _MACROS:
        raise CronError(f"cron '{text}': unknown macro, use one of {', '.join(_MACROS)}")
    return _MACROS[text.lower()]


def _parse_field(spec: _Field, field: str, text: str) -> frozenset[int]:
    values: set[int] = set()
    for item in field.split(","):
        if not item:
            raise CronError(f"cron '{text}': {spec.name} '{field}' has an empty item")
        values.update(_parse_item(spec, item, text))
    return frozenset(values)


def _parse_item(spec: _Field, item: str, text: str) -> range:
    base, slash, step_text = item.partition("/")
    step = _number(spec, step_text, text, "step") if slash else 1
    if step < 1:
        raise CronError(f"cron '{text}': {spec.name} step {step} must be at least 1")
    if base == "*":
        return range(spec.low, spec.high + 1, step)
    if "-" in base:
        start_text, _, end_text = base.partition("-")
        start, end = _value(spec, start_text, text), _value(spec, end_text, text)
        if start > end:
            raise CronError(f"cron '{text}': {spec.name} range {base} runs backwards")
        return range(start, end + 1, step)
    start = _value(spec, base, text)
    return range(start, spec.high + 1 if slash else start + 1, step)


def _value(spec: _Field, word: str, text: str) -> int:
    lowered = word.lower()
    if lowered in spec.names:
        return spec.low + spec.names.index(lowered)
    value = _number(spec, word, text, "value")
    if not spec.low <= value <= spec.high:
        raise CronError(f"cron '{text}': {spec.name} {value} is out of range"
                        f" {spec.low}-{spec.high}")
    return value


def _number(spec: _Field, word: str, text: str, what: str) -> int:
    # isdigit alone accepts other scripts' digits ('٣'), which cron does not.
    if not (word.isascii() and word.isdigit()):
        named = " or a name" if spec.names and what == "value" else ""
        raise CronError(f"cron '{text}': {spec.name} {what} '{word}' is not a number{named}")
    return int(word)


def _check_fires(cron: Cron) -> None:
    """Refuse days that no allowed month has, unless weekdays fire on their own (OR rule)."""
    if cron.day_restricted and cron.weekday_restricted:
        return
    longest = max(_LONGEST_MONTH[month - 1] for month in cron.months)
    if min(cron.days) > longest:
        raise CronError(f"cron '{cron.expression}': never fires: no month it allows has a day"
                        f" {min(cron.days)} (the longest has {longest} days)")


def _zone(name: str) -> tzinfo:
    # UTC needs no tz database: a Lambda without tzdata still runs UTC schedules.
    if name == "UTC":
        return UTC
    try:
        from zoneinfo import ZoneInfo  # a few ms at import: only schedules with a zone pay

        return ZoneInfo(name)
    except (LookupError, ValueError, OSError) as exc:  # ZoneInfoNotFoundError is a KeyError
        raise CronError(f"tz '{name}': unknown time zone") from exc


def _to_utc(wall: datetime, zone: tzinfo) -> datetime | None:
    """``wall`` (first occurrence) in ``zone`` as a UTC instant; None if that time never
    happens there (a DST gap) or lies past the datetime range."""
    try:
        instant = wall.replace(tzinfo=zone).astimezone(UTC)
        if zone is not UTC and instant.astimezone(zone).replace(tzinfo=None) != wall:
            return None
    except OverflowError:
        return None
    return instant


def _days_in(year: int, month: int) -> int:
    """The days of ``month`` (calendar.monthrange without importing calendar and locale)."""
    following = date(year + 1, 1, 1) if month == 12 else date(year, month + 1, 1)
    return (following - date(year, month, 1)).days
