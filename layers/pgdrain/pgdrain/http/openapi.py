"""The enqueue API's OpenAPI 3.1 document, built from the code that serves it.

The routes are the enqueue function's (``pgdrain.http.routes``); the request rules are
``pgdrain.http.requests``' and
``pgdrain.new_job``'s (field names, limits, defaults); ``job_type`` is an enum of the
registered job types, and a type that declares a payload model (``@pgdrain.job(...,
payload=Model)``) gets its payload schema from ``pgdrain.payload.json_schema``. Nothing here is
typed twice by hand, so ``docs/openapi.json`` cannot drift from the code unnoticed: the tests
compare it with a fresh build (``make openapi`` writes it).

``python -m pgdrain.http.openapi [--jobs MODULES] [--output PATH]`` prints or writes the document
for the job modules named (default: the modules pgdrain ships, not ``PGDRAIN_JOBS``, so the
committed document does not depend on the shell it was built in).
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
from collections.abc import Sequence
from typing import Any

from ..models import (
    DATE_TIME,
    JOB_FIELD_NAMES,
    JOB_FIELDS,
    JOB_OPTION_NAMES,
    MAX_DELAY_SECONDS,
    MAX_JOB_ID,
    NO_NUL,
    SMALLINT,
    Status,
)
from ..registry import DEFAULT_JOB_MODULES, Handler, Registry
from ..settings import DEFAULT_MAX_BATCH, DEFAULT_MAX_PAYLOAD_BYTES
from . import openapi_schedules
from .openapi_paths import paths as _paths
from .openapi_paths import responses as _responses
from .requests import MAX_IDEMPOTENCY_KEY, Limits

OPENAPI_VERSION = "3.1.0"
API_VERSION = "1.0.0"
"""The version of the HTTP contract this document describes (not of the package)."""

# The bounds come from models (JOB_FIELDS), which the parser enforces: the tests check them
# against it (accepted at the bound, refused one past it), so a change on either side fails.
__all__ = ["MAX_DELAY_SECONDS", "MAX_IDEMPOTENCY_KEY", "MAX_JOB_ID", "NO_NUL", "dumps", "main",
           "openapi_document"]

_REF = "#/components/schemas/"
_COMPONENT_NAME = re.compile(r"[^A-Za-z0-9._-]")
_DATE_TIME = DATE_TIME
_SECURITY_SCHEME = "sigv4"
_API_KEY_SCHEME = "apiKey"


def openapi_document(registry: Registry, *, limits: Limits | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the enqueue API for the job types in ``registry``.

    ``limits`` are the size limits to state (default: the defaults, ``Limits()``; a deployment
    may raise them with ``PGDRAIN_MAX_PAYLOAD_BYTES`` and ``PGDRAIN_MAX_BATCH``). The result is
    plain JSON data; it depends only on its arguments, so equal inputs give equal documents.
    """
    limits = limits or Limits()
    schemas: dict[str, Any] = {}
    _job_schemas(registry, limits, schemas)
    schemas["JobBatch"] = {
        "title": "JobBatch",
        "description": "Jobs inserted in one transaction: all of them, or none if any is "
                       "invalid. With an Idempotency-Key header, item i without a dedupe_key "
                       "of its own gets `<key>:<i>`.",
        "type": "object",
        "properties": {"jobs": {
            "type": "array", "items": {"$ref": _REF + "Job"}, "minItems": 1,
            "maxItems": limits.max_batch,
            "description": f"At most {limits.max_batch} jobs (PGDRAIN_MAX_BATCH, default "
                           f"{DEFAULT_MAX_BATCH}); more answers 413.",
        }},
        "required": ["jobs"],
        "additionalProperties": False,
    }
    schemas["EnqueueResult"] = {
        "title": "EnqueueResult",
        "description": "The jobs' ids, in request order. `created` is present when some job was "
                       "not created because a live job (pending, running or waiting) held its "
                       "dedupe key: the id is then the existing job's.",
        "type": "object",
        "properties": {
            "ids": {"type": "array", "items": _job_id_schema(), "minItems": 1,
                    "maxItems": limits.max_batch},
            "created": {"type": "array", "items": {"type": "boolean"}, "minItems": 1,
                        "maxItems": limits.max_batch,
                        "description": "Per job: true if inserted by this request."},
        },
        "required": ["ids"],
    }
    schemas["JobView"] = _job_view_schema()
    schemas["Schedule"] = openapi_schedules.SCHEMA
    schemas["GatewayError"] = {
        "title": "GatewayError",
        "description": "An answer from API Gateway itself; the function never ran.",
        "type": "object",
        "properties": {"message": {"type": "string"}},
        "required": ["message"],
    }
    schemas["ServerError"] = {
        "title": "ServerError",
        "description": "The function could not answer: what to do, and the request id that "
                       "finds the details in its log.",
        "type": "object",
        "properties": {
            "error": {"type": "string", "description": "What happened and what to do."},
            "request_id": {"type": ["string", "null"],
                           "description": "The Lambda request id, for the function's log."},
        },
        "required": ["error", "request_id"],
    }
    schemas["Error"] = {
        "title": "Error",
        "description": "Why the request was refused; `details` names the offending field "
                       "(`field`, and `index` in a batch) where there is one.",
        "type": "object",
        "properties": {
            "error": {"type": "string", "description": "What is wrong, for a person."},
            "details": {"type": "object", "description": "Machine-readable specifics."},
        },
        "required": ["error", "details"],
    }
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "pgdrain enqueue API",
            "version": API_VERSION,
            "summary": "Enqueue background jobs into pgdrain's PostgreSQL queue and look "
                       "them up.",
            "description": _INFO_DESCRIPTION,
        },
        "servers": [{
            "url": "https://{restApiId}.execute-api.{region}.amazonaws.com/{stage}",
            "description": "The API Gateway REST API the SAM template deploys.",
            "variables": {
                "restApiId": {"default": "abcdef1234", "description": "The REST API's id."},
                "region": {"default": "eu-west-1"},
                "stage": {"default": "v1"},
            },
        }],
        "security": [{_SECURITY_SCHEME: []}],
        "tags": [{"name": "jobs", "description": "The job queue."}],
        "paths": _paths(),
        "components": {
            "schemas": schemas,
            "parameters": {
                "JobId": {
                    "name": "id", "in": "path", "required": True,
                    "description": "The job's id, as POST /jobs returned it.",
                    "schema": _job_id_schema(),
                },
                "IdempotencyKey": {
                    "name": "Idempotency-Key", "in": "header", "required": False,
                    "description": "The single job's dedupe_key (a body dedupe_key must then "
                                   "equal it); in a batch, `<key>:<i>` for item i without its "
                                   "own. A repeated request while the job is live answers 200 "
                                   "with the same id instead of a duplicate: retry with the "
                                   "same key after a timeout or a 503.",
                    "schema": {"type": "string", "minLength": 1,
                               "maxLength": MAX_IDEMPOTENCY_KEY, "pattern": NO_NUL},
                },
            },
            "responses": _responses(),
            "securitySchemes": {
                _SECURITY_SCHEME: {
                    "type": "apiKey", "name": "Authorization", "in": "header",
                    "x-amazon-apigateway-authtype": "awsSigv4",
                    "description": "AWS_IAM: sign each request with AWS Signature Version 4 "
                                   "(service `execute-api`); the caller needs "
                                   "`execute-api:Invoke` on the route. API Gateway itself "
                                   "answers 403 to unsigned or badly signed requests.",
                },
                _API_KEY_SCHEME: {
                    "type": "apiKey", "name": "x-api-key", "in": "header",
                    "description": "An API Gateway API key, required on every route when the "
                                   "stack is deployed with ApiKeyRequired=true (in addition "
                                   "to, or instead of, AWS_IAM).",
                },
            },
        },
    }


