"""The schedule routes of the enqueue function (``/schedules``), fed API Gateway events as
events/schedule_*.json hold them: a schedule made at run time created, changed, listed, shown,
paused, resumed and deleted by a name percent-encoded in the path; bad input refused with a
JSON error and nothing written."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

import pgdrain
from pgdrain_dev.context import LambdaContext
from tests.support.functions import load_event


@pytest.fixture
def app(load_function):
    return load_function("enqueue")


def call(app, event):
    response = app.lambda_handler(event, LambdaContext("pgdrain-enqueue"))
    return response["statusCode"], json.loads(response["body"])


def schedule_event(name: str, method: str, action: str | None = None, *,
                   body: str | None = None) -> dict:
    """The event API Gateway passes for ``/schedules/{name}[/action]``: the path
    percent-encoded, ``pathParameters`` decoded."""
    event = load_event("schedule_set.json")
    event["httpMethod"] = method
    event["path"] = f"/schedules/{quote(name, safe='')}" + (f"/{action}" if action else "")
    event["requestContext"]["path"] = "/Prod" + event["path"]
    event["pathParameters"] = {"name": name}
    event["body"] = body
    return event


def stored(sql) -> list[dict]:
    return sql("SELECT name, cron, tz, job_type, payload, options, paused_at IS NOT NULL AS "
               "paused FROM pgdrain_schedules WHERE source = 'stored' ORDER BY name")


def test_the_event_files_create_list_pause_and_delete_a_schedule(app, sql):
    status, body = call(app, load_event("schedule_set.json"))
    assert status == 201, body
    assert (body["name"], body["cron"], body["tz"], body["job_type"], body["payload"],
            body["queue"], body["source"], body["paused"]) == (
        "report:customer-42", "0 9 * * mon-fri", "Europe/Paris", "echo", {"customer": 42},
        "reports", "stored", False)
    assert body["next_run"].endswith("+00:00")
    status, body = call(app, load_event("schedule_set.json"))
    assert status == 200, body  # the same again: changed, not created
    status, body = call(app, load_event("schedule_list.json"))
    assert status == 200
    assert [(e["name"], e["source"]) for e in body["schedules"]] == [
        ("report:customer-42", "stored")]
    status, body = call(app, load_event("schedule_pause.json"))
    assert (status, body["paused"], body["next_run"]) == (200, True, None)
    assert stored(sql)[0]["paused"] is True
    status, body = call(app, load_event("schedule_resume.json"))
    assert (status, body["paused"]) == (200, False)
    status, body = call(app, load_event("schedule_get.json"))
    assert (status, body["name"]) == (200, "report:customer-42")
    status, body = call(app, load_event("schedule_delete.json"))
    assert (status, body) == (200, {"name": "report:customer-42", "deleted": True})
    assert stored(sql) == []


@pytest.mark.parametrize("name", ["report/customer 42", "rapport:client-é", "a%2Fb", "x" * 200])
def test_names_travel_percent_encoded(app, sql, name):
    status, body = call(app, schedule_event(name, "PUT", body=json.dumps(
        {"cron": "*/5 * * * *", "job_type": "echo"})))
    assert (status, body["name"]) == (201, name)
    assert [r["name"] for r in stored(sql)] == [name]
    status, body = call(app, schedule_event(name, "GET"))
    assert (status, body["cron"]) == (200, "*/5 * * * *")


@pytest.mark.parametrize(("name", "body", "status", "field"), [
    ("r", '{"cron": "* * *", "job_type": "echo"}', 422, "cron"),
    ("r", '{"cron": "* * * * *", "job_type": "echo", "tz": "Mars/Base"}', 422, "tz"),
    ("r", '{"cron": "* * * * *", "job_type": "echo", "priority": "high"}', 422, "priority"),
    ("r", '{"cron": "* * * * *", "job_type": "echo", "payload": [1]}', 422, "payload"),
    ("r", '{"cron": "* * * * *", "job_type": "echo", "colour": "red"}', 422, "colour"),
    ("r", '{"job_type": "echo"}', 422, "cron"),
    ("r", '{"cron": "* * * * *"}', 422, "job_type"),
    ("r", "[1]", 422, None),
    ("r", "{not json", 400, None),
    (" r", '{"cron": "* * * * *", "job_type": "echo"}', 422, "name"),
    ("a\u0007b", '{"cron": "* * * * *", "job_type": "echo"}', 422, "name"),
    ("x" * 201, '{"cron": "* * * * *", "job_type": "echo"}', 422, "name"),
])
def test_bad_input_is_refused_with_a_json_error_and_nothing_written(app, sql, name, body,
                                                                   status, field):
    answer_status, answer = call(app, schedule_event(name, "PUT", body=body))
    assert answer_status == status, answer
    assert answer["error"]
    if field is not None:
        assert answer["details"]["field"] == field
    assert stored(sql) == []


def test_unknown_names_are_404_and_declared_names_409(app, conn):
    for method, action in (("GET", None), ("POST", "pause"), ("POST", "resume"),
                           ("DELETE", None)):
        status, body = call(app, schedule_event("nobody", method, action))
        assert status == 404 and "nobody" in body["error"], (method, action, body)
    registry = pgdrain.Registry()
    pgdrain.schedule("0 * * * *", "echo", name="hourly", registry=registry)
    from pgdrain.scheduler import declare

    declare(conn, registry)
    status, body = call(app, schedule_event("hourly", "PUT", body=json.dumps(
        {"cron": "* * * * *", "job_type": "echo"})))
    assert status == 409 and "declared by a job module" in body["error"]
    status, body = call(app, load_event("schedule_list.json"))
    assert [(e["name"], e["source"]) for e in body["schedules"]] == [("hourly", "declared")]


def test_other_methods_on_a_schedule_are_405(app):
    status, body = call(app, schedule_event("r", "PATCH"))
    assert status == 405 and body["details"]["allow"] == "DELETE, GET, PUT"
