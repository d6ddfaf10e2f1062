"""Periodic jobs: ``pgdrain.schedule`` declares an entry (``@pgdrain.job(..., cron=...)`` one
per type), and at the top of every drain pass the ticks that are due are enqueued, each exactly
once however many drains race on it.

The database decides: enqueueing a tick moves the entry's ``last_tick`` forward in the same
transaction as the job's insert (``schedule_take_tick``), and a drain that finds it moved
enqueues nothing. Time is the database's clock. Only the latest tick due is enqueued: after an
outage an entry runs once to catch up, not once per tick missed. A new entry runs for a tick at
most ``FIRST_SIGHT_SECONDS`` old (the scheduled drain comes every minute); an older one is
recorded as seen, so a deploy does not run every hourly report at once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from .db import as_session
from .enqueue import enqueue_many, new_job
from .errors import ConfigError, InvalidJobError, QueryFailed
from .models import DEFAULT_QUEUE
from .registry import REGISTRY, Registry, Schedule, schedule_entry

log = logging.getLogger(__name__)

FIRST_SIGHT_SECONDS = 60.0


def schedule(cron: str, job_type: str, payload: dict[str, Any] | None = None, *,
             tz: str | None = None, name: str | None = None, registry: Registry | None = None,
             **options: Any) -> Schedule:
    """Declare a periodic job in a job module: at each tick of ``cron`` (five fields, in UTC
    unless ``tz`` names a zone) the drains enqueue one ``job_type`` job with ``payload`` and
    ``options`` (``queue``, ``priority``, ``max_attempts``, ``ttl_seconds``). ``name`` (default:
    the job type, the expression and the zone) identifies the entry across deploys: renamed or
    removed, it stops. Everything is checked here, at import: ConfigError says what is wrong.

        pgdrain.schedule("0 9 * * mon", "report", {"kind": "weekly"}, queue="reports",
                         tz="Europe/Paris", name="weekly-report")
    """
    label = name if name is not None else " ".join(p for p in (job_type, cron, tz) if p)
    entry = schedule_entry(label, cron, tz, job_type, payload, options)
    try:
        new_job(job_type, entry.payload, **entry.options)
    except InvalidJobError as exc:
        raise ConfigError(f"schedule {label!r}: {exc}") from None
    (REGISTRY if registry is None else registry).add_schedule(entry)
    return entry


def due_ticks(entries: Sequence[Schedule], last_ticks: dict[str, datetime], now: datetime
              ) -> list[tuple[Schedule, datetime, bool]]:
    """Which entries have a tick to take at ``now``: ``(entry, tick, run)``; ``run`` is False
    for a new entry's tick too old to run (it is only recorded). Pure."""
    due = []
    for entry in entries:
        tick = entry.cron.latest_at_or_before(now)
        if tick is None:
            continue
        last = last_ticks.get(entry.name)
        if last is None:
            due.append((entry, tick, now - tick <= timedelta(seconds=FIRST_SIGHT_SECONDS)))
        elif last < tick:
            due.append((entry, tick, True))
    return due


_declared: dict[int, tuple[tuple[str, str, str | None, str, str], ...]] = {}
"""What this process last declared, per registry: a drain declares once per container, and
again only when its job modules declare something else."""


def declare(conn: Any, registry: Registry) -> None:
    """Write ``registry``'s schedule entries as the database's declaration (the last
    declaration made replaces it: an entry not declared any more is removed), so that
    ``pgdrain schedules`` reads them there. Once per process and set of entries."""
    entries = tuple(sorted((e.name, e.cron.expression, e.cron.tz, e.job_type,
                            str(e.options.get("queue") or DEFAULT_QUEUE))
                           for e in registry.schedules()))
    if _declared.get(id(registry)) == entries:
        return
    try:
        row = as_session(conn).one("schedule_declare", names=[e[0] for e in entries],
                                   crons=[e[1] for e in entries], tzs=[e[2] for e in entries],
                                   job_types=[e[3] for e in entries],
                                   queues=[e[4] for e in entries])
    except QueryFailed as exc:  # e.g. a role without the table: drain all the same
        log.error("schedules not declared: %s (see docs/database-roles.md)", exc)
        return
    _declared[id(registry)] = entries
    if row and row["removed"]:
        log.info("schedules: %s entries no longer declared were removed", row["removed"])


