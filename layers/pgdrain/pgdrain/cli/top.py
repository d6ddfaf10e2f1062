"""``pgdrain top``: the queue live, refreshed every second until Ctrl-C.

Per queue, how deep and how old the due work is, how fast jobs finish and fail, and whether
it is paused, capped or rate-limited; the jobs table's size and dead rows; the jobs running
longest with their progress; the drains running now and the slots they hold (of
``PGDRAIN_MAX_DRAINS``). Each refresh is a few bounded reads (``read_view``). A database that
goes away (a failover) is shown, not fatal: the screen says since when and why, and the next
refresh connects again. Lines are cut to the terminal's width.
"""

from __future__ import annotations

import json
import shutil
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

from .. import store
from ..errors import DatabaseUnavailable
from ..models import TableHealth
from . import output
from .output import Column

QUEUE_COLUMNS: Sequence[Column] = (
    ("queue", "QUEUE"), ("state", "STATE"), ("due", "DUE"), ("scheduled", "SCHEDULED"),
    ("running", "RUNNING"), ("oldest_due", "OLDEST DUE"), ("done_rate", "DONE/S"),
    ("failed_rate", "FAILED/S"), ("failed", "FAILED"),
)
RUNNING_COLUMNS: Sequence[Column] = (
    ("id", "JOB"), ("job_type", "TYPE"), ("queue", "QUEUE"), ("attempts", "ATTEMPT"),
    ("running", "RUNNING FOR"), ("progress", "PROGRESS"),
)
DRAIN_COLUMNS: Sequence[Column] = (
    ("slot", "SLOT"), ("pid", "PID"), ("connected", "CONNECTED"), ("state", "STATE"),
)
RUNNING_SHOWN = 10
"""The running jobs shown: those that have run longest."""
# Home the cursor and clear the screen: each frame replaces the last.
CLEAR = "\x1b[H\x1b[2J"


@dataclass(frozen=True)
class View:
    """What one refresh read."""

    overview: Sequence[Mapping[str, Any]]
    slots: Sequence[Mapping[str, Any]]
    states: Sequence[Mapping[str, Any]] = ()
    running: Sequence[Mapping[str, Any]] = ()
    health: TableHealth | None = None


def read_view(conn: Any) -> View:
    return View(overview=store.overview(conn), slots=store.drain_slots_held(conn),
                states=store.queue_states(conn),
                running=store.running_jobs(conn, limit=RUNNING_SHOWN),
                health=store.table_health(conn))


