"""The enqueue API's schedule routes (``/schedules``): schedules made at run time
(pgdrain.stored_schedules) created, changed, shown, paused, resumed and deleted by name, and
every schedule listed. A request's parts in, a ``Response`` out, as ``service.EnqueueApi``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..db import Session
from ..errors import InvalidJobError, ScheduleConflict, UnknownSchedule
from .requests import ApiError, _json_object
from .service import LogLine, Response, job_view

SCHEDULE_FIELDS = ("cron", "job_type", "payload", "tz", "queue", "priority", "max_attempts",
                   "ttl_seconds")
SHAPE = ('{"cron": "0 9 * * *", "job_type": "...", "payload": {...}, "tz": "Europe/Paris", '
         '"queue": "..."} (cron and job_type required)')


def parse_schedule(body: str | None, *, base64_encoded: bool = False,
                   content_type: str | None = None) -> dict[str, Any]:
    """Validate a ``PUT /schedules/{name}`` body's shape (ApiError 400, 415 or 422); its
    values are the library's to check (``pgdrain.schedule``)."""
    document = _json_object(body, base64_encoded, content_type, SCHEDULE_FIELDS, "a schedule",
                            SHAPE)
    for required in ("cron", "job_type"):
        if required not in document:
            raise ApiError(422, f"{required}: required; the body is {SHAPE}",
                           {"field": required})
    return document


def serve(session: Callable[[], Session], operation_id: str, name: str | None,
          body: str | None, *, base64_encoded: bool, content_type: str | None) -> Response:
    """Serve one of the schedule routes; a wrong name or value is a 422 naming the field, an
    unknown name a 404, a name a job module declares a 409."""
    from .. import stored_schedules as stored
    from ..scheduler import list_schedules, schedule

    if operation_id == "listSchedules":
        entries = [job_view(e) for e in list_schedules(session())]
        return Response(200, {"schedules": entries}, metrics={"ScheduleLookups": 1})
    assert name is not None
    try:
        if operation_id == "setSchedule":
            fields = parse_schedule(body, base64_encoded=base64_encoded,
                                    content_type=content_type)
            entry = schedule(session(), fields.pop("cron"), fields.pop("job_type"),
                             fields.pop("payload", None), name=name, **fields)
            created = entry.pop("created")
            return Response(201 if created else 200, job_view(entry),
                            metrics={"SchedulesSet": 1},
                            log=LogLine("info", "schedule set", {
                                "schedule": name, "schedule_created": created,
                                "cron": entry["cron"], "job_type": entry["job_type"]}))
        if operation_id == "getSchedule":
            return Response(200, job_view(stored.get_schedule(session(), name)),
                            metrics={"ScheduleLookups": 1})
        act = {"pauseSchedule": stored.pause_schedule, "resumeSchedule": stored.resume_schedule,
               "deleteSchedule": stored.delete_schedule}[operation_id]
        done = act(session(), name)
        return Response(200, job_view(done), metrics={"SchedulesChanged": 1},
                        log=LogLine("info", operation_id, {"schedule": name}))
    except UnknownSchedule as exc:
        raise ApiError(404, str(exc), {"name": name[:200]}) from None
    except ScheduleConflict as exc:
        raise ApiError(409, str(exc), {"name": name[:200]}) from None
    except InvalidJobError as exc:
        raise ApiError(422, str(exc), {"field": exc.field}) from None
