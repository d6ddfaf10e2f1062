"""The enqueue API's paths for its OpenAPI document (``pgdrain.http.openapi``): each route of
``pgdrain.http.routes`` with what it takes and answers, and the answers every route shares."""

from __future__ import annotations

from typing import Any

from ..models import (
    DATE_TIME,
    DEFAULT_SIGNAL_KEEP_SECONDS,
    MAX_DELAY_SECONDS,
    MAX_INT,
    MAX_JOB_ID,
    MAX_SIGNAL_NAME,
    MAX_TAGS,
    MAX_TEXT,
    Status,
)
from ..results import MAX_SIGNAL_PAYLOAD_BYTES
from . import openapi_schedules
from .routes import routes_of

_REF = "#/components/schemas/"
_DATE_TIME = DATE_TIME


def _error(description: str, headers: dict[str, Any] | None = None, *,
           schema: str = "Error") -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": _REF + schema}}},
    }
    if headers:
        response["headers"] = headers
    return response


def responses() -> dict[str, Any]:
    return {
        "BadRequest": _error("The body is empty, not UTF-8, not valid base64 or not valid JSON; "
                             "or the id is not a positive integer."),
        "PayloadTooLarge": _error("A payload or a batch is over its limit "
                                  "(`details.max_payload_bytes` or `details.max_batch`)."),
        "UnsupportedMediaType": _error("The Content-Type names another type than application/json, "
                                        "or a charset other than UTF-8 (a missing Content-Type "
                                        "is read as JSON)."),
        "Unprocessable": _error("The JSON is not a valid job or batch: `details.field` names "
                                "the offending field (and `details.index` the job in a batch)."),
        "NotFound": _error("No job has this id."),
        "MethodNotAllowed": _error(
            "The path exists but not with this method (any path of the API but its operations).",
            {"Allow": {"description": "The method the path takes.",
                       "schema": {"type": "string"}}}),
        "Conflict": _error("Retry: the job is not failed (`details.status`), or a live job "
                           "holds its dedupe_key (`details.held_by`). Cancel: the job had "
                           "finished (`details.status`)."),
        "Unavailable": _error("The database is unavailable or did not answer in time (the "
                              "request may or may not have committed), or, rarely, the jobs "
                              "holding its dedupe keys kept finishing and being replaced "
                              "(nothing committed): retry with the same Idempotency-Key.",
                              {"Retry-After": {"description": "Seconds to wait, when the "
                                                              "database was too slow.",
                                               "schema": {"type": "string"}}},
                              schema="ServerError"),
        "InternalError": _error("Something went wrong in the function: the request may be "
                                "retried with the same Idempotency-Key; quote `request_id`.",
                                schema="ServerError"),
        "Forbidden": _error("From API Gateway: the request is not signed, or its signer may "
                            "not invoke the route (or the API key is missing or wrong).",
                            schema="GatewayError"),
        "TooManyRequests": _error("From API Gateway: over the stage's throttling limits "
                                  "(ApiThrottleRate, ApiThrottleBurst); retry with backoff.",
                                  schema="GatewayError"),
    }


def _gateway_responses() -> dict[str, Any]:
    return {"403": _ref_response("Forbidden"), "429": _ref_response("TooManyRequests")}