_INFO_DESCRIPTION = (
    "The enqueue function of pgdrain, behind API Gateway (REST, Lambda proxy integration, "
    "AWS_IAM auth). `POST /jobs` inserts one job or a batch in one transaction and may wake the "
    "drain; `GET /jobs/{id}` returns a job's state; `POST /jobs/{id}/retry` requeues a failed "
    "job; `POST /jobs/{id}/cancel` cancels one; `POST /drain` starts a drain (202; "
    "`?wait=true` drains in the request, at most 25 s).\n\n"
    "Every refusal is JSON `{\"error\": ..., \"details\": {...}}` and changes nothing. "
    "Another method on a known path answers 405 with an `Allow` header; an unknown path "
    "answers 404. Delivery is at least once: handlers must be safe to run twice.\n\n"
    "Generated by `pgdrain.http.openapi` from the code (`make openapi`)."
)


def _job_id_schema() -> dict[str, Any]:
    return {"type": "integer", "format": "int64", "minimum": 1, "maximum": MAX_JOB_ID}


def _component_names(job_types: Sequence[str], prefix: str) -> dict[str, str]:
    """A distinct, valid component name (``[A-Za-z0-9._-]+``) per job type."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for job_type in job_types:
        base = f"{prefix}.{_COMPONENT_NAME.sub('_', job_type)}"
        name, n = base, 2
        while name in taken:
            name, n = f"{base}.{n}", n + 1
        taken.add(name)
        names[job_type] = name
    return names


def _option_properties(handler: Handler | None) -> dict[str, Any]:
    """The schemas of a job's fields other than job_type and payload (``models.JOB_FIELDS``,
    which new_job checks); a job type's own max_attempts is its default."""
    properties = {f.name: {**f.schema, "description": f.description}
                  for f in JOB_FIELDS if f.name in JOB_OPTION_NAMES}
    if handler is not None and handler.max_attempts:
        properties["max_attempts"]["default"] = handler.max_attempts
    return properties


