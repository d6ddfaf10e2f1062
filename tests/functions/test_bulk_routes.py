"""``POST /jobs/cancel|requeue|delete`` of the enqueue function, fed the events/jobs_*.json
files: a filter counted first (nothing changes), then acted on up to the id counted; bad
filters answer 422 naming the field; tags and meta of ``POST /jobs`` are shown by
``GET /jobs/{id}``."""

from __future__ import annotations

import json

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


def bulk(app, action: str, body: dict | str):
    event = load_event(f"jobs_{action}.json")
    event["body"] = body if isinstance(body, str) else json.dumps(body)
    return call(app, event)


@pytest.mark.parametrize("action", ["cancel", "requeue", "delete"])
def test_each_event_file_counts_and_changes_nothing_without_upto(app, conn, sql, action):
    pgdrain.enqueue(conn, "test-noop", tags=["customer:42"])
    event = load_event(f"jobs_{action}.json")
    document = json.loads(event["body"])
    document.pop("upto", None)
    event["body"] = json.dumps(document)
    before = sql("SELECT id, status FROM jobs")
    status, body = call(app, event)
    assert status == 200, body
    assert body["action"] == action and {"count", "complete", "upto"} <= set(body)
    assert sql("SELECT id, status FROM jobs") == before


def test_enqueue_with_tags_and_meta_then_cancel_them_by_filter(app, conn, sql):
    event = load_event("enqueue_single.json")
    event["body"] = json.dumps({"jobs": [
        {"job_type": "test-noop", "tags": ["customer:42", "spring"], "meta": {"who": "ann"}},
        {"job_type": "test-noop", "tags": ["customer:42"]},
        {"job_type": "test-noop", "tags": ["customer:7"]}]})
    status, created = call(app, event)
    assert status == 201, created
    first, second, third = created["ids"]
    get = load_event("job_get.json")
    get["path"], get["pathParameters"] = f"/jobs/{first}", {"id": str(first)}
    status, job = call(app, get)
    assert (job["tags"], job["meta"]) == (["customer:42", "spring"], {"who": "ann"})

    status, counted = bulk(app, "cancel", {"filter": {"tags": ["customer:42"]}})
    assert (status, counted["count"], counted["complete"]) == (200, 2, True)
    assert counted["upto"] == third
    later = pgdrain.enqueue(conn, "test-noop", tags=["customer:42"]).id
    status, done = bulk(app, "cancel", {"filter": {"tags": ["customer:42"]},
                                        "upto": counted["upto"]})
    assert status == 200, done
    assert (done["jobs"], done["outcomes"], done["next_upto"]) == (2, {"cancelled": 2}, None)
    rows = {r["id"]: r["status"] for r in sql("SELECT id, status FROM jobs")}
    assert (rows[first], rows[second], rows[third], rows[later]) == (
        "cancelled", "cancelled", "pending", "pending")


def test_delete_by_filter_never_deletes_a_running_job(app, conn, sql):
    ids = [pgdrain.enqueue(conn, "test-noop", meta={"batch": "b1"}).id for _ in range(3)]
    [running] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    status, counted = bulk(app, "delete", {"filter": {"meta": {"batch": "b1"}}})
    assert (status, counted["count"]) == (200, 2)
    status, done = bulk(app, "delete", {"filter": {"meta": {"batch": "b1"}},
                                        "upto": counted["upto"]})
    assert (status, done["outcomes"]) == (200, {"deleted": 2})
    assert [r["id"] for r in sql("SELECT id FROM jobs")] == [running.id]
    assert running.id in ids


@pytest.mark.parametrize(("body", "field"), [
    ({}, "filter"),
    ({"filter": []}, "filter"),
    ({"filter": {"tags": ["no space"]}}, "filter.tags"),
    ({"filter": {"status": "lost"}}, "filter.status"),
    ({"filter": {"payload": {}}}, "filter.payload"),
    ({"filter": {}, "upto": -1}, "upto"),
    ({"filter": {}, "upto": "12"}, "upto"),
    ({"filter": {}, "batch": 0}, "batch"),
    ({"filter": {}, "confirm": True}, "confirm"),
])
def test_a_bad_bulk_request_names_what_is_wrong_and_changes_nothing(app, conn, sql, body,
                                                                     field):
    pgdrain.enqueue(conn, "test-noop")
    status, answer = bulk(app, "delete", body)
    assert status == 422, answer
    assert answer["details"]["field"] == field
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 1


def test_bad_tags_or_meta_on_post_jobs_answer_422_and_insert_nothing(app, sql):
    event = load_event("enqueue_single.json")
    event["body"] = json.dumps({"jobs": [{"job_type": "test-noop"},
                                         {"job_type": "test-noop", "meta": "text"}]})
    status, body = call(app, event)
    assert (status, body["details"]["field"]) == (422, "jobs[1].meta")
    event["body"] = json.dumps({"job_type": "test-noop", "tags": ["a b"]})
    status, body = call(app, event)
    assert (status, body["details"]["field"]) == (422, "tags")
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 0