def _ref_response(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/responses/{name}"}


def _job_response(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": _REF + "JobView"}}}}


def paths() -> dict[str, Any]:
    """Every route of the enqueue function (``http.routes``), described."""
    paths: dict[str, Any] = {}
    for route in routes_of("enqueue"):  # then the drain function's one route
        described = _OPERATIONS.get(route.operation_id) or \
            openapi_schedules.OPERATIONS[route.operation_id]
        operation = {"operationId": route.operation_id, "tags": ["jobs"],
                     "summary": route.summary, **described}
        operation["responses"] = {**operation["responses"],
                                  "500": _ref_response("InternalError"),
                                  "503": _ref_response("Unavailable"), **_gateway_responses()}
        item = paths.setdefault(route.path, {})
        if "{id}" in route.path:
            item["parameters"] = [{"$ref": "#/components/parameters/JobId"}]
        if "{queue}" in route.path:
            operation["tags"] = ["queues"]
            item["parameters"] = [_QUEUE_PARAMETER]
        if route.path.startswith("/schedules"):
            operation["tags"] = ["schedules"]
            if "{name}" in route.path:
                item["parameters"] = [openapi_schedules.PARAMETER]
        elif "{name}" in route.path:
            operation["tags"] = ["signals"]
            item["parameters"] = [_SIGNAL_PARAMETER]
        item[route.method.lower()] = operation
    paths["/drain"] = {"post": _DRAIN_NOW}
    return paths


# The drain function's route, beside the enqueue function's.
_DRAIN_NOW: dict[str, Any] = {
    "operationId": "drainNow", "tags": ["jobs"],
    "summary": "Start a drain now (asynchronously), or drain in the request with ?wait=true",
    "description": "API Gateway ends a request after 29 s and a drain may run for minutes: "
                   "by default the route starts a drain (an asynchronous invoke of the drain "
                   "function) and answers 202 at once. With `?wait=true` it drains in the "
                   "request for at most 25 s and answers the drain's summary.",
    "parameters": [{"name": "wait", "in": "query", "required": False,
                    "description": "true: drain in the request (at most 25 s) and answer "
                                   "200 with the summary.",
                    "schema": {"type": "boolean", "default": False}}],
    "responses": {
        "202": {"description": "A drain was started.", "content": {"application/json": {
            "schema": {"type": "object", "required": ["started", "request_id"],
                       "properties": {"started": {"type": "boolean", "const": True},
                                      "request_id": {"type": "string"}}}}}},
        "200": {"description": "With ?wait=true: the drain's summary (claimed, done, "
                               "retried, failed, released, stopped, continued, ...).",
                "content": {"application/json": {"schema": {"type": "object"}}}},
        "405": {"description": "Another method than POST.",
                "content": {"application/json": {"schema": {"type": "object"}}}},
        "500": _ref_response("InternalError"),
        "503": _ref_response("Unavailable"),
        **_gateway_responses(),
    },
}


_QUEUE_PARAMETER: dict[str, Any] = {
    "name": "queue", "in": "path", "required": True,
    "description": "A queue's name (the jobs' `queue`), percent-encoded: any name a job "
                   "can have (`a%2Fb` is `a/b`). One no job can have (a NUL, text that is "
                   "not valid UTF-8) answers 422.",
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT}}
_QUEUE_STATE = {"description": "The queue's state.", "content": {"application/json": {
    "schema": {"type": "object", "required": ["queue", "paused", "paused_at"],
               "properties": {"queue": {"type": "string"}, "paused": {"type": "boolean"},
                              "paused_at": {"anyOf": [_DATE_TIME, {"type": "null"}],
                                            "description": "Since when it is paused."},
                              "max_running": {"anyOf": [{"type": "integer"},
                                                        {"type": "null"}],
                                              "description": "Its concurrency cap (PUT "
                                                             "only)."},
                              "rate": {"anyOf": [{"type": "string"}, {"type": "null"}],
                                       "description": "Its rate limit, e.g. `10/s` (PUT "
                                                      "only)."}}}}}}
_QUEUE_REFUSALS = {
    "404": _error("No job names this queue and it was never paused (a typo?). To pause a "
                  "queue before its first job: `pgdrain pause QUEUE --new`."),
    "422": _ref_response("Unprocessable"),
}
_SIGNAL_PARAMETER: dict[str, Any] = {
    "name": "name", "in": "path", "required": True,
    "description": "The signal's name, percent-encoded (`order%2F42` is `order/42`): the name "
                   "a job waits for (`raise pgdrain.WaitFor(name, timeout=...)`).",
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_SIGNAL_NAME}}
_ENQUEUED = {"application/json": {"schema": {"$ref": _REF + "EnqueueResult"}}}
_BULK_FILTER: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "description": "Every field given must match (none: every job the action applies to).",
    "properties": {
        "status": {"type": "string", "enum": [s.value for s in Status]},
        "job_type": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT},
        "queue": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT},
        "tenant": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT},
        "tags": {"type": "array", "maxItems": MAX_TAGS, "items": {"type": "string"},
                 "description": "Jobs with all of these tags."},
        "meta": {"type": "object", "description": "Jobs whose meta contains this object "
                                                  "(JSON containment)."},
        "older_than_seconds": {"type": "number", "minimum": 0,
                               "description": "Enqueued more than this long ago."},
        "newer_than_seconds": {"type": "number", "minimum": 0,
                               "description": "Enqueued less than this long ago."}}}


