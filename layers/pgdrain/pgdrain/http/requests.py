"""The enqueue API's request rules: parse a ``POST /jobs`` body into validated jobs, or say
exactly what is wrong with it (``ApiError``: an HTTP status, a message and details).

Pure: no database, no AWS. The enqueue function calls ``parse_enqueue`` and inserts what it
returns in one statement, so a request with any invalid job inserts nothing.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..enqueue import new_job
from ..errors import InvalidJobError, PgdrainError
from ..models import DEFAULT_MAX_ATTEMPTS, JOB_FIELD_NAMES, MAX_DEDUPE_KEY, NewJob
from ..registry import Registry
from ..settings import DEFAULT_MAX_BATCH, DEFAULT_MAX_PAYLOAD_BYTES, read

# Room for the ":<index>" a batch appends to each item's key.
MAX_IDEMPOTENCY_KEY = MAX_DEDUPE_KEY - 8
JOB_FIELDS = JOB_FIELD_NAMES


class ApiError(PgdrainError):
    """A request the API refuses: ``status`` (4xx), a message, and details for the client."""

    def __init__(self, status: int, message: str, details: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = dict(details or {})

    def body(self) -> dict[str, Any]:
        return {"error": self.message, "details": self.details}


@dataclass(frozen=True, slots=True)
class Limits:
    """Size limits: a job's payload in bytes (as JSON) and the jobs in one batch."""

    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    max_batch: int = DEFAULT_MAX_BATCH

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Limits:
        return cls(max_payload_bytes=read("PGDRAIN_MAX_PAYLOAD_BYTES", env),
                   max_batch=read("PGDRAIN_MAX_BATCH", env))


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """A valid ``POST /jobs``: the jobs to insert, and whether it was a batch."""

    jobs: list[NewJob]
    batch: bool


def parse_enqueue(
    body: str | None,
    *,
    base64_encoded: bool = False,
    content_type: str | None,
    idempotency_key: str | None,
    registry: Registry,
    limits: Limits,
) -> EnqueueRequest:
    """Validate a ``POST /jobs`` request; raise ApiError (400, 413, 415 or 422) if invalid.

    One job: ``{"job_type": ..., "payload": {...}, ...}``; a batch: ``{"jobs": [...]}``. An
    ``Idempotency-Key`` header is the single job's ``dedupe_key``; in a batch, item ``i``
    without a key of its own gets ``<key>:<i>``, so a repeated batch request is idempotent too.
    """
    json_content_type(content_type)
    document = _decode(body, base64_encoded)
    if not isinstance(document, dict):
        raise ApiError(422, "the body must be a JSON object: one job, or {\"jobs\": [...]}")
    key = _idempotency_key(idempotency_key)
    if "jobs" in document:
        extra = sorted(set(document) - {"jobs"})
        if extra:
            raise ApiError(422, f"a batch holds only \"jobs\"; unexpected: {', '.join(extra)}",
                           {"field": extra[0]})
        items = document["jobs"]
        if not isinstance(items, list) or not items:
            raise ApiError(422, "jobs must be a non-empty array of jobs", {"field": "jobs"})
        if len(items) > limits.max_batch:
            raise ApiError(413, f"a batch holds at most {limits.max_batch} jobs, "
                                f"got {len(items)}", {"max_batch": limits.max_batch})
        jobs = [_job(item, i, f"{key}:{i}" if key else None, registry, limits)
                for i, item in enumerate(items)]
        return EnqueueRequest(jobs, batch=True)
    return EnqueueRequest([_job(document, None, key, registry, limits)], batch=False)


MAX_API_WAIT_SECONDS = 25.0
"""The longest ``GET /jobs/{id}?wait=N``: API Gateway ends a request after 29 s (as ``POST
/drain?wait=true``'s 25 s)."""
_WAIT_NUMBER = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3})?")


def parse_wait(raw: str | None) -> float | None:
    """``GET /jobs/{id}``'s ``wait`` query parameter: seconds from 0 to 25, as a decimal
    number (``5``, ``2.5``); None when absent; ApiError 400 for anything else."""
    if raw is None:
        return None
    seconds = float(raw) if _WAIT_NUMBER.fullmatch(raw) else math.nan
    if not 0 <= seconds <= MAX_API_WAIT_SECONDS:  # NaN too
        raise ApiError(400, f"wait must be a number of seconds from 0 to "
                            f"{MAX_API_WAIT_SECONDS:g} (API Gateway ends a request after 29 s), "
                            f"not {raw[:40]!r}", {"wait": raw[:40]})
    return seconds


