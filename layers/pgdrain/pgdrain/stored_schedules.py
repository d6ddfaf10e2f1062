"""Schedules made at run time: ``pgdrain.schedule(conn, cron, job_type, payload, name=...)``
stores an entry in ``pgdrain_schedules`` (a customer's report at the hour they picked), and
``pause_schedule``, ``resume_schedule``, ``delete_schedule``, ``get_schedule`` act on it by
name (``list_schedules``, in pgdrain.scheduler, lists both kinds). The drains tick a stored
entry as a declared one (pgdrain.scheduler): exactly once per tick, only the latest tick due
after an outage.

A stored entry keeps ``next_tick``, the first tick it waits for, computed here when it is
written and by the drain when it ticks, so that a drain finds the due ones with one probe of an
index however many are stored. The rules (pure functions below):

- created: its first tick is one at most ``FIRST_SIGHT_SECONDS`` old (as a declared entry seen
  for the first time), else the next one;
- changed: the same cron and zone keep the next tick (a new payload or queue changes no time);
  a new cron or zone makes it a new entry for its first tick, except that a tick it already
  took is never taken again;
- paused: no tick; resumed: the first tick after the resume (the ticks missed while paused are
  skipped, not run in a burst, not even the latest);
- deleted: gone; the jobs it enqueued stay.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .db import as_session
from .enqueue import new_job
from .errors import InvalidJobError, InvalidSchedule, ScheduleConflict, UnknownSchedule
from .registry import REGISTRY

if TYPE_CHECKING:
    from .cron import Cron

FIRST_SIGHT_SECONDS = 60.0
"""A new entry runs for a tick at most this old (the scheduled drain comes every minute)."""

SCHEDULE_OPTIONS = ("queue", "priority", "max_attempts", "ttl_seconds", "tenant", "tags",
                    "meta")
"""The options a schedule's jobs take (the same for declared entries)."""

MAX_NAME = 200
RESUME_TRIES = 3


def first_tick(cron: Cron, now: datetime) -> datetime:
    """A new (or re-timed) entry's first tick at ``now``: the latest tick if it is at most
    FIRST_SIGHT_SECONDS old, else the next one. Pure."""
    latest = cron.latest_at_or_before(now)
    if latest is not None and now - latest <= timedelta(seconds=FIRST_SIGHT_SECONDS):
        return latest
    return cron.next_after(now)


def tick_to_take(cron: Cron, seen_next: datetime, now: datetime) -> tuple[datetime, datetime]:
    """For a stored entry whose ``seen_next`` tick has come at ``now``: the tick to enqueue
    (only the latest due: after an outage the entry runs once) and the next one to wait for.
    Pure."""
    latest = cron.latest_at_or_before(now)
    tick = seen_next if latest is None or latest < seen_next else latest
    return tick, cron.next_after(max(now, tick))


def resume_tick(cron: Cron, now: datetime) -> datetime:
    """A resumed entry's next tick: the first after ``now`` (none missed is run). Pure."""
    return cron.next_after(now)


def schedule_name(name: Any) -> str:
    """``name`` if a stored entry can have it: 1 to 200 printable characters, not blank and
    without white space at either end (it is a path segment of the API, a CLI argument)."""
    if not isinstance(name, str):
        raise InvalidSchedule("a stored schedule needs name= (a string: its identity, e.g. "
                              "'report:customer-42')", field="name")
    if not name.strip() or len(name) > MAX_NAME or name != name.strip() \
            or not name.isprintable():
        raise InvalidSchedule(f"must be 1 to {MAX_NAME} printable characters, not blank, "
                              "without spaces at either end", field="name")
    return name


def checked(name: Any, cron: Any, job_type: Any, payload: Any, tz: Any,
            options: dict[str, Any]) -> tuple[str, Cron, str, str, dict[str, Any]]:
    """Everything a stored entry holds, checked before anything is written: its name, its
    cron parsed in its zone, its job as enqueue would take it (type, payload, options). Returns
    (name, cron, job_type, payload JSON, options); InvalidSchedule names the field."""
    name = schedule_name(name)
    unknown = sorted(set(options) - set(SCHEDULE_OPTIONS))
    if unknown:
        raise InvalidSchedule(f"a schedule takes {', '.join(SCHEDULE_OPTIONS)}, not "
                              f"{', '.join(unknown)}", field=unknown[0])
    if not isinstance(cron, str):
        raise InvalidSchedule(f"must be a string like '0 9 * * *', not {cron!r}", field="cron")
    if tz is not None and not isinstance(tz, str):
        raise InvalidSchedule(f"must be a time zone's name like 'Europe/Paris', not {tz!r}",
                              field="tz")
    if payload is not None and not isinstance(payload, dict) and not _is_model(job_type,
                                                                              payload):
        raise InvalidSchedule("a schedule's payload is a dict (a JSON object)", field="payload")
    from .cron import CronError, parse  # only processes that schedule pay for it

    try:
        parsed = parse(cron, tz)
    except CronError as exc:
        raise InvalidSchedule(str(exc), field="tz" if tz and "zone" in str(exc) else "cron"
                              ) from None
    try:
        job = new_job(job_type, _modelled(job_type, payload), **options)
    except InvalidJobError as exc:
        raise InvalidSchedule(str(exc), field=exc.field) from None
    return name, parsed, job.job_type, job.payload_json, dict(options)