def _payload_limit(limits: Limits) -> str:
    return (f"At most {limits.max_payload_bytes} bytes as compact JSON "
            f"(PGDRAIN_MAX_PAYLOAD_BYTES, default {DEFAULT_MAX_PAYLOAD_BYTES}); more answers 413. "
            "Strings may not contain NUL (\\u0000).")


def _job_schemas(registry: Registry, limits: Limits, schemas: dict[str, Any]) -> None:
    """``Job`` (one job), and per job type ``Job.<type>`` and, with a model, ``Payload.<type>``.

    ``Job`` is a ``oneOf`` of the per-type schemas with a discriminator on ``job_type``.
    """
    job_types = registry.job_types()
    if not job_types:
        schemas["Job"] = _job_object(
            "Job", "No job types are registered: every job is refused (422).",
            {"type": "string", "minLength": 1}, {"type": "object"}, None, payload_required=False)
        return
    from ..payload import json_schema  # only a registry with typed payloads needs it

    job_names = _component_names(job_types, "Job")
    payload_names = _component_names(job_types, "Payload")
    for job_type in job_types:
        handler = registry.get(job_type)
        assert handler is not None
        description = _handler_summary(handler)
        payload_required = False
        if handler.payload_model is not None:
            model_schema = json_schema(handler.payload_model)
            schemas[payload_names[job_type]] = model_schema
            payload: dict[str, Any] = {"$ref": _REF + payload_names[job_type]}
            # An omitted payload is {}, which a model with required fields refuses.
            payload_required = bool(model_schema.get("required"))
            description += f"\n\nThe payload must match {payload_names[job_type]}. "
        else:
            payload = {"type": "object", "default": {},
                       "description": "Any JSON object; this job type declares no model."}
            description += "\n\n"
        description += _payload_limit(limits)
        schemas[job_names[job_type]] = _job_object(
            job_names[job_type], description, {"const": job_type}, payload, handler,
            payload_required=payload_required)
    schemas["Job"] = {
        "title": "Job",
        "description": "One job. The fields: " + ", ".join(JOB_FIELD_NAMES) + "; unknown fields "
                       "are refused (422).",
        "oneOf": [{"$ref": _REF + job_names[t]} for t in job_types],
        "discriminator": {"propertyName": "job_type",
                          "mapping": {t: _REF + job_names[t] for t in job_types}},
    }


