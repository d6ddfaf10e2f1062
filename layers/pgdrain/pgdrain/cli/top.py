"""``pgdrain top``: the queue live, refreshed every second until Ctrl-C.

Per queue, how deep and how old the due work is and how fast jobs finish and fail; the jobs
table's size, dead rows and last vacuum; the drains running now and the slots they hold (of
``PGDRAIN_MAX_DRAINS``). Each refresh is three bounded reads (``store.overview``,
``store.table_health``, ``store.drain_slots_held``).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from .. import store
from ..models import TableHealth
from . import output
from .output import Column

QUEUE_COLUMNS: Sequence[Column] = (
    ("queue", "QUEUE"), ("due", "DUE"), ("scheduled", "SCHEDULED"), ("running", "RUNNING"),
    ("oldest_due", "OLDEST DUE"), ("done_rate", "DONE/S"), ("failed_rate", "FAILED/S"),
    ("failed", "FAILED"),
)
DRAIN_COLUMNS: Sequence[Column] = (
    ("slot", "SLOT"), ("pid", "PID"), ("connected", "CONNECTED"), ("state", "STATE"),
)
# Home the cursor and clear the screen: each frame replaces the last.
CLEAR = "\x1b[H\x1b[2J"


def by_queue(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``store.overview``'s rows summed per queue, with per-second rates over the last
    minute."""
    queues: dict[str, dict[str, Any]] = {}
    for row in rows:
        q = queues.setdefault(row["queue"], {
            "queue": row["queue"], "due": 0, "scheduled": 0, "running": 0, "failed": 0,
            "done_last_minute": 0, "failed_last_minute": 0, "oldest_due_seconds": 0.0})
        for key in ("due", "scheduled", "running", "failed", "done_last_minute",
                    "failed_last_minute"):
            q[key] += int(row[key])
        q["oldest_due_seconds"] = max(q["oldest_due_seconds"], row["oldest_due_seconds"])
    for q in queues.values():
        q["done_rate"] = round(q["done_last_minute"] / 60, 1)
        q["failed_rate"] = round(q["failed_last_minute"] / 60, 1)
        q["oldest_due"] = output.age(q["oldest_due_seconds"])
    return list(queues.values())


def frame(overview: Sequence[Mapping[str, Any]], slots: Sequence[Mapping[str, Any]], *,
          max_drains: int, now: datetime, where: str = "",
          health: TableHealth | None = None) -> str:
    """One screen of ``pgdrain top``."""
    queues = by_queue(overview)
    lines = [f"pgdrain top  {now:%Y-%m-%d %H:%M:%S} UTC  (rates over the last minute; "
             "Ctrl-C quits)"]
    lines += [f"database {output.cell(where)}", ""] if where else [""]
    lines.append(output.table(queues, QUEUE_COLUMNS) if queues else "no jobs")
    if health is not None:
        lines += ["", output.table_health(health)]
    lines += ["", f"drains running: {len(slots)} of {max_drains} slots"]
    if slots:
        shown = [{**s, "connected": output.age(s["connected_seconds"]),
                  "state": s["state"] or "?"} for s in slots]
        lines.append(output.table(shown, DRAIN_COLUMNS))
    return "\n".join(lines) + "\n"


def run(conn: Any, *, interval: float, once: bool, out: TextIO, max_drains: int,
        sleep: Callable[[float], None] | None = None, where: str = "") -> int:
    """Draw frames every ``interval`` seconds until Ctrl-C (or one, with ``once``).

    Ctrl-C only asks to stop: the frame being read finishes (its statements are bounded) and
    the loop ends. Raised in the middle of a statement, KeyboardInterrupt could leave the
    connection mid-message and the process hanging on its way out."""
    live = not once and out.isatty()
    stop = threading.Event()
    previous = _on_interrupt(stop.set)
    try:
        while not stop.is_set():
            text = frame(store.overview(conn), store.drain_slots_held(conn),
                         max_drains=max_drains, now=datetime.now(UTC), where=where,
                         health=store.table_health(conn))
            out.write((CLEAR if live else "") + text)
            out.flush()
            if once:
                return 0
            if not live:
                out.write("\n")
            (sleep or stop.wait)(interval)
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    out.write("\n")
    out.flush()
    return 0


def _on_interrupt(callback: Callable[[], None]) -> Any:
    """Make SIGINT call ``callback``; the handler it replaces (None off the main thread,
    where Python delivers no signal)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, lambda _signum, _frame: callback())
