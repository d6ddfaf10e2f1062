"""Periodic jobs: ``pgdrain.schedule`` declares an entry (``@pgdrain.job(..., cron=...)`` one
per type), and at the top of every drain pass the ticks that are due are enqueued, each exactly
once however many drains race on it.

The database decides: enqueueing a tick moves the entry's ``last_tick`` forward in the same
transaction as the job's insert (``schedule_take_tick``), and a drain that finds it moved
enqueues nothing. Time is the database's clock. Only the latest tick due is enqueued: after an
outage an entry runs once to catch up, not once per tick missed. A new entry runs for a tick at
most ``FIRST_SIGHT_SECONDS`` old (the scheduled drain comes every minute); an older one is
recorded as seen, so a deploy does not run every hourly report at once.

Entries stored at run time (``pgdrain.schedule(conn, ...)``, pgdrain.stored_schedules) tick
here too, by the same rules: the janitor's look says whether one's ``next_tick`` has come (one
index probe, folded into a statement the drain runs anyway), and only then are the due ones
read (``schedule_stored_due``) and each tick taken by moving its row in the job's transaction.
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
from .stored_schedules import FIRST_SIGHT_SECONDS, set_schedule, tick_to_take

log = logging.getLogger(__name__)

__all__ = ["FIRST_SIGHT_SECONDS", "declare", "dedupe_key", "due_ticks", "enqueue_due",
           "list_schedules", "schedule", "schedule_view"]

STORED_PER_PASS = 500
"""At most this many stored entries' ticks a pass: the rest, the next pass (earliest first)."""

_POSITIONAL = ("cron", "job_type", "payload")


def schedule(*args: Any, tz: str | None = None, name: str | None = None,
             registry: Registry | None = None, conn: Any = None, **options: Any) -> Any:
    """A periodic job, declared in a job module or stored in the database.

    Declared (no connection): ``schedule(cron, job_type, payload=None, *, tz=None, name=None,
    registry=None, **options)`` returns the registry's ``Schedule``; see ``declare_schedule``.

    Stored (a connection first, or ``conn=``): ``schedule(conn, cron, job_type, payload,
    name=..., tz=None, **options)`` creates the entry ``name`` or changes it, in one statement,
    and returns it as a dict (``"created"`` says which); every drain ticks it from then on. The
    name is required (the entry's identity, e.g. ``"report:customer-42"``). InvalidSchedule
    names a field that is wrong; ScheduleConflict, a name a job module declares. See
    pgdrain.stored_schedules for its next tick when created, changed, paused and resumed.

        pgdrain.schedule(conn, "0 9 * * *", "report", {"customer": 42}, tz="Europe/Paris",
                         name="report:customer-42", queue="reports")
    """
    if args and not isinstance(args[0], str) and args[0] is not None:
        if conn is not None:
            raise TypeError("schedule(): give the connection first or as conn=, not both")
        conn, args = args[0], args[1:]
    if len(args) > len(_POSITIONAL):
        raise TypeError(f"schedule() takes {', '.join(_POSITIONAL)} positionally, then "
                        "keywords")
    given = dict(zip(_POSITIONAL, args, strict=False))
    for key in _POSITIONAL:
        if key in options:
            if key in given:
                raise TypeError(f"schedule() got {key} twice")
            given[key] = options.pop(key)
    if "cron" not in given or "job_type" not in given:
        raise TypeError("schedule() needs a cron expression and a job type")
    if conn is None:
        return declare_schedule(given["cron"], given["job_type"], given.get("payload"), tz=tz,
                                name=name, registry=registry, **options)
    if registry is not None:
        raise TypeError("schedule(): registry= is for declared entries; a stored one lives in "
                        "the database")
    return set_schedule(conn, name, given["cron"], given["job_type"], given.get("payload"),
                        tz=tz, **options)