def _is_model(job_type: Any, payload: Any) -> bool:
    handler = REGISTRY.get(job_type) if isinstance(job_type, str) else None
    return bool(handler and handler.payload_model and isinstance(payload,
                                                                 handler.payload_model))


def _modelled(job_type: Any, payload: Any) -> Any:
    """``payload`` checked by its type's payload model, when a handler registered in this
    process declares one (as ``pgdrain.enqueue`` and the enqueue API check it), as JSON data."""
    handler = REGISTRY.get(job_type) if isinstance(job_type, str) else None
    if handler is None or handler.payload_model is None:
        return payload
    from .payload import dump, parse

    if not isinstance(payload, handler.payload_model):
        payload = parse(handler.payload_model, {} if payload is None else payload)
    return dump(payload)


def set_schedule(conn: Any, name: Any, cron: Any, job_type: Any, payload: Any = None, *,
                 tz: Any = None, **options: Any) -> dict[str, Any]:
    """Create the stored entry ``name``, or change it (``pgdrain.schedule(conn, ...)``). One
    statement writes it; ScheduleConflict if a job module declares that name."""
    name, parsed, job_type, payload_json, options = checked(name, cron, job_type, payload, tz,
                                                            options)
    session = as_session(conn)
    look = session.one("schedule_stored_get", name=name)
    assert look is not None
    if look["declared"] or name in REGISTRY.schedule_names():
        raise _conflict(name)
    from .cron import CronError

    now = look["now"]
    try:
        first, after_now = first_tick(parsed, now), parsed.next_after(now)
    except CronError as exc:  # an expression that never fires (30 February)
        raise InvalidSchedule(str(exc), field="cron") from None
    row = session.one("schedule_stored_set", name=name, cron=parsed.expression, tz=parsed.tz,
                      job_type=job_type, payload=payload_json,
                      options=json.dumps(options, separators=(",", ":")),
                      first_tick=first, after_now=after_now)
    if row is None:  # a drain declared it between the look and the write
        raise _conflict(name)
    return view(row)


def get_schedule(conn: Any, name: str) -> dict[str, Any]:
    """The stored entry ``name``; UnknownSchedule if there is none."""
    row = as_session(conn).one("schedule_stored_get", name=schedule_name(name))
    if row is None or row["name"] is None:
        raise UnknownSchedule(f"no schedule stored at run time is named {name!r}")
    return view(row)


def pause_schedule(conn: Any, name: str) -> dict[str, Any]:
    """Pause the stored entry ``name``: it enqueues nothing until resumed (pausing a paused
    one changes nothing). UnknownSchedule if there is none."""
    row = as_session(conn).one("schedule_stored_pause", name=schedule_name(name))
    if row is None:
        raise UnknownSchedule(f"no schedule stored at run time is named {name!r}")
    return view(row)


def resume_schedule(conn: Any, name: str) -> dict[str, Any]:
    """Resume the stored entry ``name``: its next tick is the first after now; the ticks
    missed while it was paused are not run. Resuming one that runs changes nothing.
    UnknownSchedule if there is none."""
    from .cron import parse

    session = as_session(conn)
    for _ in range(RESUME_TRIES):  # changed between our read and our write: read it again
        row = session.one("schedule_stored_get", name=schedule_name(name))
        if row is None or row["name"] is None:
            raise UnknownSchedule(f"no schedule stored at run time is named {name!r}")
        if row["paused_at"] is None:
            return view(row)
        resumed = session.one("schedule_stored_resume", name=name, cron=row["cron"],
                              tz=row["tz"],
                              next_tick=resume_tick(parse(row["cron"], row["tz"]), row["now"]))
        if resumed is not None:
            return view(resumed)
    raise ScheduleConflict(f"schedule {name!r} kept changing while it was resumed; try again")


def delete_schedule(conn: Any, name: str) -> dict[str, Any]:
    """Delete the stored entry ``name`` (the jobs it enqueued stay): ``{"name", "deleted":
    True}``. UnknownSchedule if there is none."""
    if as_session(conn).one("schedule_stored_delete", name=schedule_name(name)) is None:
        raise UnknownSchedule(f"no schedule stored at run time is named {name!r}")
    return {"name": name, "deleted": True}


def view(row: dict[str, Any]) -> dict[str, Any]:
    """A stored entry as the library, the API and the CLI show it."""
    options = _json(row["options"]) or {}
    return {"name": row["name"], "source": "stored", "cron": row["cron"], "tz": row["tz"],
            "job_type": row["job_type"], "payload": _json(row["payload"]),
            "queue": options.get("queue", "default"), "options": options,
            "paused": row["paused_at"] is not None, "paused_at": row["paused_at"],
            "next_run": row["next_tick"], "last_tick": row["last_tick"],
            "last_job_id": row["last_job_id"], "created_at": row["created_at"],
            "updated_at": row["updated_at"],
            **({"created": bool(row["created"])} if "created" in row else {})}


def _json(value: Any) -> Any:
    # pg8000 decodes jsonb; a DB-API driver may hand over its text.
    return json.loads(value) if isinstance(value, str | bytes) else value


def _conflict(name: str) -> ScheduleConflict:
    return ScheduleConflict(f"schedule {name!r} is declared by a job module (pgdrain.schedule "
                            "at import, or cron= on @pgdrain.job): a stored schedule needs a "
                            "name of its own")