def _job_object(title: str, description: str, job_type: dict[str, Any], payload: dict[str, Any],
                handler: Handler | None, *, payload_required: bool) -> dict[str, Any]:
    properties = {"job_type": {**job_type, "type": "string",
                               "description": "The handler that runs the job."},
                  "payload": payload, **_option_properties(handler)}
    return {
        "title": title,
        "description": description,
        "type": "object",
        "properties": {f: properties[f] for f in JOB_FIELD_NAMES},
        "required": ["job_type", "payload"] if payload_required else ["job_type"],
        "additionalProperties": False,
        # run_at and delay_seconds are exclusive (either may be null).
        "not": {"required": ["run_at", "delay_seconds"],
                "properties": {"run_at": {"type": "string"},
                               "delay_seconds": {"type": "number"}}},
    }


def _handler_summary(handler: Handler) -> str:
    doc = inspect.getdoc(handler.func)
    first = inspect.cleandoc(doc).split("\n\n", 1)[0].strip() if doc else ""
    return first or f"Job type `{handler.job_type}`."


def _job_view_schema() -> dict[str, Any]:
    """A job as ``GET /jobs/{id}`` returns it: the ``job_get`` columns less ``lease_token``."""

    def nullable(schema: dict[str, Any], description: str) -> dict[str, Any]:
        return {"anyOf": [schema, {"type": "null"}], "description": description}

    integer = {"type": "integer"}
    return {
        "title": "JobView",
        "description": "A job's state, lease and error history.",
        "type": "object",
        "properties": {
            "id": _job_id_schema(),
            "job_type": {"type": "string"},
            "payload": {"description": "The stored payload: a JSON object for jobs enqueued "
                                       "through this API; null when plain SQL stored one "
                                       "that cannot be decoded (see payload_error)."},
            "payload_error": {"type": "string",
                              "description": "Present only when the stored payload cannot be "
                                             "decoded (a number of thousands of digits, or "
                                             "nested thousands deep): why."},
            "status": {"type": "string", "enum": [s.value for s in Status]},
            "attempts": {**integer, "minimum": 0,
                         "description": "Attempts started (a claim spends one)."},
            "max_attempts": {**integer, "minimum": 1},
            "run_at": {**_DATE_TIME, "description": "When the job is (or was) due."},
            "created_at": _DATE_TIME,
            "queue": {"type": "string"},
            "priority": {**integer, "minimum": SMALLINT[0], "maximum": SMALLINT[1]},
            "claimed_at": nullable(_DATE_TIME, "When the last claim took it."),
            "lease_expires_at": nullable(_DATE_TIME, "While running: when the janitor may "
                                                     "reclaim it."),
            "last_error": nullable({"type": "string"}, "The last failed attempt's error."),
            "errors": nullable({
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"attempt": integer, "at": _DATE_TIME,
                                   "error": {"type": "string"}},
                    "required": ["attempt", "at", "error"],
                },
            }, "One entry per failed attempt, oldest first (null only if plain SQL stored "
               "something that cannot be decoded: see errors_error)."),
            "errors_error": {"type": "string",
                             "description": "Present only when the stored errors cannot be "
                                            "decoded: why."},
            "lost_claims": {**integer, "minimum": 0,
                            "description": "Times a drain died holding this job before its "
                                           "start was recorded; such a claim was given its "
                                           "attempt back."},
            "started_at": nullable(_DATE_TIME, "When the current attempt's handler started, "
                                               "recorded only once lost_claims is above 0."),
            "dedupe_key": nullable({"type": "string"}, "The job's dedupe key, if any."),
            "ordering_key": nullable({"type": "string"}, "The job's ordering key, if any: "
                                                         "one job of the key at a time."),
            "tenant": nullable({"type": "string"}, "The job's tenant, if any: shared "
                                                   "fairly with other tenants."),
            "finished_at": nullable(_DATE_TIME, "When it became done, failed or cancelled."),
            "cancel_requested_at": nullable(_DATE_TIME, "When it was asked to stop while it "
                                                        "ran (its attempt then ends "
                                                        "cancelled)."),
            "expires_at": nullable(_DATE_TIME, "Not started by then, it never runs and ends "
                                               "failed with the error `expired`."),
            "result": {"description": "What the handler returned (any JSON value), stored "
                                      "when the job was done; null if it returned None, or "
                                      "if the value could not be stored (then last_error "
                                      "says why: not JSON, or above "
                                      "PGDRAIN_RESULT_MAX_BYTES)."},
            "progress": nullable({
                "type": "object",
                "properties": {"fraction": {"type": "number", "minimum": 0, "maximum": 1},
                               "message": {"type": "string", "maxLength": 500}},
                "required": ["fraction"],
            }, "The handler's latest progress report (job.progress), written about every "
               "second while it runs."),
            "state": {"description": "What a resumable job's handler last saved with "
                                     "job.checkpoint (any JSON value): where its next run "
                                     "resumes from; null if it saved none."},
            "updated_at": _DATE_TIME,
            "parents": {"type": "array", "items": {"type": "object", "properties": {
                "id": _job_id_schema(), "status": {"type": "string"}}, "required": ["id"]},
                        "description": "Its parents (depends_on), each with its end or status."},
            "children": {"type": "array", "items": _job_id_schema(),
                         "description": "The jobs that depend on it (the first 1,000)."},
            "parents_left": nullable(integer, "Of a job with parents: those not finished."),
            "after_parents": nullable({"type": "string"}, "What it waits for (after)."),
            "cancelled_by": nullable(_job_id_schema(), "The parent whose end cancelled it."),
            "wait_signal": nullable({"type": "string"}, "While it waits for a signal "
                                                        "(WaitFor): its name; run_at is then "
                                                        "when the wait times out."),
            "wait_result": nullable({"type": "object", "properties": {
                "name": {"type": "string"}, "received": {"type": "boolean"},
                "payload": {}, "at": _DATE_TIME}}, "What its last wait for a signal got "
                                                  "(job.signal): the payload, or a timeout "
                                                  "(received false)."),
            "tags": {"type": "array", "items": {"type": "string"},
                     "description": "Its tags, in the order given; [] if none."},
            "meta": {"type": "object", "description": "Its metadata; {} if none."},
            "trace_context": nullable({"type": "object", "properties": {
                "xray": {"type": "string"}, "traceparent": {"type": "string"},
                "tracestate": {"type": "string"}}}, "The enqueuer's sampled trace context "
                                                    "(X-Ray header, W3C traceparent), which "
                                                    "the drain ran the job under."),
        },
        "required": ["id", "job_type", "payload", "status", "attempts", "max_attempts",
                     "run_at", "created_at", "queue", "priority", "claimed_at",
                     "lease_expires_at", "last_error", "errors", "dedupe_key", "finished_at",
                     "updated_at", "lost_claims", "started_at", "cancel_requested_at",
                     "expires_at", "result", "progress", "ordering_key", "tenant", "state",
                     "parents", "children", "parents_left", "after_parents", "cancelled_by",
                     "wait_signal", "wait_result", "tags", "meta", "trace_context"],
    }


def dumps(document: dict[str, Any]) -> str:
    """The document as ``docs/openapi.json`` holds it: sorted keys, two-space indent."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pgdrain.http.openapi",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default=DEFAULT_JOB_MODULES, metavar="MODULES",
                        help="comma-separated job modules (default: %(default)s)")
    parser.add_argument("--output", "-o", default="-", metavar="PATH",
                        help="where to write the document (default: standard output)")
    args = parser.parse_args(argv)
    from ..registry import REGISTRY, load_job_modules

    load_job_modules(args.jobs)
    text = dumps(openapi_document(REGISTRY))
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as file:
            file.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
