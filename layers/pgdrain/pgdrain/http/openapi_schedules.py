"""The schedule routes' part of the enqueue API's OpenAPI document (``/schedules``, served by
``pgdrain.http.schedule_routes``): what each takes and answers."""

from __future__ import annotations

from typing import Any

from ..models import DATE_TIME, MAX_INT
from ..stored_schedules import MAX_NAME, SCHEDULE_OPTIONS

_NULLABLE_TIME = {"anyOf": [DATE_TIME, {"type": "null"}]}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/responses/{name}"}


PARAMETER: dict[str, Any] = {
    "name": "name", "in": "path", "required": True,
    "description": "The schedule's name, percent-encoded (`report%3Acustomer-42` or "
                   "`report:customer-42`): 1 to 200 printable characters, without spaces at "
                   "either end; another answers 422.",
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_NAME}}

SCHEMA: dict[str, Any] = {
    "title": "Schedule",
    "description": "A schedule entry, declared by a job module or made at run time.",
    "type": "object",
    "required": ["name", "source", "cron", "tz", "job_type", "queue", "paused", "next_run",
                 "last_tick", "last_job_id"],
    "properties": {
        "name": {"type": "string"},
        "source": {"type": "string", "enum": ["declared", "stored"],
                   "description": "declared: by a job module (`pgdrain.schedule` at import, "
                                  "`cron=`); stored: made at run time."},
        "cron": {"type": ["string", "null"]}, "tz": {"type": ["string", "null"]},
        "job_type": {"type": ["string", "null"]}, "queue": {"type": ["string", "null"]},
        "payload": {"description": "The jobs' payload (stored entries)."},
        "options": {"type": "object", "description": "queue, priority, max_attempts, "
                                                     "ttl_seconds given (stored entries)."},
        "paused": {"type": "boolean"}, "paused_at": _NULLABLE_TIME,
        "next_run": {**_NULLABLE_TIME, "description": "The next tick a drain enqueues (none "
                                                      "while paused, or for an entry no "
                                                      "longer declared)."},
        "last_tick": _NULLABLE_TIME, "last_job_id": {"type": ["integer", "null"]},
        "created_at": _NULLABLE_TIME, "updated_at": _NULLABLE_TIME,
    },
}

ENTRY = {"$ref": "#/components/schemas/Schedule"}
_ANSWER = {"content": {"application/json": {"schema": ENTRY}}}
_REFUSALS = {
    "404": {"description": "No schedule made at run time has this name.",
            "content": {"application/json": {"schema": {
                "$ref": "#/components/schemas/Error"}}}},
    "422": _ref("Unprocessable"),
}
_OPTION_SCHEMAS: dict[str, Any] = {
    "queue": {"type": "string", "minLength": 1, "maxLength": 200},
    "priority": {"type": "integer", "minimum": -32768, "maximum": 32767},
    "max_attempts": {"type": "integer", "minimum": 1, "maximum": MAX_INT},
    "ttl_seconds": {"type": "number", "exclusiveMinimum": 0},
    "tenant": {"type": "string", "minLength": 1, "maxLength": 200},
    "tags": {"type": "array", "maxItems": 16, "items": {"type": "string", "minLength": 1,
                                                        "maxLength": 64}},
    "meta": {"type": "object"},
}

OPERATIONS: dict[str, dict[str, Any]] = {
    "listSchedules": {
        "responses": {"200": {"description": "Every schedule, by name.", "content": {
            "application/json": {"schema": {
                "type": "object", "required": ["schedules"],
                "properties": {"schedules": {"type": "array", "items": ENTRY}}}}}}},
    },
    "getSchedule": {"responses": {"200": {"description": "The schedule.", **_ANSWER},
                                  **_REFUSALS}},
    "setSchedule": {
        "description": "Stored in the database and ticked by every drain as the declared "
                       "ones: one job of `job_type` with `payload` at each tick of `cron` (in "
                       "`tz`, UTC by default), exactly once per tick, only the latest tick "
                       "after an outage. Created: its first tick is one at most a minute old, "
                       "else the next. Changed: the same cron and zone keep the next tick; a "
                       "new one starts afresh, never taking a tick already taken; a paused "
                       "one stays paused. Everything is checked first (422 naming the field); "
                       "the write is one statement. A name a job module declares: 409.",
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "additionalProperties": False, "required": ["cron", "job_type"],
            "properties": {
                "cron": {"type": "string", "examples": ["0 9 * * mon-fri"]},
                "job_type": {"type": "string", "minLength": 1, "maxLength": 200},
                "payload": {"type": "object"},
                "tz": {"type": "string", "examples": ["Europe/Paris"]},
                **{k: _OPTION_SCHEMAS[k] for k in SCHEDULE_OPTIONS}}}}}},
        "responses": {
            "201": {"description": "Created.", **_ANSWER},
            "200": {"description": "Changed.", **_ANSWER},
            "400": _ref("BadRequest"),
            "409": {"description": "A job module declares a schedule of this name.",
                    "content": {"application/json": {"schema": {
                        "$ref": "#/components/schemas/Error"}}}},
            "415": _ref("UnsupportedMediaType"),
            "422": _ref("Unprocessable"),
        },
    },
    "deleteSchedule": {
        "responses": {"200": {"description": "Deleted (the jobs it enqueued stay).",
                              "content": {"application/json": {"schema": {
                                  "type": "object", "required": ["name", "deleted"],
                                  "properties": {"name": {"type": "string"},
                                                 "deleted": {"const": True}}}}}},
                      **_REFUSALS}},
    "pauseSchedule": {
        "description": "No tick enqueues until it is resumed; pausing a paused one keeps its "
                       "first `paused_at`.",
        "responses": {"200": {"description": "The schedule, paused.", **_ANSWER},
                      **_REFUSALS}},
    "resumeSchedule": {
        "description": "Its next tick is the first after now: the ticks missed while it was "
                       "paused are not run, not even the latest.",
        "responses": {"200": {"description": "The schedule, running.", **_ANSWER},
                      **_REFUSALS}},
}