def _bulk(action: str, applies: str) -> dict[str, Any]:
    return {
        "description": f"Two calls. With `filter` alone: how many jobs it selects among those "
                       f"this action applies to ({applies}), and `upto`, the highest id "
                       f"counted; nothing changes. With `upto` too: {action} those jobs, none "
                       "enqueued since, a batch (one short transaction, never waiting long "
                       "for a drain's lock) at a time, for at most half the call's time; "
                       "`next_upto` (null when done) is the `upto` of the next call.",
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "additionalProperties": False, "required": ["filter"],
            "properties": {"filter": _BULK_FILTER,
                           "upto": {"type": "integer", "minimum": 0, "maximum": MAX_JOB_ID},
                           "batch": {"type": "integer", "minimum": 1, "maximum": 10000,
                                     "default": 1000}}}}}},
        "responses": {
            "200": {"description": "The count (no upto), or what was done.",
                    "content": {"application/json": {"schema": {
                        "type": "object", "required": ["action", "upto"],
                        "properties": {
                            "action": {"type": "string"},
                            "count": {"type": "integer"}, "complete": {"type": "boolean"},
                            "statuses": {"type": "array", "items": {"type": "string"}},
                            "upto": {"type": "integer"}, "jobs": {"type": "integer"},
                            "outcomes": {"type": "object", "additionalProperties": {
                                "type": "integer"}},
                            "next_upto": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                            "stopped": {"anyOf": [{"type": "string", "enum": ["time", "busy"]},
                                                  {"type": "null"}]}}}}}},
            "400": _ref_response("BadRequest"),
            "415": _ref_response("UnsupportedMediaType"),
            "422": _ref_response("Unprocessable"),
        },
    }