def by_queue(rows: Sequence[Mapping[str, Any]],
             states: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """``store.overview``'s rows summed per queue, with per-second rates over the last
    minute, and each queue's state (paused, its cap, its rate) from ``states``; a queue set
    but without jobs is listed too."""
    queues: dict[str, dict[str, Any]] = {}

    def queue(name: str) -> dict[str, Any]:
        return queues.setdefault(name, {
            "queue": name, "due": 0, "scheduled": 0, "running": 0, "failed": 0,
            "done_last_minute": 0, "failed_last_minute": 0, "oldest_due_seconds": 0.0})

    for row in rows:
        q = queue(row["queue"])
        for key in ("due", "scheduled", "running", "failed", "done_last_minute",
                    "failed_last_minute"):
            q[key] += int(row[key])
        q["oldest_due_seconds"] = max(q["oldest_due_seconds"], row["oldest_due_seconds"])
    for state in states:
        queue(state["queue"])
    set_as = {s["queue"]: s for s in states}
    for q in queues.values():
        q["done_rate"] = round(q["done_last_minute"] / 60, 1)
        q["failed_rate"] = round(q["failed_last_minute"] / 60, 1)
        q["oldest_due"] = output.age(q["oldest_due_seconds"])
        q["state"] = _state(set_as.get(q["queue"], {}))
    return sorted(queues.values(), key=lambda q: q["queue"])


def _state(state: Mapping[str, Any]) -> str:
    words = []
    if state.get("paused_at") is not None:
        words.append("PAUSED")
    if state.get("max_running") is not None:
        words.append(f"cap {state['max_running']}")
    if state.get("rate") is not None:
        words.append(f"rate {state['rate']}")
    return ", ".join(words)


def frame(view: View, *, max_drains: int, now: datetime, where: str = "",
          width: int | None = None) -> str:
    """One screen of ``pgdrain top`` (each line cut to ``width``, if given)."""
    queues = by_queue(view.overview, view.states)
    lines = [f"pgdrain top  {now:%Y-%m-%d %H:%M:%S} UTC  (rates over the last minute; "
             "Ctrl-C quits)"]
    lines += [f"database {output.cell(where)}", ""] if where else [""]
    lines.append(output.table(queues, QUEUE_COLUMNS) if queues else "no jobs")
    if view.health is not None:
        lines += ["", output.table_health(view.health)]
    if view.running:
        shown = [{**r, "running": output.age(r["running_seconds"]),
                  "progress": _progress(r)} for r in view.running]
        lines += ["", f"running longest (at most {RUNNING_SHOWN}):",
                  output.table(shown, RUNNING_COLUMNS, max_width=40)]
    lines += ["", f"drains running: {len(view.slots)} of {max_drains} slots"]
    if view.slots:
        shown = [{**s, "connected": output.age(s["connected_seconds"]),
                  "state": _session_state(s)} for s in view.slots]
        lines.append(output.table(shown, DRAIN_COLUMNS))
    return _cut("\n".join(lines), width) + "\n"


def outage(*, since: datetime, error: str, now: datetime, where: str = "",
           width: int | None = None) -> str:
    """The screen while the database cannot be reached: since when, why, and that it is
    trying again."""
    lines = [f"pgdrain top  {now:%Y-%m-%d %H:%M:%S} UTC  (Ctrl-C quits)"]
    if where:
        lines.append(f"database {output.cell(where)}")
    lines += ["", f"DATABASE UNREACHABLE for {output.age((now - since).total_seconds()) or '0s'}"
                  f" (since {since:%H:%M:%S} UTC): {output.cell(error)}",
              "connecting again at every refresh"]
    return _cut("\n".join(lines), width) + "\n"


def _progress(row: Mapping[str, Any]) -> str:
    text = "cancel asked; " if row.get("cancel_requested") else ""
    raw = row.get("progress")
    if raw is None:
        return text + "-"
    raw = str(raw)
    try:
        value = json.loads(raw)
    except ValueError:
        return text + raw
    if isinstance(value, dict) and ("fraction" in value or "message" in value):
        parts = []
        if isinstance(value.get("fraction"), int | float):
            parts.append(f"{value['fraction']:.0%}")
        if value.get("message") is not None:
            parts.append(str(value["message"]))
        return text + " ".join(parts)
    return text + json.dumps(value, separators=(",", ":"))


def _session_state(slot: Mapping[str, Any]) -> str:
    """What the drain holding a slot is doing: a drain's session is idle between its
    statements while its handlers run, so "idle" alone would read as "doing nothing"."""
    state, seconds = slot.get("state"), slot.get("state_seconds")
    since = f" {output.age(seconds)}" if seconds else ""
    if state == "active":
        return f"in a statement{since}"
    if state == "idle":
        return f"between statements{since}"
    return state or "? (another role's session)"


def _cut(text: str, width: int | None) -> str:
    if not width:
        return text
    return "\n".join(line if len(line) <= width else line[: width - 1] + "…"
                     for line in text.split("\n"))


def run(connect: Callable[[], Any], *, interval: float, once: bool, out: TextIO,
        max_drains: int, sleep: Callable[[float], None] | None = None, where: str = "",
        conn: Any = None) -> int:
    """Draw frames every ``interval`` seconds until Ctrl-C (or one, with ``once``), on
    ``conn`` and, after the database went away, on a fresh ``connect()``.

    Ctrl-C only asks to stop: the frame being read finishes (its statements are bounded) and
    the loop ends. Raised in the middle of a statement, KeyboardInterrupt could leave the
    connection mid-message and the process hanging on its way out. ``once`` exits 1 when the
    database cannot be reached."""
    live = not once and out.isatty()
    stop = threading.Event()
    previous = _on_interrupt(stop.set)
    down_since: datetime | None = None
    try:
        while not stop.is_set():
            width = shutil.get_terminal_size().columns if live else None
            now = datetime.now(UTC)
            try:
                if conn is None:
                    conn = connect()
                text = frame(read_view(conn), max_drains=max_drains, now=now, where=where,
                             width=width)
                down_since = None
            except (DatabaseUnavailable, OSError) as exc:
                _close(conn)
                conn = None
                down_since = down_since or now
                text = outage(since=down_since, error=f"{type(exc).__name__}: {exc}", now=now,
                              where=where, width=width)
            out.write((CLEAR if live else "") + text)
            out.flush()
            if once:
                return 0 if down_since is None else 1
            if not live:
                out.write("\n")
            (sleep or stop.wait)(interval)
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        _close(conn)
    out.write("\n")
    out.flush()
    return 0


def _close(conn: Any) -> None:
    if conn is not None:
        with suppress(Exception):
            conn.close()


def _on_interrupt(callback: Callable[[], None]) -> Any:
    """Make SIGINT call ``callback``; the handler it replaces (None off the main thread,
    where Python delivers no signal)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, lambda _signum, _frame: callback())
