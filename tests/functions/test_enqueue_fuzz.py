"""Fuzzing the enqueue API: schemathesis drives the OpenAPI document (built from the code)
through a local HTTP server that turns each request into an API Gateway REST proxy event for
the enqueue function, against a real PostgreSQL; hypothesis drives ``parse_enqueue`` directly.

Properties: no request gets a 5xx (the database is up) or an unhandled exception; every answer
has a documented status, content type and body; a refused request (4xx) leaves the jobs table
exactly as it was; ``parse_enqueue`` either returns jobs or raises ApiError with 400, 413, 415
or 422, and a valid job comes back with the fields it was sent.

``PGDRAIN_FUZZ_EXAMPLES`` (default 50) sets the examples per operation and generation mode.
"""

from __future__ import annotations

import base64
import copy
import json
import math
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import pgdrain
from pgdrain.http.openapi import (
    MAX_DELAY_SECONDS,
    MAX_IDEMPOTENCY_KEY,
    MAX_JOB_ID,
    openapi_document,
)
from pgdrain.http.requests import JOB_FIELDS, ApiError, EnqueueRequest, Limits, parse_enqueue
from pgdrain.models import MAX_DEDUPE_KEY, MAX_INT, MAX_TEXT, SMALLINT, NewJob
from pgdrain.payload import dump
from pgdrain.payload import parse as parse_payload
from pgdrain.registry import Handler, Registry
from pgdrain_dev.context import LambdaContext
from tests.support.functions import load_event
from tests.support.jobs import Greeting


def _fuzz_examples(default: int = 50) -> int:
    """``PGDRAIN_FUZZ_EXAMPLES`` raises the example count (the reliability soak does)."""
    value = os.environ.get("PGDRAIN_FUZZ_EXAMPLES", "").strip()
    return int(value) if value else default


EXAMPLES = _fuzz_examples()
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.data_too_large])
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
REFUSALS = {400, 413, 415, 422}


# --- the local API Gateway: HTTP request -> REST proxy event -> lambda_handler -> HTTP ------

_RESOURCES = [(re.compile(r"^/jobs/?$"), "/jobs"),
              (re.compile(r"^/jobs/(?P<id>[^/]+)/?$"), "/jobs/{id}"),
              (re.compile(r"^/jobs/(?P<id>[^/]+)/retry/?$"), "/jobs/{id}/retry")]


