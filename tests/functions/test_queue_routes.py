"""The queue routes of the enqueue function (``POST /queues/{queue}/pause|resume``, ``PUT
/queues/{queue}``) and the job routes, fed API Gateway events as events/*.json hold them, for
names and ids an attacker picks: API Gateway delivers the path percent-encoded and the path
parameters decoded, whatever the name holds."""

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


# Names a job can have (POST /jobs takes them) that the routes did not match: they answered
# 400 "the job id must be an integer", so such a queue could not be paused or capped.
@pytest.mark.parametrize("name", [
    "\x1b[2Jx", "evil\u202etxt", "a b", "100%", "a/b", "jobs", "pause", "ünï cödé", "\x07\r"])
def test_any_name_a_job_can_have_can_be_paused_resumed_and_set(app, conn, sql, name):
    post_job(app, name)
    status, body, _ = call(app, queue_event(name, "pause"))
    assert (status, body["queue"], body["paused"]) == (200, name, True), body
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []
    status, body, _ = call(app, queue_event(name, "resume"))
    assert (status, body) == (200, {"queue": name, "paused": False, "paused_at": None})
    status, body, _ = call(app, queue_event(name, body='{"max_running": 2, "rate": "5/min"}'))
    assert (status, body["queue"], body["max_running"], body["rate"]) == (200, name, 2,
                                                                          "5/min"), body
    assert queue_rows(sql) == [{"queue": name, "paused": False, "max_running": 2,
                                "rate_limit": 5, "rate_period": 60.0}]


@pytest.mark.parametrize(("name", "encoded"), [
    ("a\x00b", None),                   # NUL: no job can have it
    ("\ud800", "%ED%A0%80"),            # a lone surrogate: not valid Unicode
    ("", "%FF"),                        # a byte that is not UTF-8
])
def test_a_name_no_queue_can_have_is_a_422_naming_queue_on_every_queue_route(app, sql, name,
                                                                              encoded):
    for action, body in (("pause", None), ("resume", None), (None, '{"max_running": 2}')):
        status, answer, _ = call(app, queue_event(name, action, body=body, encoded=encoded))
        assert status == 422, (action, answer)
        assert answer["details"] == {"field": "queue"}, answer
        assert answer["error"].startswith("queue: "), answer
    assert queue_rows(sql) == []


def test_a_raw_name_in_the_path_is_read_as_it_is(app, sql):
    # A hand-written event (or sam local) may carry the name unencoded in the path.
    post_job(app, "\x1b]0;owned\x07")
    event = queue_event("\x1b]0;owned\x07", "pause", encoded="\x1b]0;owned\x07")
    status, body, _ = call(app, event)
    assert (status, body["queue"]) == (200, "\x1b]0;owned\x07")
    event = queue_event("\x00", "pause", encoded="\x00")
    assert call(app, event)[0] == 422


def test_put_refuses_a_body_declared_other_than_json_as_post_jobs_does(app, sql):
    post_job(app, "emails")
    for content_type, why in (("text/plain", "Content-Type must be application/json"),
                              ("application/json; charset=latin-1",
                               "the body must be UTF-8 JSON")):
        event = queue_event("emails", body='{"max_running": 2}',
                            headers={"Content-Type": content_type})
        status, body, _ = call(app, event)
        assert status == 415 and body["error"].startswith(why), body
        assert body["details"] == {"content_type": content_type}
        enqueue = load_event("enqueue_single.json")
        enqueue["headers"]["Content-Type"] = content_type
        assert call(app, enqueue)[:2] == (status, body)  # the same answer as POST /jobs
    assert queue_rows(sql) == []
    # No Content-Type at all is read as JSON, as POST /jobs reads it.
    event = queue_event("emails", body='{"max_running": 2}')
    del event["headers"]["Content-Type"], event["multiValueHeaders"]["Content-Type"]
    assert call(app, event)[0] == 200


def test_trailing_slashes_and_a_queue_named_like_a_route(app, conn, sql):
    post_job(app, "jobs")
    job = post_job(app, "pause")
    event = queue_event("jobs", "pause")
    event["path"] += "/"
    assert call(app, event)[:2][0] == 200
    status, body, _ = call(app, queue_event("pause", body='{"max_running": 1}'))
    assert (status, body["queue"]) == (200, "pause")
    # POST on /queues/pause is not a route: PUT is (a queue named "pause").
    event = queue_event("pause", body='{"max_running": 1}')
    event["httpMethod"] = "POST"
    status, body, response = call(app, event)
    assert (status, response["multiValueHeaders"]["Allow"]) == (405, ["PUT"])
    get = load_event("job_get.json")
    get["path"], get["pathParameters"] = f"/jobs/{job}/", {"id": str(job)}
    status, body, _ = call(app, get)
    assert (status, body["id"], body["queue"]) == (200, job, "pause")


@pytest.mark.parametrize("raw", ["1%0A", "%E2%80%AE1", "%00", "1%2F2", "%FF", "+1", "1 "])
def test_an_odd_id_in_the_path_is_a_400_naming_it(app, conn, raw):
    pgdrain.enqueue(conn, "test-noop")  # job 1 exists: none of these may find it
    for file, suffix in (("job_get.json", ""), ("job_retry.json", "/retry"),
                         ("job_cancel.json", "/cancel")):
        event = load_event(file)
        event["path"] = f"/jobs/{raw}{suffix}"
        status, body, _ = call(app, event)
        assert status == 400, (file, raw, body)
        assert body["error"] == "the job id must be an integer from 1 to 9223372036854775807"


def test_a_percent_encoded_id_is_the_id(app, conn):
    ident = pgdrain.enqueue(conn, "test-noop").id
    event = load_event("job_get.json")
    event["path"] = "/jobs/" + "".join(f"%{ord(c):02X}" for c in str(ident))
    status, body, _ = call(app, event)
    assert (status, body["id"]) == (200, ident)