# What each operation takes and answers, beyond what every one answers (500, 503, 403, 429).
_OPERATIONS: dict[str, dict[str, Any]] = {
    "cancelJobs": _bulk("cancel", "pending, running and waiting jobs; a running one is asked "
                                  "to stop"),
    "requeueJobs": _bulk("requeue", "failed jobs"),
    "deleteJobs": _bulk("delete", "every job but a running one"),
    "enqueueJobs": {
        "parameters": [{"$ref": "#/components/parameters/IdempotencyKey"}],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"oneOf": [
                {"$ref": _REF + "Job"}, {"$ref": _REF + "JobBatch"}]}}},
        },
        "responses": {
            "201": {"description": "Created: the new jobs' ids (and `created` if some were "
                                   "live duplicates).", "content": _ENQUEUED},
            "200": {"description": "Nothing created: every job matched a live job's dedupe "
                                   "key; these are the existing ids.", "content": _ENQUEUED},
            "400": _ref_response("BadRequest"),
            "413": _ref_response("PayloadTooLarge"),
            "415": _ref_response("UnsupportedMediaType"),
            "422": _ref_response("Unprocessable"),
        },
    },
    "getJob": {
        "description": "With `?wait=N` a long poll: the answer comes as soon as the job is "
                       "finished (`done`, `failed` or `cancelled`), or after N seconds (at "
                       "most 25, and never past the function's time left) with the job as it "
                       "stands: 200 either way, so read `status`. A job waiting for its "
                       "parents or a signal, or pending for a retry, is not finished.",
        "parameters": [{"name": "wait", "in": "query", "required": False,
                        "description": "Seconds to wait for the job to finish (0 to 25, "
                                       "a decimal number such as `5` or `2.5`).",
                        "schema": {"type": "string",
                                   "pattern": "^[0-9]{1,3}(\\.[0-9]{1,3})?$"}}],
        "responses": {
            "200": _job_response("The job (with `?wait=`, finished or as it stands when "
                                 "the wait is over)."),
            "400": _ref_response("BadRequest"),
            "404": _ref_response("NotFound"),
        },
    },
    "retryJob": {
        "responses": {
            "200": _job_response("The job, pending again."),
            "400": _ref_response("BadRequest"),
            "404": _ref_response("NotFound"),
            "409": _ref_response("Conflict"),
        },
    },
    "cancelJob": {
        "description": "A pending (or scheduled) job becomes `cancelled` and never runs. A "
                       "running job is asked to stop (`cancel_requested_at`): its handler "
                       "finishes, and an attempt that would have been retried ends "
                       "`cancelled`. A job that had finished answers 409.",
        "responses": {
            "200": _job_response("The job, cancelled or asked to stop."),
            "400": _ref_response("BadRequest"),
            "404": _ref_response("NotFound"),
            "409": _ref_response("Conflict"),
        },
    },
    "setQueue": {
        "description": "A concurrency cap and a rate limit, enforced in the claim itself "
                       "across all drains: never more than `max_running` jobs of the queue "
                       "running at once, never more than `rate` starts (`N/period`: `10/s`, "
                       "`100/min`, `5/h`, `1000/day`, `3/10s`; N from 1 to 10,000, the period "
                       "from a second to a day) in any such window. Jobs over them stay "
                       "pending, uncharged. Give either or both; one not given stays; null "
                       "lifts it. A cap below what runs now lets those finish. A bad value "
                       "(`0/min`, `1/0.5s`, a cap of 0): 422, nothing changed.",
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "additionalProperties": False, "minProperties": 1,
            "properties": {"max_running": {"anyOf": [
                {"type": "integer", "minimum": 1, "maximum": MAX_INT},
                {"type": "null"}]},
                "rate": {"anyOf": [{"type": "string", "pattern": "^[0-9]+/[0-9.]*[a-z]+$",
                                    "examples": ["10/s", "100/min"]},
                                   {"type": "null"}]}}}}}},
        "responses": {"200": _QUEUE_STATE, "400": _ref_response("BadRequest"),
                      "415": _ref_response("UnsupportedMediaType"), **_QUEUE_REFUSALS},
    },
    "sendSignal": {
        "description": "Every job waiting for the signal (it raised `pgdrain.WaitFor(name, "
                       "timeout=...)`) becomes due with `payload` as `job.signal.payload`, "
                       "and the signal is kept for `keep_seconds` (a week by default): a job "
                       "that waits for it later gets it at once. Sending it again replaces "
                       "the payload for later waits. Committed before the answer; the drain "
                       "is started when a job became due. A name, payload (at most "
                       f"{MAX_SIGNAL_PAYLOAD_BYTES // 1024} KiB of JSON) or retention it "
                       "cannot have: 422, nothing sent.",
        "requestBody": {"required": False, "content": {"application/json": {"schema": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "payload": {"description": "Any JSON value (default null)."},
                "keep_seconds": {"type": "number", "minimum": 0,
                                 "maximum": MAX_DELAY_SECONDS,
                                 "default": DEFAULT_SIGNAL_KEEP_SECONDS}}}}}},
        "responses": {
            "200": {"description": "Sent: the jobs it made due, and until when it is kept.",
                    "content": {"application/json": {"schema": {
                        "type": "object", "required": ["name", "woken", "kept_until"],
                        "properties": {
                            "name": {"type": "string"},
                            "woken": {"type": "array", "items": {"type": "integer"}},
                            "kept_until": _DATE_TIME}}}}},
            "400": _ref_response("BadRequest"),
            "415": _ref_response("UnsupportedMediaType"),
            "422": _ref_response("Unprocessable"),
        },
    },
    "pauseQueue": {
        "description": "No claim that starts after this answer takes the queue's jobs; the "
                       "queue still accepts jobs and those running finish. Pausing a paused "
                       "queue keeps its first `paused_at`. The state lives in the database: "
                       "every drain obeys it.",
        "responses": {"200": _QUEUE_STATE, **_QUEUE_REFUSALS},
    },
    "resumeQueue": {
        "description": "Drains claim the queue's jobs again (a queue that was not paused "
                       "stays as it is).",
        "responses": {"200": _QUEUE_STATE, **_QUEUE_REFUSALS},
    },
}
