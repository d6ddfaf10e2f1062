"""What the command line accepts, as pure parsers: each returns the value or raises
``argparse.ArgumentTypeError`` with a message that says what is wrong (argparse prints it and
exits with status 2)."""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from ..errors import InvalidJobId
from ..waiting import timeout_problem
from .output import quoted

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")
_UNITS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_DURATION_SECONDS = 100 * 365 * 86400.0
"""A hundred years: longer than any job's history, and still a finite interval."""


def duration(raw: str) -> float:
    """``90s``, ``15m``, ``1h``, ``7d``, ``2w`` or plain seconds, as seconds."""
    match = _DURATION.fullmatch(raw.strip().lower())
    seconds = None
    if match and match.group(2) in _UNITS:
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds is None or not math.isfinite(seconds) or seconds > MAX_DURATION_SECONDS:
        raise argparse.ArgumentTypeError(
            f"a duration is a number with a unit s, m, h, d or w (90s, 15m, 1h, 7d), "
            f"at most 100 years, not {_shown(raw)}")
    return seconds


def positive_int(raw: str) -> int:
    """A whole number from 1 to a million (a row count, a batch)."""
    text = raw.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 7 and 1 <= int(text) <= 10**6):
        raise argparse.ArgumentTypeError(f"a whole number from 1 to 1000000, not {_shown(raw)}")
    return int(text)


def cap(raw: str) -> int | None:
    """A concurrency cap: a whole number from 1, or ``none``."""
    text = raw.strip().lower()
    if text == "none":
        return None
    if not (text.isascii() and text.isdigit() and len(text) <= 10 and 1 <= int(text) < 2**31):
        raise argparse.ArgumentTypeError(
            f"a cap is a whole number from 1 (to stop the queue, pause it) or none, not "
            f"{_shown(raw)}")
    return int(text)


def rate(raw: str) -> str | None:
    """A rate limit, ``N/period`` (``10/s``, ``100/min``, ``3/10s``), or ``none``."""
    from ..flow import RateError, parse_rate

    if raw.strip().lower() == "none":
        return None
    try:
        return str(parse_rate(raw))
    except RateError as exc:
        raise argparse.ArgumentTypeError(f"a rate is N/period or none: {exc}") from None


def interval(raw: str) -> float:
    """A refresh interval in seconds, from 0.1 to an hour."""
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not 0.1 <= seconds <= 3600:
        raise argparse.ArgumentTypeError(
            f"a refresh interval is a number of seconds from 0.1 to 3600, not {_shown(raw)}")
    return seconds


def job_id(raw: str) -> int:
    from ..store import job_id as parse

    try:
        return parse(raw.strip())
    except InvalidJobId as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def name(raw: str) -> str:
    """A queue or job type name as given, refused when it holds control characters (they would
    match nothing and could rewrite the operator's terminal when echoed)."""
    if not raw or any(ord(c) < 32 or ord(c) == 127 for c in raw) or len(raw) > 200:
        raise argparse.ArgumentTypeError(
            f"a name of 1 to 200 characters without control characters, not {_shown(raw)}")
    return raw


def role(raw: str) -> str:
    """A PostgreSQL role name (grants quote it, so any name of 1 to 63 bytes will do)."""
    if (not raw or any(ord(c) < 32 or ord(c) == 127 for c in raw)
            or len(raw.encode()) > 63):
        raise argparse.ArgumentTypeError(
            f"a role name of 1 to 63 bytes without control characters, not {_shown(raw)}")
    return raw


def wait_seconds(raw: str) -> float:
    """``show --wait``'s seconds: a number from 0 to 900 (pgdrain.wait's timeout)."""
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    problem = timeout_problem(seconds)
    if problem:
        raise argparse.ArgumentTypeError(f"a wait {problem.replace(repr(seconds), _shown(raw))}")
    return seconds


def _shown(raw: str) -> str:
    text = quoted(raw)  # what the operator typed, escaped as every value printed
    return text if len(text) <= 40 else text[:39] + "…"


def json_value(raw: str) -> Any:
    """Any JSON value given on the command line (a signal's payload)."""
    import json

    try:
        return json.loads(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None


def json_object(raw: str) -> dict[str, Any]:
    """A JSON object given on the command line (a job's payload)."""
    import json

    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, {...}")
    return value