def json_content_type(content_type: str | None) -> None:
    """Raise ApiError 415 unless a request body's ``Content-Type`` is JSON in UTF-8: the one
    check of every route that reads a body."""
    # No Content-Type at all (what `sam local generate-event` and several HTTP clients send)
    # is read as JSON; only a different declared type or charset is refused.
    media_type, _, parameters = (content_type or "application/json").partition(";")
    if media_type.strip().lower() != "application/json":
        raise ApiError(415, "Content-Type must be application/json",
                       {"content_type": (content_type or "")[:100]})
    charset = _charset(parameters)
    if charset is not None and charset not in ("utf-8", "utf8"):
        # Read as UTF-8 anyway, a UTF-16 or Latin-1 body would be stored as something else.
        raise ApiError(415, "the body must be UTF-8 JSON (Content-Type: application/json; "
                            f"charset=utf-8), not charset={charset[:40]}",
                       {"content_type": (content_type or "")[:100]})


QUEUE_SETTINGS = ("max_running", "rate")


def parse_queue_settings(body: str | None, *, base64_encoded: bool = False,
                         content_type: str | None = None) -> dict[str, Any]:
    """Validate a ``PUT /queues/{queue}`` body, ``{"max_running": N or null, "rate":
    "10/s" or null}`` (either or both; one not given stays); raise ApiError (400, 415 or
    422) if it is not one. The values' ranges are the control's to check."""
    document = _json_object(body, base64_encoded, content_type, QUEUE_SETTINGS, "a queue",
                            '{"max_running": N or null, "rate": "10/s" or null}')
    if not document:
        raise ApiError(422, "max_running: give max_running, rate or both (null lifts one)",
                       {"field": "max_running"})
    return {k: document[k] for k in QUEUE_SETTINGS if k in document}


SIGNAL_FIELDS = ("payload", "keep_seconds")


def parse_signal(body: str | None, *, base64_encoded: bool = False,
                 content_type: str | None = None) -> dict[str, Any]:
    """Validate a ``POST /signals/{name}`` body, ``{"payload": any JSON, "keep_seconds": N}``
    (both optional; no body at all sends no payload); raise ApiError (400, 415 or 422) if it
    is not one. The values are ``pgdrain.signal``'s to check."""
    if body is None or body == "":
        json_content_type(content_type)
        return {}
    return _json_object(body, base64_encoded, content_type, SIGNAL_FIELDS, "a signal",
                        '{"payload": ..., "keep_seconds": N} (both optional)')


def _json_object(body: str | None, base64_encoded: bool, content_type: str | None,
                 fields: tuple[str, ...], what: str, shape: str) -> dict[str, Any]:
    """A body that must be a JSON object of some of ``fields`` (``what`` has them, written as
    ``shape``): ApiError 415 for another Content-Type, 400 for one that is not JSON, 422 for
    another value or an unknown field (named, cut short)."""
    json_content_type(content_type)
    document = _decode(body, base64_encoded)
    if not isinstance(document, dict):
        raise ApiError(422, f"the body must be a JSON object: {shape}")
    unknown = sorted(set(document) - set(fields))
    if unknown:
        name = unknown[0][:60]
        raise ApiError(422, f"{name}: unknown field; {what} has {', '.join(fields)}",
                       {"field": name})
    return document


def _charset(parameters: str) -> str | None:
    """The ``charset`` of a Content-Type's parameters, lower case and unquoted; None if absent."""
    for parameter in parameters.split(";"):
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').lower()
    return None


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of a repeated key; a client that sent two meant something the
    # job would silently not get.
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return document


def _decode(body: str | None, base64_encoded: bool) -> Any:
    if body is None or body == "":
        raise ApiError(400, "the body is empty; send a JSON job")
    raw: bytes | str = body
    if base64_encoded:
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "the body is marked base64 but is not valid base64") from None
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ApiError(400, f"the body is not valid UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(raw, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise ApiError(400, f"the body is not valid JSON for pgdrain: the key {str(exc)[:60]!r} "
                            "appears twice in one object") from None
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc.msg} at line {exc.lineno} "
                            f"column {exc.colno}") from None
    except RecursionError:
        raise ApiError(400, "the body is nested too deeply") from None
    except ValueError as exc:  # e.g. an integer longer than Python converts (4300 digits)
        raise ApiError(400, f"the body is not valid JSON: {exc}"[:300]) from None


def _reject_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not valid JSON", name, 0)