def proxy_event(method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> dict:
    """The API Gateway REST proxy event for one HTTP request, shaped as events/*.json are.

    ``path`` stays percent-encoded as REST APIs deliver it; ``pathParameters`` are decoded.
    A body that is not UTF-8 is passed base64-encoded (``isBase64Encoded``).
    """
    event = copy.deepcopy(load_event("enqueue_single.json"))
    parts = urlsplit(target)
    path = parts.path or "/"
    resource, path_parameters = "/{proxy+}", {"proxy": unquote(path.lstrip("/"))}
    for pattern, name in _RESOURCES:
        match = pattern.match(path)
        if match:
            resource = name
            path_parameters = {k: unquote(v) for k, v in match.groupdict().items()} or None
            break
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for name, value in headers:
        single[name] = value
        multi.setdefault(name, []).append(value)
    query = parse_qsl(parts.query, keep_blank_values=True)
    multi_query: dict[str, list[str]] = {}
    for name, value in query:
        multi_query.setdefault(name, []).append(value)
    try:
        text, encoded = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode("ascii"), True
    context = event["requestContext"]
    context.update(resourcePath=resource, httpMethod=method, path=f"/{context['stage']}{path}",
                   requestId=str(uuid.uuid4()), requestTimeEpoch=int(time.time() * 1000))
    event.update(
        resource=resource, path=path, httpMethod=method, headers=single or None,
        multiValueHeaders=multi or None, queryStringParameters=dict(query) or None,
        multiValueQueryStringParameters=multi_query or None, pathParameters=path_parameters,
        body=text if body else None, isBase64Encoded=encoded)
    return event


class _Gateway(BaseHTTPRequestHandler):
    # One request per connection: a kept-alive connection would hold the (single-threaded)
    # server in its handler and keep shutdown() waiting.
    protocol_version = "HTTP/1.0"
    timeout = 30
    server: LocalApi

    def _invoke(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        event = proxy_event(self.command, self.path, list(self.headers.items()), body)
        self.server.events.append(event)
        try:
            # A GET /jobs/{id}?wait= long poll lasts until the job finishes or the time left
            # is short: an invocation of 3 s keeps a fuzzed wait of a pending job short.
            waits = "wait" in (event.get("queryStringParameters") or {})
            result = self.server.app.lambda_handler(
                event, LambdaContext("pgdrain-enqueue", timeout_seconds=3.0 if waits else 60.0))
        except Exception as exc:  # the invocation failed: API Gateway answers 502
            self.server.crashes.append((event, exc))
            result = {"statusCode": 502, "headers": {"Content-Type": "application/json"},
                      "body": json.dumps({"message": "Internal server error"})}
        raw = result.get("body") or ""
        payload = base64.b64decode(raw) if result.get("isBase64Encoded") else raw.encode()
        self.send_response(result["statusCode"])
        headers = {k: [v] for k, v in (result.get("headers") or {}).items()}
        headers.update(result.get("multiValueHeaders") or {})
        for name, values in headers.items():
            if name.lower() != "content-length":
                for value in values:
                    self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _invoke

    def log_message(self, format: str, *args: Any) -> None:
        pass


class LocalApi(HTTPServer):
    """One enqueue function behind a local HTTP port, one request at a time (like a Lambda)."""

    def __init__(self, app: Any):
        super().__init__(("127.0.0.1", 0), _Gateway)
        self.app = app
        self.events: list[dict] = []
        self.crashes: list[tuple[dict, BaseException]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def api(load_function) -> Iterator[LocalApi]:
    server = LocalApi(load_function("enqueue"))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def seed_jobs(conn) -> list[int]:
    """Jobs in every state, so GET and retry meet 200, 404 and 409 alike."""
    results = pgdrain.enqueue_many(conn, [
        {"job_type": "test-noop"},
        {"job_type": "test-noop", "dedupe_key": "seeded", "priority": -3, "queue": "q"},
        {"job_type": "test-sleep", "payload": {"seconds": 0, "nested": {"a": [1, None]}}},
        {"job_type": "test-boom", "delay_seconds": 3600},
        {"job_type": "test-boom"},
        {"job_type": "test-noop"},
    ])
    ids = [r.id for r in results]
    conn.run("UPDATE jobs SET status = 'running', attempts = 1, claimed_at = now(), "
             "lease_expires_at = now() + interval '1 hour', lease_token = gen_random_uuid() "
             "WHERE id = :id", id=ids[2])
    conn.run("UPDATE jobs SET status = 'failed', attempts = 3, finished_at = now(), "
             "last_error = 'boom', errors = jsonb_build_array(jsonb_build_object("
             "'attempt', 3, 'at', now(), 'error', 'boom')) WHERE id = ANY(:ids)",
             ids=[ids[3], ids[4]])
    conn.run("UPDATE jobs SET status = 'done', attempts = 1, finished_at = now() "
             "WHERE id = :id", id=ids[5])
    return ids


def table(sql) -> list[dict]:
    return sql("SELECT * FROM jobs ORDER BY id")


# --- schemathesis through the local gateway ------------------------------------------------


OPERATIONS = [("POST", "/jobs"), ("GET", "/jobs/{id}"), ("POST", "/jobs/{id}/retry")]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                         ids=["positive", "negative"])
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=lambda v: v.strip("/"))
def test_schemathesis(api, conn, sql, method, path, mode):
    seeded = seed_jobs(conn)
    document = openapi_document(pgdrain.REGISTRY)  # the types the loaded function knows
    view_fields = set(document["components"]["schemas"]["JobView"]["properties"])
    view_required = set(document["components"]["schemas"]["JobView"]["required"])
    operation = schemathesis.openapi.from_dict(document)[path][method]
    session = requests.Session()
    state: dict[str, Any] = {}

    def refusals_change_nothing(ctx, response, case) -> None:
        if 400 <= response.status_code < 500:
            after = table(sql)
            assert after == state["before"], (
                f"a {response.status_code} changed the jobs table: "
                f"{len(state['before'])} rows before, {len(after)} after")

    def enqueued_rows_exist(ctx, response, case) -> None:
        if case.method == "POST" and case.path == "/jobs" and response.status_code in (200, 201):
            body = response.json()
            created = body.get("created", [True] * len(body["ids"]))
            after = {row["id"]: row for row in table(sql)}
            assert len(after) == len(state["before"]) + sum(created)
            assert all(i in after for i in body["ids"])
            assert (response.status_code == 201) == any(created)

    def job_view_is_the_documented_fields(ctx, response, case) -> None:
        if case.path != "/jobs" and response.status_code == 200:
            # payload_error / errors_error appear only for a row Python cannot decode.
            assert view_required <= set(response.json()) <= view_fields, \
                "JobView and job_get disagree"

    def run(case) -> None:
        state["before"] = table(sql)
        response = case.call(base_url=api.url, session=session, timeout=30)
        case.validate_response(response, checks=[
            *CHECKS, refusals_change_nothing, enqueued_rows_exist,
            job_view_is_the_documented_fields])

    @FUZZ
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case) -> None:
        run(case)

    with session:
        fuzz()
        if "{id}" in path:  # every seeded state, and the bounds of the id
            for ident in [*seeded, MAX_JOB_ID]:
                run(operation.Case(path_parameters={"id": ident}))
    assert not api.crashes, f"unhandled exceptions: {api.crashes[:3]}"
    assert len(api.events) > (EXAMPLES if mode is GenerationMode.POSITIVE else 0) // 2


