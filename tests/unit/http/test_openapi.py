"""The enqueue API's OpenAPI document: docs/openapi.json is what the code builds now, it is
valid OpenAPI 3.1, and it states the rules the parser enforces."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from referencing import Registry as SchemaRegistry
from referencing import Resource
from referencing.jsonschema import DRAFT202012

import pgdrain
from pgdrain.errors import InvalidJobError
from pgdrain.http.openapi import (
    MAX_DELAY_SECONDS,
    MAX_IDEMPOTENCY_KEY,
    dumps,
    openapi_document,
)
from pgdrain.http.requests import JOB_FIELDS, ApiError, Limits, parse_enqueue
from pgdrain.payload import json_schema
from pgdrain.registry import Handler, Registry
from tests.support.functions import load_event

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "docs" / "openapi.json"
BODY_SCHEMA = "#/paths/~1jobs/post/requestBody/content/application~1json/schema"


@dataclass(frozen=True)
class Email:
    """An email to send."""

    to: str
    cc: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Optional:
    verbose: bool = False


def _noop(job):
    """Does nothing.

    A second paragraph that the document leaves out.
    """


def _report(job):
    pass


def typed_registry() -> Registry:
    # Registry.register, not @pgdrain.job(registry=...): job() falls back to the global
    # REGISTRY when handed an empty (so falsy) Registry.
    registry = Registry()
    for handler in (Handler("send-email", _noop, payload_model=Email),
                    Handler("report", _report, max_attempts=7, payload_model=Optional),
                    Handler("plain", _noop),
                    # Not valid component names, and colliding once made valid.
                    Handler("a b", _noop), Handler("a_b", _noop), Handler("ünïcode/type", _noop)):
        registry.register(handler)
    return registry


def validator(document: dict, pointer: str = BODY_SCHEMA) -> Draft202012Validator:
    """A JSON Schema validator for the schema at ``pointer`` inside ``document``."""
    resource = Resource.from_contents(document, default_specification=DRAFT202012)
    registry = SchemaRegistry().with_resource("urn:pgdrain:openapi", resource)
    return Draft202012Validator({"$ref": f"urn:pgdrain:openapi{pointer}"}, registry=registry)


# --- the committed document ------------------------------------------------------------------


def test_docs_openapi_json_is_what_the_code_builds_now():
    jobs = re.search(r"^OPENAPI_JOBS := (\S+)$", (ROOT / "Makefile").read_text(), re.M)[1]
    built = subprocess.run([sys.executable, "-m", "pgdrain.http.openapi", "--jobs", jobs],
                           cwd=ROOT, check=True, capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(
                               [str(ROOT / "layers/pgdrain"), str(ROOT / "dev")]),
                                "PGDRAIN_JOBS": "tests.support.jobs"}).stdout
    assert COMMITTED.exists(), "docs/openapi.json is missing: run make openapi"
    assert COMMITTED.read_text(encoding="utf-8") == built, (
        "docs/openapi.json is out of date with the code: run make openapi")


def test_the_committed_document_is_valid_openapi_3_1():
    document = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert document["openapi"].startswith("3.1.")
    validate(document)


def test_the_documented_types_are_the_shipped_job_modules():
    document = json.loads(COMMITTED.read_text(encoding="utf-8"))
    mapping = document["components"]["schemas"]["Job"]["discriminator"]["mapping"]
    assert set(mapping) >= {"send-email", "generate-export", "sync-crm", "deliver-webhook"}
    assert not any(t.startswith("test-") for t in mapping)  # PGDRAIN_JOBS did not leak in


# --- the document for any registry ---------------------------------------------------------


@pytest.mark.parametrize("registry", [typed_registry(), Registry()], ids=["typed", "empty"])
def test_documents_are_valid_openapi_3_1_and_deterministic(registry):
    document = openapi_document(registry)
    validate(document)
    assert dumps(document) == dumps(openapi_document(registry))
    assert json.loads(dumps(document)) == document  # plain JSON data


def test_routes_operations_and_responses():
    document = openapi_document(typed_registry())
    paths = document["paths"]
    assert {path: sorted(k for k in ops if k != "parameters") for path, ops in paths.items()} == {
        "/jobs": ["post"], "/jobs/{id}": ["get"], "/jobs/{id}/retry": ["post"],
        "/jobs/cancel": ["post"], "/jobs/requeue": ["post"], "/jobs/delete": ["post"],
        "/jobs/{id}/cancel": ["post"], "/queues/{queue}/pause": ["post"],
        "/queues/{queue}/resume": ["post"], "/queues/{queue}": ["put"],
        "/signals/{name}": ["post"], "/drain": ["post"], "/schedules": ["get"],
        "/schedules/{name}": ["delete", "get", "put"], "/schedules/{name}/pause": ["post"],
        "/schedules/{name}/resume": ["post"]}
    codes = {(path, method): set(op["responses"])
             for path, ops in paths.items() for method, op in ops.items() if method != "parameters"}
    gateway = {"403", "429"}  # API Gateway's own answers
    failures = {"500", "503"}  # the function's own: unexpected, and the database
    assert codes == {
        ("/jobs", "post"): {"200", "201", "400", "413", "415", "422", *failures, *gateway},
        ("/jobs/{id}", "get"): {"200", "400", "404", *failures, *gateway},
        **{(f"/jobs/{action}", "post"): {"200", "400", "415", "422", *failures, *gateway}
           for action in ("cancel", "requeue", "delete")},
        ("/jobs/{id}/retry", "post"): {"200", "400", "404", "409", *failures, *gateway},
        ("/jobs/{id}/cancel", "post"): {"200", "400", "404", "409", *failures, *gateway},
        ("/queues/{queue}/pause", "post"): {"200", "404", "422", *failures, *gateway},
        ("/queues/{queue}/resume", "post"): {"200", "404", "422", *failures, *gateway},
        ("/queues/{queue}", "put"): {"200", "400", "404", "415", "422", *failures, *gateway},
        ("/signals/{name}", "post"): {"200", "400", "415", "422", *failures, *gateway},
        ("/drain", "post"): {"200", "202", "405", *failures, *gateway},
        ("/schedules", "get"): {"200", *failures, *gateway},
        ("/schedules/{name}", "get"): {"200", "404", "422", *failures, *gateway},
        ("/schedules/{name}", "put"): {"200", "201", "400", "409", "415", "422", *failures,
                                       *gateway},
        ("/schedules/{name}", "delete"): {"200", "404", "422", *failures, *gateway},
        ("/schedules/{name}/pause", "post"): {"200", "404", "422", *failures, *gateway},
        ("/schedules/{name}/resume", "post"): {"200", "404", "422", *failures, *gateway},
    }
    responses = document["components"]["responses"]
    for name, response in responses.items():
        schema = ("GatewayError" if name in ("Forbidden", "TooManyRequests") else
                  "ServerError" if name in ("Unavailable", "InternalError") else "Error")
        assert response["content"]["application/json"]["schema"] == {
            "$ref": f"#/components/schemas/{schema}"}, name
    assert "Allow" in responses["MethodNotAllowed"]["headers"]
    error = document["components"]["schemas"]["Error"]
    assert error["required"] == ["error", "details"]
    assert error["properties"]["details"]["type"] == "object"
    server_error = document["components"]["schemas"]["ServerError"]
    assert server_error["required"] == ["error", "request_id"]


def test_aws_iam_security_scheme():
    document = openapi_document(Registry())
    assert document["security"] == [{"sigv4": []}]
    assert document["components"]["securitySchemes"]["sigv4"] == {
        "type": "apiKey", "name": "Authorization", "in": "header",
        "x-amazon-apigateway-authtype": "awsSigv4",
        "description": document["components"]["securitySchemes"]["sigv4"]["description"]}


def test_job_types_payload_models_and_defaults():
    registry = typed_registry()
    schemas = openapi_document(registry)["components"]["schemas"]
    job = schemas["Job"]
    refs = [item["$ref"].rsplit("/", 1)[1] for item in job["oneOf"]]
    assert job["discriminator"]["propertyName"] == "job_type"
    assert sorted(job["discriminator"]["mapping"]) == registry.job_types()
    # Every job type has a schema of its own; names are valid and distinct.
    assert len(set(refs)) == len(registry) == len(refs)
    assert refs == ["Job.a_b", "Job.a_b.2", "Job.plain", "Job.report", "Job.send-email",
                    "Job._n_code_type"]
    for name in refs:
        assert all((c.isalnum() and c.isascii()) or c in "._-" for c in name), name
        variant = schemas[name]
        assert list(variant["properties"]) == list(JOB_FIELDS)
        assert variant["additionalProperties"] is False
        job_type = variant["properties"]["job_type"]["const"]
        assert job["discriminator"]["mapping"][job_type] == f"#/components/schemas/{name}"

    by_type = {schemas[n]["properties"]["job_type"]["const"]: schemas[n] for n in refs}
    email = by_type["send-email"]
    assert email["properties"]["payload"] == {"$ref": "#/components/schemas/Payload.send-email"}
    assert schemas["Payload.send-email"] == json_schema(Email)
    assert email["required"] == ["job_type", "payload"]  # Email has a required field
    assert email["description"].startswith("Does nothing.\n\n")
    assert "second paragraph" not in email["description"]
    report = by_type["report"]
    assert report["required"] == ["job_type"]  # {} is a valid Optional
    assert report["properties"]["max_attempts"]["default"] == 7
    plain = by_type["plain"]
    assert plain["properties"]["payload"]["type"] == "object"
    assert plain["properties"]["max_attempts"]["default"] == 3
    assert "Payload.plain" not in schemas


def test_limits_are_stated():
    document = openapi_document(Registry(), limits=Limits(max_payload_bytes=1000, max_batch=7))
    schemas = document["components"]["schemas"]
    assert schemas["JobBatch"]["properties"]["jobs"]["maxItems"] == 7
    assert schemas["EnqueueResult"]["properties"]["ids"]["maxItems"] == 7
    assert openapi_document(Registry())["components"]["schemas"]["JobBatch"]["properties"][
        "jobs"]["maxItems"] == Limits().max_batch
    assert "At most 1000 bytes" in json.dumps(openapi_document(
        typed_registry(), limits=Limits(max_payload_bytes=1000)))


# --- the document states what the parser enforces ----------------------------------------


def test_the_delay_bound_is_new_jobs():
    pgdrain.new_job("t", delay_seconds=MAX_DELAY_SECONDS)
    for beyond in (MAX_DELAY_SECONDS + 1, MAX_DELAY_SECONDS + 0.001):
        with pytest.raises(InvalidJobError):
            pgdrain.new_job("t", delay_seconds=beyond)


def test_the_idempotency_key_bound_is_the_parsers():
    registry = typed_registry()

    def parse(key: str):
        return parse_enqueue('{"job_type": "plain"}', content_type="application/json",
                             idempotency_key=key, registry=registry, limits=Limits())

    assert parse("k" * MAX_IDEMPOTENCY_KEY).jobs[0].dedupe_key == "k" * MAX_IDEMPOTENCY_KEY
    with pytest.raises(ApiError) as refused:
        parse("k" * (MAX_IDEMPOTENCY_KEY + 1))
    assert refused.value.status == 422
    header = openapi_document(registry)["components"]["parameters"]["IdempotencyKey"]
    assert header["schema"]["maxLength"] == MAX_IDEMPOTENCY_KEY


@pytest.mark.parametrize("event", ["enqueue_single.json", "enqueue_batch.json",
                                   "enqueue_graph.json"])
def test_the_example_events_bodies_are_valid_requests(event):
    document = json.loads(COMMITTED.read_text(encoding="utf-8"))
    body = json.loads(load_event(event)["body"])
    assert not list(validator(document).iter_errors(body))


def test_the_invalid_example_event_is_invalid_by_the_document_too():
    document = json.loads(COMMITTED.read_text(encoding="utf-8"))
    body = json.loads(load_event("enqueue_invalid.json")["body"])
    assert list(validator(document).iter_errors(body))


@pytest.mark.parametrize(("body", "valid"), [
    ({"job_type": "send-email", "payload": {"to": "a@example.com"}}, True),
    ({"job_type": "send-email"}, False),  # the model's required "to"
    ({"job_type": "send-email", "payload": {"to": 1}}, False),
    ({"job_type": "send-email", "payload": {"to": "a", "bcc": []}}, False),
    ({"job_type": "report"}, True),
    ({"job_type": "plain", "payload": {"anything": [1, None]}, "priority": -32768}, True),
    ({"job_type": "plain", "priority": 32768}, False),
    ({"job_type": "plain", "max_attempts": 0}, False),
    ({"job_type": "plain", "run_at": "2030-01-31T09:00:00Z", "delay_seconds": 5}, False),
    ({"job_type": "plain", "run_at": "2030-01-31T09:00:00Z", "delay_seconds": None}, True),
    ({"job_type": "plain", "queue": "q" * 201}, False),
    ({"job_type": "plain", "queue": "a\x00b"}, False),
    ({"job_type": "plain", "dedupe_key": None}, True),
    ({"job_type": "plain", "colour": "red"}, False),
    ({"job_type": "unknown"}, False),
    ({"jobs": [{"job_type": "plain"}, {"job_type": "report"}]}, True),
    ({"jobs": []}, False),
    ({"jobs": [{"job_type": "plain"}], "extra": 1}, False),
])
def test_request_schema_agrees_with_the_parser(body, valid):
    """The document and parse_enqueue agree on these bodies."""
    registry = typed_registry()
    errors = list(validator(openapi_document(registry)).iter_errors(body))
    assert (not errors) is valid, errors
    try:
        parse_enqueue(json.dumps(body), content_type="application/json", idempotency_key=None,
                      registry=registry, limits=Limits())
    except ApiError as exc:
        assert not valid, exc.message
    else:
        assert valid
