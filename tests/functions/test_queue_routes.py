"""The queue routes of the enqueue function (``POST /queues/{queue}/pause|resume``, ``PUT
/queues/{queue}``) and the job routes, fed API Gateway events as events/*.json hold them, for
names and ids an attacker picks: API Gateway delivers the path percent-encoded and the path
parameters decoded, whatever the name holds."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from pgdrain_dev.context import LambdaContext
from tests.support.functions import load_event


@pytest.fixture
def app(load_function):
    return load_function("enqueue")


def call(app, event):
    response = app.lambda_handler(event, LambdaContext("pgdrain-enqueue"))
    return response["statusCode"], json.loads(response["body"]), response


def queue_event(name: str, action: str | None = None, *, body: str | None = None,
                encoded: str | None = None, headers: dict[str, str] | None = None) -> dict:
    """The event API Gateway passes for ``/queues/{name}[/action]``: the path percent-encoded
    (``encoded`` when quote() cannot write it), ``pathParameters`` decoded."""
    file = {"pause": "queue_pause.json", "resume": "queue_resume.json",
            None: "queue_set.json"}[action]
    event = load_event(file)
    segment = encoded if encoded is not None else quote(name, safe="")
    event["path"] = f"/queues/{segment}" + (f"/{action}" if action else "")
    event["requestContext"]["path"] = "/Prod" + event["path"]
    event["pathParameters"] = {"queue": name}
    if body is not None:
        event["body"] = body
    for header, value in (headers or {}).items():
        event["headers"][header] = value
        event["multiValueHeaders"][header] = [value]
    return event


def post_job(app, queue: str) -> int:
    event = load_event("enqueue_single.json")
    event["body"] = json.dumps({"job_type": "test-noop", "queue": queue})
    status, body, _ = call(app, event)
    assert status == 201, body
    return body["ids"][0]


def queue_rows(sql) -> list[dict]:
    return sql("SELECT queue, paused_at IS NOT NULL AS paused, max_running, rate_limit, "
               "rate_period FROM pgdrain_queues ORDER BY queue")


@pytest.mark.parametrize("rate", [
    "9" * 5000 + "/s",   # int() of more than 4,300 digits raised ValueError: it answered 500
    "1/0.5s", "1/0.000001s",  # under a second, though the docs say a second to a day
    "1/" + "9" * 5000 + "s",
])
def test_a_rate_no_queue_can_have_is_a_422_naming_rate_and_changes_nothing(app, sql, rate):
    post_job(app, "emails")
    status, body, _ = call(app, queue_event("emails", body=json.dumps({"rate": rate})))
    assert status == 422, body
    assert body["details"] == {"field": "rate"}
    assert len(body["error"]) < 300, body["error"]  # the rate quoted cut short
    assert queue_rows(sql) == []


def test_a_rate_of_a_second_or_more_is_set(app, sql):
    post_job(app, "emails")
    status, body, _ = call(app, queue_event("emails", body='{"rate": "1/1.5s"}'))
    assert (status, body["rate"]) == (200, "1/1.5s")
    status, body, _ = call(app, queue_event("emails", body='{"rate": "1/0.5min"}'))
    assert (status, body["rate"]) == (200, "1/30s")