def enqueue_due(conn: Any, registry: Registry) -> int:
    """Enqueue the due ticks of ``registry``'s schedules, one short transaction each; how many
    jobs were created. Nothing at all (not a statement) when no schedule is declared."""
    entries = registry.schedules()
    if not entries:
        return 0
    session = as_session(conn)
    try:
        rows = session.rows("schedule_states", names=[e.name for e in entries])
    except QueryFailed as exc:  # e.g. a role without pgdrain_schedules: drain all the same
        log.error("periodic jobs skipped: %s (see docs/database-roles.md)", exc)
        return 0
    last_ticks = {r["name"]: r["last_tick"] for r in rows if r["name"] is not None}
    created = 0
    for entry, tick, run in due_ticks(entries, last_ticks, rows[0]["now"]):
        try:
            created += _take(session, entry, tick, run)
        except (InvalidJobError, QueryFailed) as exc:
            # A payload its type's model refuses, a role that may not insert: the drain goes
            # on, and every pass says so until it is fixed (the tick stays untaken).
            log.error("schedule %r could not enqueue its %s tick: %s", entry.name,
                      tick.isoformat(), exc)
    return created


def _take(session: Any, entry: Schedule, tick: datetime, run: bool) -> int:
    with session.transaction():
        if session.one("schedule_take_tick", name=entry.name, tick=tick) is None:
            return 0  # another drain took this tick
        if not run:
            return 0
        [result] = enqueue_many(session, [{
            **entry.options, "job_type": entry.job_type, "payload": entry.payload,
            "run_at": tick, "dedupe_key": dedupe_key(entry.name, tick)}])
        session.rows("schedule_tick_enqueued", name=entry.name, job_id=result.id)
    log.info("schedule %r enqueued job %s for its %s tick", entry.name, result.id,
             tick.isoformat())
    return int(result.created)


def schedule_view(conn: Any) -> list[dict[str, Any]]:
    """Every entry the drains declared (``declare``) or the database has a tick of, from the
    database alone: no job module needed. Declared: its cron, zone, type and queue, its last
    tick and job, and its next run (the database's now when a tick is due and not yet taken:
    the next drain takes it). Not declared (removed or renamed, or not declared by a drain
    since the upgrade that began recording declarations): its last tick, stopped."""
    from .cron import CronError, parse

    rows = as_session(conn).rows("schedule_list")
    now = rows[0]["now"]
    view = []
    for row in rows:
        if row["name"] is None:
            continue
        entry, next_run = None, None
        if row["declared_at"] is not None:
            try:
                entry = Schedule(row["name"], parse(row["cron"], row["tz"]), row["job_type"],
                                 {}, {})
            except CronError:  # declared by another version of pgdrain than this one
                entry = None
        if entry is not None:
            due = due_ticks([entry], {} if row["last_tick"] is None
                            else {entry.name: row["last_tick"]}, now)
            next_run = now if due and due[0][2] else entry.cron.next_after(now)
        view.append({"name": row["name"], "declared": row["declared_at"] is not None,
                     "cron": row["cron"], "tz": row["tz"], "job_type": row["job_type"],
                     "queue": row["queue"], "declared_at": row["declared_at"],
                     "last_tick": row["last_tick"], "last_job_id": row["last_job_id"],
                     "next_run": next_run})
    return view


def dedupe_key(name: str, tick: datetime) -> str:
    """The key of an entry's job for one tick (the database refuses a second live one)."""
    return f"pgdrain-cron:{name}:{tick.isoformat()}"