def test_gateway_events_have_the_shape_of_the_event_files(api, conn):
    """The adapter's events are what API Gateway sends (the keys of events/*.json)."""
    body = {"job_type": "test-noop", "payload": {"n": 1}}
    response = requests.post(f"{api.url}/jobs?x=1&x=2", json=body, timeout=30,
                             headers={"Idempotency-Key": "fuzz-shape"})
    assert response.status_code == 201, response.text
    [ident] = response.json()["ids"]
    assert requests.get(f"{api.url}/jobs/{ident}", timeout=30).json()["dedupe_key"] == "fuzz-shape"
    assert requests.get(f"{api.url}/jobs/{MAX_JOB_ID + 1}", timeout=30).status_code == 400
    assert requests.post(f"{api.url}/jobs/{ident}/retry", timeout=30).status_code == 409
    delete = requests.delete(f"{api.url}/jobs", timeout=30)
    assert (delete.status_code, delete.headers["Allow"]) == (405, "POST")
    post, get, retry = api.events[0], api.events[1], api.events[3]
    template = load_event("enqueue_single.json")
    assert set(post) == set(template)
    assert set(post["requestContext"]) == set(template["requestContext"])
    assert (post["resource"], post["path"], post["httpMethod"]) == ("/jobs", "/jobs", "POST")
    assert post["multiValueQueryStringParameters"] == {"x": ["1", "2"]}
    assert json.loads(post["body"]) == body and post["isBase64Encoded"] is False
    assert (get["resource"], get["pathParameters"]) == ("/jobs/{id}", {"id": str(ident)})
    assert retry["resource"] == "/jobs/{id}/retry"


