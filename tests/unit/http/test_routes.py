"""The route table: the template routes exactly these, the resolver and the 405's Allow use
the same patterns, and the OpenAPI document describes the enqueue function's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from samtranslator.yaml_helper import yaml_parse

from pgdrain.http.routes import ROUTES, allowed_methods, routes_of

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
])
def test_allowed_methods(path, methods):
    assert allowed_methods(path, "enqueue") == methods


def test_paths_in_the_resolver_syntax():
    assert [r.powertools_path for r in routes_of("enqueue")] == [
        "/jobs", "/jobs/<id>", "/jobs/<id>/retry", "/jobs/<id>/cancel",
        "/queues/<queue>/pause", "/queues/<queue>/resume", "/queues/<queue>"]


def test_operation_ids_are_unique():
    assert len({r.operation_id for r in ROUTES}) == len(ROUTES)