def declare_schedule(cron: str, job_type: str, payload: dict[str, Any] | None = None, *,
                     tz: str | None = None, name: str | None = None,
                     registry: Registry | None = None, **options: Any) -> Schedule:
    """Declare a periodic job in a job module: at each tick of ``cron`` (five fields, in UTC
    unless ``tz`` names a zone) the drains enqueue one ``job_type`` job with ``payload`` and
    ``options`` (``queue``, ``priority``, ``max_attempts``, ``ttl_seconds``, ``tenant``,
    ``tags``, ``meta``). ``name`` (default:
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


def enqueue_due(conn: Any, registry: Registry, *, stored_due: bool = False) -> int:
    """Enqueue the due ticks of ``registry``'s schedules, one short transaction each, then
    those of the stored entries if ``stored_due`` (the janitor saw one due); how many jobs
    were created. Nothing at all (not a statement) when no schedule is declared nor due."""
    created = _enqueue_declared(conn, registry) if registry.schedules() else 0
    if stored_due:
        created += enqueue_stored_due(conn)
    return created


def _enqueue_declared(conn: Any, registry: Registry) -> int:
    entries = registry.schedules()
    session = as_session(conn)
    try:
        rows = session.rows("schedule_states", names=[e.name for e in entries])
    except QueryFailed as exc:  # e.g. a role without pgdrain_schedules: drain all the same
        log.error("periodic jobs skipped: %s (see docs/database-roles.md)", exc)
        return 0
    stored = {r["name"] for r in rows if r["source"] == "stored"}
    for taken in sorted(stored):
        log.error("schedule %r is declared by a job module and stored at run time under the "
                  "same name: the stored one runs; rename the declared one", taken)
    entries = [e for e in entries if e.name not in stored]
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


def _take(session: Any, entry: Schedule, tick: datetime, run: bool,
          next_tick: datetime | None = None, seen_next: datetime | None = None) -> int:
    """Take ``tick`` of ``entry`` and enqueue its job (``run``), in one transaction. A stored
    entry (``next_tick``) moves to its next tick only if it still waits for ``seen_next``."""
    with session.transaction():
        taken = session.one("schedule_take_tick", name=entry.name, tick=tick) \
            if next_tick is None else \
            session.one("schedule_stored_take_tick", name=entry.name, tick=tick,
                        next_tick=next_tick, seen_next=seen_next)
        if taken is None:
            return 0  # another drain took this tick (or the entry changed since it was read)
        if not run:
            return 0
        [result] = enqueue_many(session, [{
            **entry.options, "job_type": entry.job_type, "payload": entry.payload,
            "run_at": tick, "dedupe_key": dedupe_key(entry.name, tick)}])
        session.rows("schedule_tick_enqueued", name=entry.name, job_id=result.id)
    log.info("schedule %r enqueued job %s for its %s tick", entry.name, result.id,
             tick.isoformat())
    return int(result.created)


def enqueue_stored_due(conn: Any, limit: int = STORED_PER_PASS) -> int:
    """Enqueue the ticks of the stored entries whose next tick has come (at most ``limit``,
    earliest first), one short transaction each; how many jobs were created."""
    from .cron import CronError, parse

    session = as_session(conn)
    try:
        rows = session.rows("schedule_stored_due", limit=limit)
    except QueryFailed as exc:
        log.error("stored schedules skipped: %s (see docs/database-roles.md)", exc)
        return 0
    created = 0
    for row in rows:
        try:
            cron = parse(row["cron"], row["tz"])
            tick, next_tick = tick_to_take(cron, row["next_tick"], row["now"])
            entry = Schedule(row["name"], cron, row["job_type"], _decoded(row["payload"]),
                             _decoded(row["options"]))
        except CronError as exc:  # written by another version of pgdrain than this one
            log.error("stored schedule %r skipped: %s", row["name"], exc)
            continue
        try:
            created += _take(session, entry, tick, True, next_tick, row["next_tick"])
        except InvalidJobError as exc:
            # A payload its type's model refuses now: the tick is taken without a job (else
            # every pass would try it again, ahead of the others), and the log says why.
            log.error("stored schedule %r could not enqueue its %s tick: %s", entry.name,
                      tick.isoformat(), exc)
            _take(session, entry, tick, False, next_tick, row["next_tick"])
        except QueryFailed as exc:
            log.error("stored schedule %r could not enqueue its %s tick: %s", entry.name,
                      tick.isoformat(), exc)
    return created


def _decoded(value: Any) -> dict[str, Any]:
    import json

    decoded = json.loads(value) if isinstance(value, str | bytes) else value
    return dict(decoded or {})


def schedule_view(conn: Any) -> list[dict[str, Any]]:
    """Every entry the drains declared (``declare``) or the database has a tick of, from the
    database alone: no job module needed. Declared: its cron, zone, type and queue, its last
    tick and job, and its next run (the database's now when a tick is due and not yet taken:
    the next drain takes it). Not declared (removed or renamed, or not declared by a drain
    since the upgrade that began recording declarations): its last tick, stopped. Stored at
    run time (``source`` "stored"): its cron, zone, type, queue and payload, whether it is
    paused, and its next run (none while paused)."""
    from .cron import CronError, parse

    rows = as_session(conn).rows("schedule_list")
    now = rows[0]["now"]
    view = []
    for row in rows:
        if row["name"] is None:
            continue
        entry, next_run = None, None
        stored = row["source"] == "stored"
        if stored and row["next_tick"] is not None:
            next_run = max(row["next_tick"], now)
        elif row["declared_at"] is not None:
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
                     "next_run": next_run, "source": "stored" if stored else "declared",
                     "paused": row["paused_at"] is not None, "paused_at": row["paused_at"],
                     "payload": _decoded(row["payload"]) if stored else None})
    return view


def list_schedules(conn: Any) -> list[dict[str, Any]]:
    """Every schedule entry, declared and stored (``pgdrain.list_schedules``): as
    ``schedule_view``, ``source`` saying which."""
    return schedule_view(conn)


def dedupe_key(name: str, tick: datetime) -> str:
    """The key of an entry's job for one tick (the database refuses a second live one)."""
    return f"pgdrain-cron:{name}:{tick.isoformat()}"
