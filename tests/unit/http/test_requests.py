"""POST /jobs parsed without a database: what is accepted, and the status and words of every
refusal (the function tests check the same through API Gateway events)."""

from __future__ import annotations

import base64
import json

import pytest

from pgdrain.http.requests import ApiError, Limits, parse_enqueue
from pgdrain.registry import Handler, Registry

REGISTRY = Registry()
REGISTRY.register(Handler("send-email", lambda job: None))
JSON = "application/json"


LIMITS = Limits()


def parse(body, *, content_type=JSON, key=None, base64_encoded=False, limits=LIMITS):
    text = body if isinstance(body, str) or body is None else json.dumps(body)
    return parse_enqueue(text, base64_encoded=base64_encoded, content_type=content_type,
                         idempotency_key=key, registry=REGISTRY, limits=limits)


def refusal(body, **kwargs) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(body, **kwargs)
    return caught.value


def test_one_job_with_its_options():
    request = parse({"job_type": "send-email", "payload": {"to": "a@b.c"}, "priority": -1,
                     "queue": "emails", "max_attempts": 5, "delay_seconds": 30,
                     "dedupe_key": "k"})
    [job] = request.jobs
    assert not request.batch
    assert (job.job_type, json.loads(job.payload_json), job.priority, job.queue, job.max_attempts,
            job.delay_seconds, job.dedupe_key) == ("send-email", {"to": "a@b.c"}, -1, "emails",
                                                   5, 30, "k")


def test_a_batch_gets_keys_from_the_idempotency_key():
    request = parse({"jobs": [{"job_type": "send-email"},
                              {"job_type": "send-email", "dedupe_key": "own"}]}, key="req")
    assert request.batch and [j.dedupe_key for j in request.jobs] == ["req:0", "own"]


@pytest.mark.parametrize("content_type", [
    "application/json; charset=utf-8", "Application/JSON", 'application/json;charset="UTF8"'])
def test_json_content_types(content_type):
    assert parse({"job_type": "send-email"}, content_type=content_type).jobs


def test_a_request_without_a_content_type_is_read_as_json():
    assert parse(json.dumps({"job_type": "send-email"}), content_type=None
                 ).jobs[0].job_type == "send-email"


def test_a_base64_body():
    body = base64.b64encode(json.dumps({"job_type": "send-email"}).encode()).decode()
    assert parse(body, base64_encoded=True).jobs[0].job_type == "send-email"


@pytest.mark.parametrize(("body", "kwargs", "status", "words"), [
    ({"job_type": "send-email"}, {"content_type": "text/plain"}, 415,
     "Content-Type must be application/json"),
    ({"job_type": "send-email"}, {"content_type": "application/x-www-form-urlencoded"}, 415,
     "Content-Type must be application/json"),
    ({"job_type": "send-email"}, {"content_type": "application/json; charset=latin-1"}, 415,
     "not charset=latin-1"),
    (None, {}, 400, "the body is empty"),
    ("{not json", {}, 400, "the body is not valid JSON"),
    ("%%%", {"base64_encoded": True}, 400, "not valid base64"),
    ('{"job_type": "send-email", "job_type": "x"}', {}, 400, "the key 'job_type'"),
    ("[" * 100_000 + "]" * 100_000, {}, 400, "nested too deeply"),
    ('{"job_type": "send-email", "payload": {"n": NaN}}', {}, 400, "NaN"),
    ([], {}, 422, "the body must be a JSON object"),
    ({"jobs": []}, {}, 422, "jobs must be a non-empty array"),
    ({"jobs": [{"job_type": "send-email"}], "extra": 1}, {}, 422, "unexpected: extra"),
    ({"jobs": [{"job_type": "send-email"}] * 3}, {"limits": Limits(max_batch=2)}, 413,
     "at most 2 jobs"),
    ({"job_type": "send-email", "payload": {"x": "y" * 100}},
     {"limits": Limits(max_payload_bytes=50)}, 413, "the limit is 50"),
    ({"job_type": "nope"}, {}, 422, "unknown job type 'nope'"),
    ({"job_type": "send-email", "colour": "red"}, {}, 422, "unknown field"),
    ({"job_type": "send-email", "payload": [1]}, {}, 422, "must be a JSON object"),
    ({"job_type": "send-email", "run_at": "tomorrow"}, {}, 422, "not an ISO 8601 timestamp"),
    ({"job_type": "send-email", "run_at": "2030-01-01T00:00:00"}, {}, 422,
     "must include a timezone"),
    ({"job_type": "send-email", "delay_seconds": 10**400}, {}, 422, "delay_seconds"),
    ({"job_type": "send-email"}, {"key": "x" * 1000}, 422, "Idempotency-Key"),
    ({"job_type": "send-email", "dedupe_key": "a"}, {"key": "b"}, 422,
     "differs from the Idempotency-Key"),
])
def test_refusals_say_what_is_wrong(body, kwargs, status, words):
    error = refusal(body, **kwargs)
    assert error.status == status
    assert words in error.message, error.message


def test_a_batch_refusal_names_the_item():
    error = refusal({"jobs": [{"job_type": "send-email"}, {"job_type": "nope"}]})
    assert error.details.get("index") == 1, error.details
