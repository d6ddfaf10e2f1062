"""How values look on a page, decided without I/O. Jinja escapes HTML; these make every other
character visible too: control, format and separator characters (a bidi override, an escape
sequence, a zero-width space) are shown as their escapes, as the CLI shows them, so that a
name or a payload cannot hide or reorder what is around it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pgdrain.cli.output import escape, escape_json


def visible(value: Any) -> str:
    """One line of text: every control, format and separator character escaped."""
    if value is None:
        return ""
    return escape(value if isinstance(value, str) else str(value))


def name(value: Any) -> str:
    """A queue's, type's, tenant's or key's name as ``visible`` shows it, quoted when it begins
    or ends with white space (``'emails '`` is another queue than ``emails``)."""
    shown = visible(value)
    return f"'{shown}'" if shown != shown.strip() else shown


def visible_lines(value: Any) -> str:
    """Text of several lines (an error's traceback): each line as ``visible``."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return "\n".join(escape(line) for line in text.split("\n"))


def pretty_json(value: Any) -> str:
    """A JSON value indented, its strings' invisible characters as JSON escapes."""
    return escape_json(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False,
                                  default=str))


def age(seconds: float | None) -> str:
    """``45s``, ``12m``, ``3h 5m``, ``2d 4h``."""
    if seconds is None:
        return ""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def count(value: int | None, cap: int) -> str:
    """A count read up to ``cap``: ``1,234``, or ``10,000+`` at the cap."""
    if value is None:
        return ""
    return f"{cap:,}+" if value >= cap else f"{value:,}"


def when(value: datetime | str | None, now: datetime | None = None) -> str:
    """A time in UTC to the second, and how long ago or ahead: ``2026-12-04 18:02:31 UTC (5m
    ago)``; an ISO 8601 text (a time inside a JSON column) too; anything else as text."""
    if value is None:
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return visible(value)
    if not isinstance(value, datetime) or value.tzinfo is None:
        return visible(value)
    now = now or datetime.now(UTC)
    try:
        shown = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        delta = (now - value).total_seconds()
    except (OverflowError, ValueError):  # infinity, year 1: plain SQL can store them
        return visible(value)
    relative = f"{age(delta)} ago" if delta >= 0 else f"in {age(-delta)}"
    return f"{shown} UTC ({relative})"


def attempts(errors: Any) -> list[dict[str, Any]]:
    """A job's error history as the page lists it: each entry's ``attempt``, ``at`` and
    ``error``; an entry that is not one (plain SQL may write anything into the array) shown
    whole as its ``error``."""
    if not isinstance(errors, list):
        return []
    shown = []
    for entry in errors:
        if isinstance(entry, dict):
            shown.append({"attempt": entry.get("attempt"), "at": entry.get("at"),
                          "error": entry.get("error")})
        else:
            shown.append({"attempt": None, "at": None, "error": pretty_json(entry)})
    return shown