def test_a_body_that_is_not_utf8_arrives_base64_encoded_and_is_refused(api, sql):
    response = requests.post(f"{api.url}/jobs", data=b'{"job_type": "\xff"}', timeout=30,
                             headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert "UTF-8" in response.json()["error"]
    assert api.events[-1]["isBase64Encoded"] is True
    assert table(sql) == []


# --- defects the fuzzer found, fixed: each stays as a regression test -------------------------


def test_a_non_ascii_digit_id_is_refused_with_400(load_function):
    app = load_function("enqueue")
    event = {**load_event("job_get.json"), "path": "/jobs/²", "pathParameters": {"id": "²"}}
    response = app.lambda_handler(event, LambdaContext("pgdrain-enqueue"))
    assert response["statusCode"] == 400


def test_a_lone_surrogate_in_the_payload_is_refused_with_422():
    result = _parse('{"job_type": "plain", "payload": {"a": "\\ud800"}}',
                    content_type="application/json", idempotency_key=None)
    assert isinstance(result, ApiError) and result.status == 422


def test_an_integer_of_5000_digits_is_refused_with_400():
    result = _parse('{"job_type": "plain", "payload": {"a": ' + "9" * 5000 + "}}",
                    content_type="application/json", idempotency_key=None)
    assert isinstance(result, ApiError) and result.status == 400


@pytest.mark.parametrize("job", [
    '{"job_type": "test-noop", "queue": "\\ud800"}',
    '{"job_type": "test-noop", "dedupe_key": "\\udfff"}',
    '{"job_type": "test-noop", "run_at": "9999-12-31T23:59:59-23:59"}',
    '{"job_type": "test-noop", "run_at": "0001-01-01T00:00:00+23:59"}',
], ids=["queue-surrogate", "dedupe-key-surrogate", "run-at-after-9999", "run-at-before-1"])
def test_a_value_the_driver_cannot_encode_is_refused_and_the_connection_survives(api, sql, job):
    headers = {"Content-Type": "application/json"}
    first = requests.post(f"{api.url}/jobs", data=job.encode(), headers=headers, timeout=30)
    then = requests.post(f"{api.url}/jobs", json={"job_type": "test-noop"}, timeout=30)
    assert (first.status_code < 500, then.status_code) == (True, 201), api.crashes


# --- parse_enqueue, directly ----------------------------------------------------------------


def _registry() -> Registry:
    registry = Registry()
    for handler in (Handler("plain", lambda job: None),
                    Handler("retried", lambda job: None, max_attempts=9),
                    Handler("typed", lambda job: None, payload_model=Greeting)):
        registry.register(handler)
    return registry


REGISTRY = _registry()
LIMITS = Limits(max_payload_bytes=2048, max_batch=4)
# Hypothesis leaves lone surrogates out of text by default, and its integers stay far below
# 4300 digits: both have their own regression tests above.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)
field_values = st.one_of(
    json_values, st.sampled_from(["plain", "typed", "retried", "", " ", "\x00", "default"]),
    st.integers(min_value=-2**63, max_value=2**63), st.floats(),
    st.datetimes(timezones=st.just(UTC)).map(datetime.isoformat),
    st.fixed_dictionaries({"to": st.text()}, optional={"times": json_values}))
job_like = st.dictionaries(st.sampled_from([*JOB_FIELDS, "jobs", "extra"]), field_values,
                           max_size=6)
documents = st.one_of(json_values, job_like,
                      st.fixed_dictionaries({"jobs": st.lists(job_like, max_size=6)}))
bodies = st.one_of(
    st.none(), st.text(), st.binary().map(lambda b: b.decode("latin-1")),
    documents.map(lambda d: json.dumps(d, allow_nan=True)),
    documents.map(lambda d: json.dumps(d)[: len(json.dumps(d)) // 2]),
)
content_types = st.one_of(st.none(), st.text(max_size=40), st.sampled_from([
    "application/json", "Application/JSON; charset=utf-8", "text/plain", "application/json;"]))
keys = st.one_of(st.none(), st.text(max_size=20), st.just(" "), st.just("k" * 600))


def _parse(body: str | None, *, base64_encoded: bool = False, content_type: str | None,
           idempotency_key: str | None, limits: Limits = LIMITS) -> EnqueueRequest | ApiError:
    try:
        return parse_enqueue(body, base64_encoded=base64_encoded, content_type=content_type,
                             idempotency_key=idempotency_key, registry=REGISTRY, limits=limits)
    except ApiError as exc:
        assert exc.status in REFUSALS, (exc.status, exc.message)
        assert exc.message and isinstance(exc.details, dict)
        json.dumps(exc.body())  # the body the function answers is JSON
        return exc


@FUZZ
@given(body=bodies, encode=st.sampled_from(["no", "yes", "marked only"]),
       content_type=content_types, key=keys)
def test_parse_enqueue_accepts_or_refuses_with_a_4xx(body, encode, content_type, key):
    if encode == "yes" and body is not None:
        body = base64.b64encode(body.encode("utf-8", "surrogatepass")).decode()
    result = _parse(body, base64_encoded=encode != "no", content_type=content_type,
                    idempotency_key=key)
    if isinstance(result, EnqueueRequest):
        assert 1 <= len(result.jobs) <= LIMITS.max_batch
        for job in result.jobs:
            assert job.job_type in REGISTRY
            assert len(job.payload_json.encode()) <= 6 * LIMITS.max_payload_bytes


@pytest.mark.parametrize("depth", [*range(20, 40, 3), *range(900, 1100, 7), 5000])
@pytest.mark.parametrize("job_type", ["plain", "typed"])
def test_parse_enqueue_survives_deep_nesting(depth, job_type):
    body = f'{{"job_type": "{job_type}", "payload": {{"to": {"[" * depth}{"]" * depth}}}}}'
    _parse(body, content_type="application/json", idempotency_key=None,
           limits=Limits(max_payload_bytes=10**6))


# Valid jobs, as a client would send them: every field within new_job's rules.
texts = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]),
                min_size=1, max_size=MAX_TEXT).filter(str.strip)
