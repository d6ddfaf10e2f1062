"""How the command prints: readable tables for people, JSON for scripts. Pure functions."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

from ..models import TableHealth

Column = tuple[str, str]
"""(the row's key, the header)."""

# Any API caller can put text in the database (a queue, a job type, a tenant, an error): a
# control character in it (ESC, CR, BEL, a C1 CSI) would break the table or rewrite the
# operator's terminal, a format character (U+202E) show the text reversed, a line separator
# break the line, a lone surrogate fail the print. All are shown escaped, as repr() writes
# them; everything the CLI prints from the database or from a user goes through ``escape``.
_ESCAPED = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))


def escape(text: str) -> str:
    """``text`` with its control, format and separator characters escaped (``\\x1b``,
    ``\\u202e``)."""
    if text.isprintable():  # most text, at C speed
        return text
    return "".join(repr(c)[1:-1] if unicodedata.category(c) in _ESCAPED else c for c in text)


def escape_json(text: str) -> str:
    """JSON text with the characters ``escape`` escapes written as JSON ``\\u`` escapes
    (which stand only inside strings, where they mean the same text), but its newlines
    (the layout's: json.dumps writes a newline in a string as ``\\n``)."""
    if text.isprintable():
        return text
    return "".join(json.dumps(c)[1:-1] if c != "\n" and unicodedata.category(c) in _ESCAPED
                   else c for c in text)


def quoted(value: Any) -> str:
    """A name in a sentence: ``'emails'``, escaped."""
    return f"'{cell(value)}'"


def to_json(value: Any) -> str:
    """JSON for scripts. json.dumps escapes C0 controls but not DEL, C1 or U+202E (with
    ensure_ascii off, kept so that names stay readable): ``escape_json`` does."""
    return escape_json(json.dumps(value, default=_json_value, indent=2, sort_keys=True,
                                  ensure_ascii=False))


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def cell(value: Any) -> str:
    """One value as table text: times to the second in UTC, floats short, control
    characters escaped."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:.1f}"
    return escape(str(value))


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], *,
          max_width: int = 60) -> str:
    """Rows as an aligned plain-text table; a cell wider than ``max_width`` is cut short."""
    texts = [[_fit(cell(row.get(key)), max_width) for key, _ in columns] for row in rows]
    headers = [header for _, header in columns]
    widths = [max([len(h), *(len(r[i]) for r in texts)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row_texts in texts:
        lines.append("  ".join(_align(t, w) for t, w in zip(row_texts, widths, strict=True))
                     .rstrip())
    return "\n".join(lines)


def _align(text: str, width: int) -> str:
    number = text.replace(",", "").replace(".", "", 1).isdigit()
    return text.rjust(width) if number else text.ljust(width)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def age(seconds: float | None) -> str:
    """A wait in the largest two units that say it: ``45s``, ``3m 20s``, ``2h 5m``, ``3d 4h``."""
    if seconds is None or seconds <= 0:
        return "-"
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.0f}s" if seconds >= 1 else f"{seconds:.1f}s"
    for size, unit, small_size, small in ((86400, "d", 3600, "h"), (3600, "h", 60, "m"),
                                          (60, "m", 1, "s")):
        if whole >= size:
            return f"{whole // size}{unit} {whole % size // small_size}{small}"
    raise AssertionError("unreachable")


def record(fields: Mapping[str, Any]) -> str:
    """One job's fields, one per line (``pgdrain show``); JSON values pretty-printed, and a
    text of several lines (a traceback in last_error) kept on its lines, indented."""
    width = max(len(k) for k in fields)
    lines = []
    for key, value in fields.items():
        if isinstance(value, dict | list):
            text = to_json(value)
        elif isinstance(value, str):
            text = "\n".join(cell(line) for line in value.split("\n"))
        else:
            text = cell(value)
        lines.append(f"{key.ljust(width)}  " + text.replace("\n", "\n" + " " * (width + 2)))
    return "\n".join(lines)


def megabytes(size: int) -> str:
    """A size in MB, one decimal: ``35.4 MB``."""
    return f"{size / 2**20:,.1f} MB"


def table_health(health: TableHealth) -> str:
    """The jobs table's line in ``pgdrain stats`` and ``top``: its size, dead rows (what
    vacuum has yet to clear) and last vacuum."""
    seconds = health.vacuumed_seconds_ago
    vacuumed = ("no vacuum yet" if seconds is None else
                f"last vacuum {age(max(seconds, 0.1))} ago")
    return (f"table jobs: {megabytes(health.total_bytes)} (heap "
            f"{megabytes(health.heap_bytes)}, indexes {megabytes(health.index_bytes)}), "
            f"{health.live_rows:,} live and {health.dead_rows:,} dead rows, {vacuumed}")