def _idempotency_key(header: str | None) -> str | None:
    if header is None:
        return None
    if not header.strip() or len(header) > MAX_IDEMPOTENCY_KEY or "\x00" in header:
        raise ApiError(422, f"the Idempotency-Key header must be 1 to {MAX_IDEMPOTENCY_KEY} "
                            "characters without NUL", {"field": "Idempotency-Key"})
    return header


def _job(item: Any, index: int | None, key: str | None, registry: Registry,
         limits: Limits) -> NewJob:
    where = f"jobs[{index}]" if index is not None else ""

    def invalid(field: str, message: str) -> ApiError:
        path = f"{where}.{field}" if where else field
        details: dict[str, Any] = {"field": path}
        if index is not None:
            details["index"] = index
        return ApiError(422, f"{path}: {message}", details)

    if not isinstance(item, dict):
        raise ApiError(422, f"{where or 'the body'} must be a JSON object",
                       {"field": where or None, **({"index": index} if where else {})})
    unknown = sorted(set(item) - set(JOB_FIELDS))
    if unknown:
        raise invalid(unknown[0], f"unknown field; a job has {', '.join(JOB_FIELDS)}")
    job_type = item.get("job_type")
    if not isinstance(job_type, str) or not job_type:
        raise invalid("job_type", "is required and must be a non-empty string")
    handler = registry.get(job_type)
    if handler is None:
        known = registry.job_types()
        error = invalid("job_type", f"unknown job type {job_type!r}; known types: "
                                    f"{', '.join(known) or '(none registered)'}")
        error.details["known_job_types"] = known
        raise error
    payload = item.get("payload", {})
    if not isinstance(payload, dict):
        raise invalid("payload", "must be a JSON object")
    size = len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "surrogatepass"))
    if size > limits.max_payload_bytes:
        error = invalid("payload", f"is {size} bytes; the limit is {limits.max_payload_bytes}")
        error.status = 413
        error.details["max_payload_bytes"] = limits.max_payload_bytes
        raise error
    if handler.payload_model is not None:
        from ..payload import dump, parse  # only job types that declare a model pay for it

        try:
            payload = dump(parse(handler.payload_model, payload, field="payload",
                                 index=index))
        except InvalidJobError as exc:
            raise invalid(exc.field or "payload", str(exc).split(": ", 1)[-1]) from None
    dedupe_key = item.get("dedupe_key")
    if dedupe_key is not None and key is not None and index is None and dedupe_key != key:
        raise invalid("dedupe_key", "differs from the Idempotency-Key header; send one")
    options = {
        "queue": item.get("queue", "default"),
        "priority": item.get("priority", 0),
        "max_attempts": item.get("max_attempts",
                                 handler.max_attempts or DEFAULT_MAX_ATTEMPTS),
        "run_at": _timestamp(item.get("run_at"), invalid),
        "delay_seconds": item.get("delay_seconds"),
        "dedupe_key": dedupe_key if dedupe_key is not None else key,
        "expires_at": _timestamp(item.get("expires_at"), invalid, "expires_at"),
        "ttl_seconds": item.get("ttl_seconds"),
        "unique_for": item.get("unique_for"),
        "debounce": item.get("debounce"),
        "ordering_key": item.get("ordering_key"),
        "tenant": item.get("tenant"),
        "name": item.get("name"),
        "depends_on": item.get("depends_on"),
        "after": item.get("after"),
        "tags": item.get("tags"),
        "meta": item.get("meta"),
    }
    for name in ("delay_seconds", "ttl_seconds", "unique_for", "debounce"):
        if isinstance(options[name], float) and not math.isfinite(options[name]):
            raise invalid(name, "must be a finite number")
    try:
        return new_job(job_type, payload, **options)
    except InvalidJobError as exc:
        raise invalid(exc.field or "job", str(exc).split(": ", 1)[-1]) from None


def _timestamp(value: Any, invalid: Any, name: str = "run_at") -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(name, "must be an ISO 8601 string, e.g. 2030-01-31T09:00:00Z")
    if not value.isascii() or any(c < " " or c == "\x7f" for c in value):
        # Python's parser stops at a NUL and would read "...Z\x00junk" as a valid time.
        raise invalid(name, "must be an ISO 8601 timestamp of printable ASCII characters")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise invalid(name, f"is not an ISO 8601 timestamp: {value[:64]!r}") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise invalid(name, "must include a timezone, e.g. 2030-01-31T09:00:00Z")
    return parsed
