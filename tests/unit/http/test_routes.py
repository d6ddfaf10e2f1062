"""The route table: the template routes exactly these, a request finds its route (and a
405's Allow its methods) by the same match of the decoded path, and the OpenAPI document
describes the enqueue function's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from samtranslator.yaml_helper import yaml_parse

from pgdrain.http.routes import ROUTES, allowed_methods, match, path_segments

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = yaml_parse((ROOT / "template.yaml").read_text())
FUNCTIONS = {"DrainFunction": "drain", "EnqueueFunction": "enqueue"}


def template_routes() -> set[tuple[str, str, str]]:
    routes = set()
    for name, resource in TEMPLATE["Resources"].items():
        for event in resource.get("Properties", {}).get("Events", {}).values():
            if event["Type"] == "Api":
                props = event["Properties"]
                routes.add((props["Method"].upper(), props["Path"], FUNCTIONS[name]))
    return routes


def test_the_template_routes_exactly_the_table():
    assert template_routes() == {(r.method, r.path, r.function) for r in ROUTES}


def test_the_openapi_document_describes_every_route():
    document = json.loads((ROOT / "docs" / "openapi.json").read_text())
    described = {(method.upper(), path, op["operationId"])
                 for path, ops in document["paths"].items()
                 for method, op in ops.items() if method != "parameters"}
    assert described == {(r.method, r.path, r.operation_id) for r in ROUTES}


@pytest.mark.parametrize(("path", "methods"), [
    ("/jobs", ["POST"]), ("/jobs/", ["POST"]), ("/jobs/42", ["GET"]),
    ("/jobs/42/retry", ["POST"]), ("/jobs/abc", ["GET"]),  # the id is checked by the route
    ("/jobs//retry", []), ("/jobs/1/2", []), ("/drain", []), ("/nope", []),
    ("/queues/%1B/pause", ["POST"]), ("/queues/a%2Fb", ["PUT"]), ("/queues/\x00", ["PUT"]),
    ("/queues//pause", []), ("/queues/pause", ["PUT"]), ("/queues/jobs/resume", ["POST"]),
])
def test_allowed_methods(path, methods):
    assert allowed_methods(path, "enqueue") == methods


@pytest.mark.parametrize(("method", "path", "operation", "params"), [
    # API Gateway delivers the path percent-encoded: each segment is decoded after the split.
    ("POST", "/queues/%1B%5B2J/pause", "pauseQueue", {"queue": "\x1b[2J"}),
    ("POST", "/queues/evil%E2%80%AEtxt/resume", "resumeQueue", {"queue": "evil\u202etxt"}),
    ("PUT", "/queues/a%20b", "setQueue", {"queue": "a b"}),
    ("PUT", "/queues/a%2Fb", "setQueue", {"queue": "a/b"}),
    ("PUT", "/queues/100%", "setQueue", {"queue": "100%"}),
    ("PUT", "/queues/jobs/", "setQueue", {"queue": "jobs"}),
    ("POST", "/queues/\x00/pause", "pauseQueue", {"queue": "\x00"}),  # the route refuses it
    # Not UTF-8: lone surrogates, which the name and id checks refuse (not U+FFFD, a name).
    ("PUT", "/queues/%FF", "setQueue", {"queue": "\udcff"}),
    ("GET", "/jobs/%31%32", "getJob", {"id": "12"}),
    ("GET", "/jobs/1%0A", "getJob", {"id": "1\n"}),
    ("POST", "/jobs/", "enqueueJobs", {}),
    ("post", "/jobs/7/cancel", "cancelJob", {"id": "7"}),
])
def test_a_path_matches_its_route_whatever_a_parameter_holds(method, path, operation, params):
    found = match(method, path, "enqueue")
    assert found is not None and (found.route.operation_id, found.params) == (operation, params)


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/queues/x/pause"), ("POST", "/queues/x"), ("POST", "/drain"), ("GET", "/"),
    ("GET", ""), ("POST", "/queues//pause"), ("GET", "/jobs/1/2"), ("GET", "/jobs//"),
])
def test_no_route(method, path):
    assert match(method, path, "enqueue") is None


def test_path_segments():
    assert path_segments("/queues/a%2Fb/pause/") == ["queues", "a/b", "pause"]
    assert path_segments("/") == [""]


def test_operation_ids_are_unique():
    assert len({r.operation_id for r in ROUTES}) == len(ROUTES)