payload_strings = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]),
                          max_size=20)
payload_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) |
    st.floats(allow_nan=False, allow_infinity=False) | payload_strings,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(payload_strings, inner, max_size=3),
    max_leaves=10)
offsets = st.integers(-23 * 60 + 1, 23 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
when = st.one_of(
    st.fixed_dictionaries({}),
    st.fixed_dictionaries({"run_at": st.datetimes(timezones=offsets)}),
    st.fixed_dictionaries({"delay_seconds": st.integers(0, MAX_DELAY_SECONDS) |
                           st.floats(0, MAX_DELAY_SECONDS)}),
)
options = st.fixed_dictionaries({}, optional={
    "priority": st.integers(*SMALLINT), "queue": texts,
    "max_attempts": st.integers(1, MAX_INT),
    "dedupe_key": st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]),
                          min_size=1, max_size=MAX_DEDUPE_KEY).filter(str.strip)})
untyped_jobs = st.fixed_dictionaries(
    {"job_type": st.sampled_from(["plain", "retried"])},
    optional={"payload": st.dictionaries(payload_strings, payload_values, max_size=4)})
typed_jobs = st.fixed_dictionaries(
    {"job_type": st.just("typed"),
     "payload": st.fixed_dictionaries({"to": payload_strings}, optional={
         "times": st.integers(-10, 10), "tags": st.lists(payload_strings, max_size=3)})})
valid_jobs = st.builds(lambda job, opts, at: {**job, **opts, **at},
                       untyped_jobs | typed_jobs, options, when)
valid_keys = st.none() | st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e),
                                 min_size=1, max_size=MAX_IDEMPOTENCY_KEY)


def _wire(job: dict) -> dict:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in job.items()}


def _check_round_trip(sent: dict, got: NewJob, key: str | None) -> None:
    handler = REGISTRY.get(sent["job_type"])
    payload = sent.get("payload", {})
    if handler.payload_model is not None:
        payload = dump(parse_payload(handler.payload_model, payload))
    assert got.job_type == sent["job_type"]
    assert json.loads(got.payload_json) == payload
    assert got.queue == sent.get("queue", "default")
    assert got.priority == sent.get("priority", 0)
    assert got.max_attempts == sent.get("max_attempts", handler.max_attempts or 3)
    assert got.run_at == sent.get("run_at")
    assert math.isclose(got.delay_seconds, sent.get("delay_seconds", 0))
    assert got.dedupe_key == sent.get("dedupe_key", key)


@FUZZ
@given(job=valid_jobs, key=valid_keys)
def test_a_valid_job_round_trips(job, key):
    if key is not None and "dedupe_key" in job:
        job["dedupe_key"] = key  # the header and the body must agree
    body = json.dumps(_wire(job))
    result = parse_enqueue(body, content_type="application/json", idempotency_key=key,
                           registry=REGISTRY, limits=Limits())
    assert not result.batch
    [got] = result.jobs
    _check_round_trip(job, got, key)


@FUZZ
@given(jobs=st.lists(valid_jobs, min_size=1, max_size=LIMITS.max_batch), key=valid_keys,
       encoded=st.booleans())
def test_a_valid_batch_round_trips(jobs, key, encoded):
    body = json.dumps({"jobs": [_wire(job) for job in jobs]})
    if encoded:
        body = base64.b64encode(body.encode()).decode()
    result = parse_enqueue(body, base64_encoded=encoded, content_type="application/json",
                           idempotency_key=key, registry=REGISTRY,
                           limits=Limits(max_batch=LIMITS.max_batch))
    assert result.batch and len(result.jobs) == len(jobs)
    for i, (sent, got) in enumerate(zip(jobs, result.jobs, strict=True)):
        _check_round_trip(sent, got, f"{key}:{i}" if key is not None else None)
