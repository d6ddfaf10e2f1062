"""The enqueue function, fed API Gateway events (events/*.json) against a real PostgreSQL."""

from __future__ import annotations

import base64
import json
import threading

import boto3
import pytest
from botocore.stub import Stubber

import pgdrain
from pgdrain.aws.doorbell import Doorbell
from pgdrain_dev.context import LambdaContext
from tests.support.functions import load_event


def post_jobs(app, body=None, *, headers=None, raw=None):
    event = load_event("enqueue_single.json")
    event["body"] = raw if raw is not None else json.dumps(body)
    for name, value in (headers or {}).items():
        event["headers"][name] = value
        event["multiValueHeaders"][name] = [value]
    return call(app, event)


def call(app, event):
    response = app.lambda_handler(event, LambdaContext("pgdrain-enqueue"))
    return response["statusCode"], json.loads(response["body"]), response


def job_count(sql) -> int:
    return sql("SELECT count(*) AS n FROM jobs")[0]["n"]


@pytest.fixture
def app(load_function):
    return load_function("enqueue")


def test_single_job_event(app, sql):
    status, body, response = call(app, load_event("enqueue_single.json"))
    assert status == 201
    assert response["multiValueHeaders"]["Content-Type"] == ["application/json"]
    [row] = sql("SELECT id, job_type, payload, status FROM jobs")
    assert body == {"ids": [row["id"]]}
    assert (row["job_type"], row["payload"], row["status"]) == (
        "echo", {"to": "sarah@example.com"}, "pending")


def test_batch_event_is_inserted_in_order_with_its_options(load_function, sql):
    app = load_function("enqueue")
    status, body, _ = call(app, load_event("enqueue_batch.json"))
    assert status == 201
    rows = {r["id"]: r for r in sql("SELECT id, job_type, priority, queue, max_attempts, "
                                     "dedupe_key, run_at > now() AS later FROM jobs")}
    assert [rows[i]["job_type"] for i in body["ids"]] == [
        "send-email", "deliver-webhook", "generate-export", "sync-crm"]
    webhook, export, crm = (rows[i] for i in body["ids"][1:])
    assert webhook["priority"] == -1
    assert export["later"] is True
    assert (crm["queue"], crm["max_attempts"]) == ("crm", 5)
    # The Idempotency-Key header keys each item of the batch.
    assert [rows[i]["dedupe_key"] for i in body["ids"]] == [f"signup-42:{i}" for i in range(4)]
    again, repeat, _ = call(app, load_event("enqueue_batch.json"))
    assert (again, repeat) == (200, {"ids": body["ids"], "created": [False] * 4})
    assert job_count(sql) == 4


def test_invalid_batch_event_inserts_nothing(app, sql):
    status, body, _ = call(app, load_event("enqueue_invalid.json"))
    assert (status, body) == (422, {"error": "jobs[1].priority: must be an integer",
                                    "details": {"field": "jobs[1].priority", "index": 1}})
    assert job_count(sql) == 0


@pytest.mark.parametrize(
    ("request_kwargs", "status", "body"),
    [
        ({"raw": "{not json"}, 400,
         {"error": "the body is not valid JSON: Expecting property name enclosed in double "
                   "quotes at line 1 column 2", "details": {}}),
        ({"raw": '{"job_type": "test-noop", "payload": {"x": NaN}}'}, 400,
         {"error": "the body is not valid JSON: NaN is not valid JSON at line 1 column 1",
          "details": {}}),
        ({"body": {"job_type": "test-noop"}, "headers": {"Content-Type": "text/plain"}}, 415,
         {"error": "Content-Type must be application/json",
          "details": {"content_type": "text/plain"}}),
        ({"body": ["test-noop"]}, 422,
         {"error": 'the body must be a JSON object: one job, or {"jobs": [...]}',
          "details": {}}),
        ({"body": {"payload": {}}}, 422,
         {"error": "job_type: is required and must be a non-empty string",
          "details": {"field": "job_type"}}),
        ({"body": {"job_type": "test-noop", "kind": "x"}}, 422,
         {"error": "kind: unknown field; a job has job_type, payload, run_at, delay_seconds, "
                   "priority, queue, max_attempts, expires_at, ttl_seconds, dedupe_key, "
                   "unique_for, debounce, ordering_key, tenant, name, depends_on, after, "
                   "tags, meta",
          "details": {"field": "kind"}}),
        ({"body": {"job_type": "test-noop", "payload": [1]}}, 422,
         {"error": "payload: must be a JSON object", "details": {"field": "payload"}}),
        ({"body": {"job_type": "test-noop", "run_at": "2030-01-01T09:00:00"}}, 422,
         {"error": "run_at: must include a timezone, e.g. 2030-01-31T09:00:00Z",
          "details": {"field": "run_at"}}),
        ({"body": {"job_type": "test-noop", "run_at": "next tuesday"}}, 422,
         {"error": "run_at: is not an ISO 8601 timestamp: 'next tuesday'",
          "details": {"field": "run_at"}}),
        ({"body": {"job_type": "test-noop", "delay_seconds": -1}}, 422,
         {"error": "delay_seconds: must be between 0 and 315360000 (ten years)",
          "details": {"field": "delay_seconds"}}),
        ({"body": {"job_type": "test-noop", "max_attempts": 0}}, 422,
         {"error": "max_attempts: must be between 1 and 2147483647",
          "details": {"field": "max_attempts"}}),
        ({"body": {"jobs": []}}, 422,
         {"error": "jobs must be a non-empty array of jobs", "details": {"field": "jobs"}}),
        ({"body": {"jobs": [{"job_type": "test-noop"}], "queue": "x"}}, 422,
         {"error": 'a batch holds only "jobs"; unexpected: queue',
          "details": {"field": "queue"}}),
        ({"body": {"jobs": [{"job_type": "test-noop"}, "test-noop"]}}, 422,
         {"error": "jobs[1] must be a JSON object", "details": {"field": "jobs[1]",
                                                                "index": 1}}),
    ],
)
def test_bad_requests_say_what_is_wrong_and_insert_nothing(app, sql, request_kwargs, status,
                                                           body):
    assert post_jobs(app, **request_kwargs)[:2] == (status, body)
    assert job_count(sql) == 0


def test_unknown_job_type_lists_the_known_ones(app, sql):
    status, body, _ = post_jobs(app, {"job_type": "send-fax"})
    assert status == 422
    assert body["error"].startswith("job_type: unknown job type 'send-fax'; known types: ")
    assert body["details"]["known_job_types"] == pgdrain.REGISTRY.job_types()
    assert "test-noop" in body["details"]["known_job_types"]
    assert job_count(sql) == 0


def test_size_limits_answer_413(load_function, sql):
    app = load_function("enqueue", PGDRAIN_MAX_PAYLOAD_BYTES="100", PGDRAIN_MAX_BATCH="3")
    status, body, _ = post_jobs(app, {"job_type": "test-noop", "payload": {"x": "y" * 200}})
    assert status == 413
    assert body["error"] == "payload: is 208 bytes; the limit is 100"
    status, body, _ = post_jobs(app, {"jobs": [{"job_type": "test-noop"}] * 4})
    assert (status, body) == (413, {"error": "a batch holds at most 3 jobs, got 4",
                                    "details": {"max_batch": 3}})
    assert job_count(sql) == 0


def test_base64_body(app, sql):
    raw = base64.b64encode(json.dumps({"job_type": "test-noop"}).encode()).decode()
    event = load_event("enqueue_single.json")
    event.update(body=raw, isBase64Encoded=True)
    assert call(app, event)[0] == 201
    event.update(body=base64.b64encode(b"\xff\xfe").decode())
    assert call(app, event)[:2] == (400, {"error": "the body is not valid UTF-8 (byte 0)",
                                          "details": {}})
    assert job_count(sql) == 1


def test_dedupe_key_and_idempotency_header(app, sql):
    first = post_jobs(app, {"job_type": "test-noop", "dedupe_key": "k1"})
    assert first[0] == 201
    assert post_jobs(app, {"job_type": "test-noop", "dedupe_key": "k1"})[:2] == (
        200, {"ids": first[1]["ids"], "created": [False]})
    header = post_jobs(app, {"job_type": "test-noop"}, headers={"Idempotency-Key": "req-7"})
    assert header[0] == 201
    assert post_jobs(app, {"job_type": "test-noop"}, headers={"Idempotency-Key": "req-7"})[:2] \
        == (200, {"ids": header[1]["ids"], "created": [False]})
    conflict = post_jobs(app, {"job_type": "test-noop", "dedupe_key": "a"},
                         headers={"Idempotency-Key": "b"})
    assert conflict[:2] == (422, {"error": "dedupe_key: differs from the Idempotency-Key "
                                           "header; send one",
                                  "details": {"field": "dedupe_key"}})
    assert job_count(sql) == 2


# Powertools keeps one metric set per process (class attributes shared by every Metrics
# instance), so when two module instances flush from two threads, one may find the set already
# emptied by the other and warn. Real containers are separate processes and never share it.
@pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")
def test_two_identical_requests_racing_get_one_job(load_function, sql):
    # Two containers (two module instances, two connections) answer the same request at once.
    apps = [load_function("enqueue"), load_function("enqueue")]
    for attempt in range(10):
        barrier = threading.Barrier(2)
        results = [None, None]

        def send(i, key=f"race-{attempt}", barrier=barrier, results=results):
            barrier.wait()
            results[i] = post_jobs(apps[i], {"job_type": "test-noop"},
                                   headers={"Idempotency-Key": key})

        threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(r[0] for r in results) == [200, 201]
        assert results[0][1]["ids"] == results[1][1]["ids"]
    assert job_count(sql) == 10


def test_get_job(app, conn):
    job_id = pgdrain.enqueue(conn, "test-noop", {"n": 1}).id
    event = load_event("job_get.json")
    event["path"] = f"/jobs/{job_id}"
    event["pathParameters"] = {"id": str(job_id)}
    status, body, _ = call(app, event)
    assert status == 200
    assert (body["id"], body["job_type"], body["status"], body["payload"]) == (
        job_id, "test-noop", "pending", {"n": 1})
    assert body["run_at"].endswith("+00:00") and "lease_token" not in body
    event["path"] = "/jobs/999999"
    assert call(app, event)[:2] == (404, {
        "error": "no job with id 999999 (a done job is not kept unless "
                 "PGDRAIN_RETENTION_SECONDS is set, an ended one after its retention)",
        "details": {"id": 999999}})
    event["path"] = "/jobs/abc"
    assert call(app, event)[:2] == (400, {"error": "the job id must be an integer from 1 to "
                                                   "9223372036854775807",
                                          "details": {"id": "abc"}})


def test_a_graph_in_one_request_and_its_callbacks_parents_in_get_job(app, sql):
    status, body, _ = call(app, load_event("enqueue_graph.json"))
    assert status == 201, body
    pages, callback = body["ids"][:2], body["ids"][2]
    assert sql("SELECT status, parents_left, after_parents FROM jobs WHERE id = :id",
               id=callback) == [{"status": "waiting", "parents_left": 2,
                                 "after_parents": "finished"}]
    event = load_event("job_get.json")
    event["path"], event["pathParameters"] = f"/jobs/{callback}", {"id": str(callback)}
    status, view, _ = call(app, event)
    assert status == 200
    assert view["parents"] == [{"id": pages[0], "status": "pending"},
                               {"id": pages[1], "status": "pending"}]
    assert (view["children"], view["parents_left"]) == ([], 2)
    event["path"], event["pathParameters"] = f"/jobs/{pages[0]}", {"id": str(pages[0])}
    assert call(app, event)[1]["children"] == [callback]
    # A cycle is refused whole, naming the item; nothing is inserted.
    before = job_count(sql)
    status, body, _ = post_jobs(app, {"jobs": [
        {"job_type": "test-noop", "name": "a", "depends_on": ["b"]},
        {"job_type": "test-noop", "name": "b", "depends_on": ["a"]}]})
    assert status == 422 and "cycle" in body["error"], body
    assert body["details"] == {"field": "jobs[0].depends_on", "index": 0}
    # An Idempotency-Key keys every job of its request: a job with parents cannot have one.
    status, body, _ = post_jobs(app, {"job_type": "test-noop", "depends_on": [pages[0]]},
                                headers={"Idempotency-Key": "export-7"})
    assert status == 422 and "Idempotency-Key" in body["error"], body
    assert job_count(sql) == before


def test_retry_route(app, conn, sql):
    job_id = pgdrain.enqueue(conn, "test-noop", max_attempts=1).id
    event = load_event("job_retry.json")
    event["path"] = f"/jobs/{job_id}/retry"
    status, body, _ = call(app, event)
    assert (status, body["details"]) == (409, {"id": job_id, "status": "pending"})
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    pgdrain.fail(conn, job, "boom")
    status, body, _ = call(app, event)
    assert (status, body["status"], body["attempts"]) == (200, "pending", 0)
    event["path"] = "/jobs/424242/retry"
    assert call(app, event)[0] == 404


def test_cancel_route(app, conn):
    pending = pgdrain.enqueue(conn, "test-noop").id
    event = load_event("job_cancel.json")
    event["path"] = f"/jobs/{pending}/cancel"
    status, body, _ = call(app, event)
    assert (status, body["status"], body["cancel_requested_at"]) == (200, "cancelled", None)
    assert pgdrain.claim(conn, batch_size=1, lease_seconds=60) == []
    assert call(app, event)[:2] == (409, {
        "error": f"job {pending} is cancelled; only pending and running jobs can be cancelled",
        "details": {"id": pending, "status": "cancelled"}})
    running = pgdrain.enqueue(conn, "test-noop").id
    pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    event["path"] = f"/jobs/{running}/cancel"
    status, body, _ = call(app, event)
    assert (status, body["status"]) == (200, "running")
    assert body["cancel_requested_at"] is not None
    event["path"] = "/jobs/424242/cancel"
    assert call(app, event)[0] == 404


def test_pause_and_resume_routes(app, conn):
    pgdrain.enqueue(conn, "test-noop", queue="emails")
    status, body, _ = call(app, load_event("queue_pause.json"))
    assert (status, body["queue"], body["paused"]) == (200, "emails", True)
    assert body["paused_at"].endswith("+00:00")
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []
    # Still accepting jobs.
    status, _, _ = call(app, {**load_event("enqueue_single.json"),
                              "body": json.dumps({"job_type": "test-noop", "queue": "emails"})})
    assert status == 201
    status, body, _ = call(app, load_event("queue_resume.json"))
    assert (status, body) == (200, {"queue": "emails", "paused": False, "paused_at": None})
    assert len(pgdrain.claim(conn, batch_size=10, lease_seconds=60)) == 2


def test_set_queue_route_caps_and_rate_limits_a_queue(app, conn, sql):
    pgdrain.enqueue(conn, "test-noop", queue="emails")
    status, body, _ = call(app, load_event("queue_set.json"))
    assert (status, body) == (200, {"queue": "emails", "paused": False, "paused_at": None,
                                    "max_running": 3, "rate": "10/s"})
    for bad, code in (('{"max_running": 0}', 422), ('{"max_running": "3"}', 422),
                      ('{"max": 3}', 422), ("{}", 422), ("[3]", 422), ("{", 400),
                      ('{"rate": "0/min"}', 422), ('{"rate": 10}', 422),
                      ('{"rate": "10/fortnight"}', 422), ('{"rate": "20000/s"}', 422),
                      ('{"max_running": 2, "rate": "0/s"}', 422)):
        status, body, _ = call(app, {**load_event("queue_set.json"), "body": bad})
        assert status == code, (bad, body)
        if code == 422:
            assert body.get("details", body).get("field") in ("max_running", "rate", "max") \
                or bad == "[3]", body
    assert sql("SELECT max_running, rate_limit, rate_period FROM pgdrain_queues") == [
        {"max_running": 3, "rate_limit": 10, "rate_period": 1.0}]
    status, body, _ = call(app, {**load_event("queue_set.json"),
                                 "body": '{"max_running": null}'})
    assert (status, body["max_running"], body["rate"]) == (200, None, "10/s")
    status, body, _ = call(app, {**load_event("queue_set.json"), "body": '{"rate": null}'})
    assert (status, body["max_running"], body["rate"]) == (200, None, None)


def test_pausing_an_unknown_queue_is_a_404_and_changes_nothing(app, conn, sql):
    event = load_event("queue_pause.json")
    event["path"], event["pathParameters"] = "/queues/emials/pause", {"queue": "emials"}
    status, body, _ = call(app, event)
    assert status == 404
    assert body["error"].startswith("no queue 'emials': no job names it")
    assert sql("SELECT count(*) AS n FROM pgdrain_queues") == [{"n": 0}]


def test_retry_of_a_job_whose_dedupe_key_is_live_again(app, conn):
    job_id = pgdrain.enqueue(conn, "test-noop", max_attempts=1, dedupe_key="k").id
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    pgdrain.fail(conn, job, "boom")
    live = pgdrain.enqueue(conn, "test-noop", dedupe_key="k").id
    event = load_event("job_retry.json")
    event["path"] = f"/jobs/{job_id}/retry"
    assert call(app, event)[:2] == (409, {
        "error": f"job {job_id}'s dedupe_key is held by live job {live}; it can be retried "
                 "once that job has finished",
        "details": {"id": job_id, "status": "failed", "held_by": live}})


def test_unknown_routes_and_methods(app):
    event = load_event("job_get.json")
    event.update(httpMethod="DELETE")
    status, body, response = call(app, event)
    assert (status, body["details"]) == (405, {"allow": "GET"})
    assert response["multiValueHeaders"]["Allow"] == ["GET"]
    event.update(httpMethod="GET", path="/jobs")
    assert call(app, event)[0] == 405
    event.update(path="/queues")
    assert call(app, event)[0] == 404


@pytest.mark.parametrize("ident", ["9" * 4301, "9" * 20, "9223372036854775808", "0", "-1",
                                   "\u0661", "1e3"])
def test_an_id_no_job_can_have_is_a_400_on_every_route(app, ident):
    # int() of more than 4,300 digits raises ValueError: it answered 500.
    for name, path in (("job_get.json", f"/jobs/{ident}"),
                       ("job_retry.json", f"/jobs/{ident}/retry")):
        event = load_event(name)
        event["path"], event["pathParameters"] = path, {"id": ident}
        status, body, _ = call(app, event)
        assert status == 400, (name, ident, body)
        assert body["error"] == "the job id must be an integer from 1 to 9223372036854775807"
        assert body["details"]["id"] == ident[:64]


def test_an_id_no_route_accepts_is_a_400_not_a_405(app):
    # A NUL in the id: the path is GET /jobs/{id}'s, and the id is what is wrong.
    event = load_event("job_get.json")
    event["path"], event["pathParameters"] = "/jobs/\x00", {"id": "\x00"}
    status, body, response = call(app, event)
    assert (status, body["details"]) == (400, {"id": "\x00"})
    assert "Allow" not in response.get("multiValueHeaders", {})


def test_a_database_failure_answers_a_short_503_with_the_request_id(load_function, monkeypatch):
    app = load_function("enqueue", DATABASE_URL="postgresql://pgdrain:hunter2@/nowhere"
                                                "?host=/nonexistent/socket/dir")
    response = app.lambda_handler(load_event("enqueue_single.json"),
                                  LambdaContext("pgdrain-enqueue", request_id="req-42"))
    body = json.loads(response["body"])
    assert response["statusCode"] == 503
    # The log has where and why; the client gets what to do, and the id to quote.
    assert body == {"error": "the database is unavailable; retry with the same Idempotency-Key",
                    "request_id": "req-42"}


def test_sam_event_files_are_complete_proxy_events():
    for name in ("enqueue_single.json", "enqueue_batch.json", "enqueue_invalid.json",
                 "enqueue_graph.json", "job_get.json", "job_retry.json", "job_cancel.json",
                 "drain_api.json", "queue_pause.json", "queue_resume.json", "queue_set.json",
                 "schedule_set.json", "schedule_list.json", "schedule_get.json",
                 "schedule_pause.json", "schedule_resume.json", "schedule_delete.json"):
        event = load_event(name)
        assert {"resource", "path", "httpMethod", "headers", "requestContext", "body",
                "isBase64Encoded"} <= set(event), name


class TestDoorbell:
    @pytest.fixture
    def stubbed(self, app, monkeypatch):
        client = boto3.client("lambda", region_name="eu-west-1", aws_access_key_id="testing",
                              aws_secret_access_key="testing")
        stubber = Stubber(client)
        monkeypatch.setattr(app.FUNCTION, "doorbell", Doorbell("pgdrain-drain", window_seconds=60,
                                                      client_factory=lambda: client))
        with stubber:
            yield stubber

    def test_a_due_job_rings_the_drain_once(self, app, stubbed, sql):
        stubbed.add_response("invoke", {"StatusCode": 202}, {
            "FunctionName": "pgdrain-drain", "InvocationType": "Event",
            "Payload": b'{"source": "pgdrain.doorbell"}'})
        assert post_jobs(app, {"job_type": "test-noop"})[0] == 201
        stubbed.assert_no_pending_responses()
        # Within the window a second enqueue does not ring again (no response is queued: a
        # ring would fail the Stubber, and show as a DoorbellFailed metric).
        assert post_jobs(app, {"job_type": "test-noop"})[0] == 201
        assert job_count(sql) == 2

    def test_a_delayed_job_does_not_ring(self, app, stubbed, capsys):
        stubbed.add_response("invoke", {"StatusCode": 202})
        capsys.readouterr()
        assert post_jobs(app, {"job_type": "test-noop", "delay_seconds": 30})[0] == 201
        with pytest.raises(AssertionError):
            stubbed.assert_no_pending_responses()  # the queued response was never used
        assert "Doorbell" not in capsys.readouterr().out

    def test_a_signal_that_wakes_a_job_rings_the_drain(self, app, stubbed, sql):
        stubbed.add_response("invoke", {"StatusCode": 202}, {
            "FunctionName": "pgdrain-drain", "InvocationType": "Event",
            "Payload": b'{"source": "pgdrain.doorbell"}'})
        _waiting_for(sql, "confirm:order-42")
        assert call(app, load_event("signal_send.json"))[0] == 200
        stubbed.assert_no_pending_responses()

    def test_a_failed_ring_never_fails_the_enqueue(self, app, stubbed, sql, capsys):
        stubbed.add_client_error("invoke", service_error_code="TooManyRequestsException",
                                 http_status_code=429)
        capsys.readouterr()
        status, body, _ = post_jobs(app, {"job_type": "test-noop"})
        assert status == 201 and len(body["ids"]) == 1
        assert job_count(sql) == 1
        out = capsys.readouterr().out
        assert '"DoorbellFailed"' in out


def test_payload_model_is_enforced_at_enqueue(app, sql):
    status, body, _ = post_jobs(app, {"jobs": [
        {"job_type": "test-typed", "payload": {"to": "sarah", "times": 2}},
        {"job_type": "test-typed", "payload": {"to": "sam", "times": "twice"}}]})
    assert (status, body) == (422, {"error": "jobs[1].payload.times: must be an integer",
                                    "details": {"field": "jobs[1].payload.times",
                                                "index": 1}})
    status, body, _ = post_jobs(app, {"job_type": "test-typed", "payload": {"times": 2}})
    assert (status, body["details"]) == (422, {"field": "payload.to"})
    assert job_count(sql) == 0
    status, body, _ = post_jobs(app, {"job_type": "test-typed", "payload": {"to": "sarah"}})
    assert status == 201
    # Defaults from the model are filled in, so the stored payload is complete.
    assert sql("SELECT payload FROM jobs")[0]["payload"] == {"to": "sarah", "times": 1,
                                                             "tags": []}


def test_expiry_through_the_api(app, sql):
    status, body, _ = post_jobs(app, {"jobs": [
        {"job_type": "send-email", "ttl_seconds": 120},
        {"job_type": "send-email", "expires_at": "2099-01-01T00:00:00Z"}]})
    assert status == 201
    rows = {r["id"]: r for r in sql(
        "SELECT id, EXTRACT(EPOCH FROM expires_at - created_at) AS ttl, "
        "expires_at = '2099-01-01T00:00:00Z'::timestamptz AS at FROM jobs")}
    ttl_job, at_job = body["ids"]
    assert 119 < float(rows[ttl_job]["ttl"]) <= 120.5 and rows[at_job]["at"]
    status, body, _ = post_jobs(app, {"job_type": "send-email", "ttl_seconds": 5,
                                      "delay_seconds": 10})
    assert status == 422 and body["details"] == {"field": "ttl_seconds"}
    status, body, _ = post_jobs(app, {"job_type": "send-email", "expires_at": "tomorrow"})
    assert (status, body["details"]) == (422, {"field": "expires_at"})
    assert job_count(sql) == 2


@pytest.mark.parametrize(("field", "value"), [
    ("ordering_key", "k" * 501), ("ordering_key", ""), ("tenant", "t" * 201), ("tenant", 7)])
def test_a_bad_ordering_key_or_tenant_is_a_422_naming_it(app, sql, field, value):
    status, body, _ = post_jobs(app, {"jobs": [{"job_type": "test-noop"},
                                               {"job_type": "test-noop", field: value}]})
    assert status == 422 and body["details"]["field"] == f"jobs[1].{field}", body
    assert job_count(sql) == 0


def test_ordering_key_and_tenant_are_stored_and_shown(app, sql):
    status, body, _ = post_jobs(app, {"job_type": "test-noop", "ordering_key": "customer-7",
                                      "tenant": "acme"})
    assert status == 201
    event = load_event("job_get.json")
    ident = body["ids"][0]
    event["path"], event["pathParameters"] = f"/jobs/{ident}", {"id": str(ident)}
    status, view, _ = call(app, event)
    assert (status, view["ordering_key"], view["tenant"]) == (200, "customer-7", "acme")


def _waiting_for(sql, name: str) -> int:
    """A job waiting for the signal ``name``, as a drain leaves one that raised WaitFor."""
    return sql("INSERT INTO jobs (job_type, payload, status, wait_signal, run_at) "
               "VALUES ('test-noop', '{}', 'waiting', :name, now() + interval '1 hour') "
               "RETURNING id", name=name)[0]["id"]


def test_send_signal_event_makes_its_waiting_job_due_with_the_payload(app, sql):
    waiting = _waiting_for(sql, "confirm:order-42")
    status, body, _ = call(app, load_event("signal_send.json"))
    assert (status, body["name"], body["woken"]) == (200, "confirm:order-42", [waiting])
    assert body["kept_until"].endswith("+00:00")
    [row] = sql("SELECT status, wait_signal, wait_result FROM jobs")
    assert (row["status"], row["wait_signal"]) == ("pending", None)
    assert row["wait_result"]["payload"] == {"confirmed_by": "sarah@example.com"}
    assert row["wait_result"]["received"] is True
    # Sent again (no body: no payload), nothing waits: kept for later waits.
    status, body, _ = call(app, {**load_event("signal_send.json"), "body": None})
    assert (status, body["woken"]) == (200, [])
    assert sql("SELECT payload FROM pgdrain_signals") == [{"payload": None}]


@pytest.mark.parametrize(("path", "body", "code", "field"), [
    ("/signals/a%00b", "{}", 422, "name"),
    ("/signals/" + "x" * 501, "{}", 422, "name"),
    ("/signals/ok", '{"payload": 1, "keep": 3}', 422, "keep"),
    ("/signals/ok", '{"keep_seconds": -1}', 422, "keep_seconds"),
    ("/signals/ok", '{"keep_seconds": "a week"}', 422, "keep_seconds"),
    ("/signals/ok", "[1]", 422, None),
    ("/signals/ok", "{", 400, None),
])
def test_a_signal_the_api_cannot_send_is_refused_and_sends_nothing(app, sql, path, body, code,
                                                                   field):
    waiting = _waiting_for(sql, "ok")
    status, answer, _ = call(app, {**load_event("signal_send.json"), "path": path,
                                   "body": body})
    assert status == code, answer
    if field:
        assert answer["details"]["field"] == field, answer
    assert sql("SELECT count(*) AS n FROM pgdrain_signals")[0]["n"] == 0
    assert sql("SELECT status FROM jobs WHERE id = :id", id=waiting)[0]["status"] == "waiting"


def test_a_signal_name_round_trips_through_the_path(app, sql):
    name = "order/42 \u202e\U0001f600"
    waiting = _waiting_for(sql, name)
    from urllib.parse import quote
    status, body, _ = call(app, {**load_event("signal_send.json"),
                                 "path": "/signals/" + quote(name, safe="")})
    assert (status, body["name"], body["woken"]) == (200, name, [waiting])


def test_the_callers_trace_context_is_kept_with_each_job(app, sql, monkeypatch):
    # The function's own X-Ray trace (Lambda's _X_AMZN_TRACE_ID, a child of the request's)
    # and the request's W3C traceparent; the drain runs the jobs in that trace.
    xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    monkeypatch.setenv("_X_AMZN_TRACE_ID", xray)
    status, body, _ = post_jobs(app, {"jobs": [{"job_type": "echo"}, {"job_type": "echo"}]},
                                headers={"traceparent": parent, "tracestate": "vendor=1"})
    assert status == 201
    contexts = [r["trace_context"] for r in sql("SELECT trace_context FROM jobs ORDER BY id")]
    assert contexts == [{"xray": xray, "traceparent": parent, "tracestate": "vendor=1"}] * 2
    monkeypatch.delenv("_X_AMZN_TRACE_ID")
    status, body, _ = post_jobs(app, {"job_type": "echo"},
                                headers={"traceparent": parent[:-2] + "00"})  # not sampled
    assert status == 201
    assert sql("SELECT trace_context FROM jobs WHERE id = :id", id=body["ids"][0]) == [
        {"trace_context": None}]
    status, shown, _ = call(app, {**load_event("job_get.json"),
                                  "pathParameters": {"id": str(body["ids"][0] - 1)}})
    assert status == 200 and shown["trace_context"]["traceparent"] == parent


def _wait_event(job_id: int, wait: str) -> dict:
    event = load_event("job_wait.json")
    event["path"], event["pathParameters"] = f"/jobs/{job_id}", {"id": str(job_id)}
    event["queryStringParameters"] = {"wait": wait}
    event["multiValueQueryStringParameters"] = {"wait": [wait]}
    return event


def test_get_job_with_wait_answers_once_the_job_is_finished(app, conn, database_url):
    """``GET /jobs/{id}?wait=20`` (events/job_wait.json): a long poll answered when the job
    is cancelled in another session, woken by the notification, not by the backstop."""
    from pgdrain import waiting
    from pgdrain.db import connect

    job_id = pgdrain.enqueue(conn, "test-noop", {"n": 1}).id

    def cancel_once_waited_for() -> None:
        other = connect(database_url)
        try:
            while not other.run("SELECT 1 FROM pgdrain_waiters WHERE job_id = :id", id=job_id):
                threading.Event().wait(0.01)
            pgdrain.cancel(other, [job_id])
        finally:
            other.close()

    canceller = threading.Thread(target=cancel_once_waited_for, daemon=True)
    before = waiting.counts["notified"]
    canceller.start()
    event = load_event("job_wait.json")
    assert event["queryStringParameters"] == {"wait": "20"}
    status, body, _ = call(app, _wait_event(job_id, "20"))
    canceller.join(30)
    assert (status, body["id"], body["status"]) == (200, job_id, "cancelled")
    assert waiting.counts["notified"] - before == 1


def test_get_job_with_wait_answers_the_job_as_it_stands_when_the_wait_is_over(app, conn):
    job_id = pgdrain.enqueue(conn, "test-noop", {"n": 1}).id
    status, body, _ = call(app, _wait_event(job_id, "0.2"))
    assert (status, body["id"], body["status"]) == (200, job_id, "pending")
    # The wait ends before the invocation's time does, whatever ?wait= asked for.
    response = app.lambda_handler(_wait_event(job_id, "25"),
                                  LambdaContext("pgdrain-enqueue", timeout_seconds=1.0))
    assert (response["statusCode"], json.loads(response["body"])["status"]) == (200, "pending")
    assert call(app, _wait_event(999999, "1"))[0] == 404


@pytest.mark.parametrize("wait", ["-1", "25.5", "26", "abc", "", "nan", "inf", "1e1", "0x10",
                                  "1.2345", " 5", "\uff15"])
def test_get_job_with_a_bad_wait_is_refused(app, conn, wait):
    job_id = pgdrain.enqueue(conn, "test-noop", {"n": 1}).id
    status, body, _ = call(app, _wait_event(job_id, wait))
    assert status == 400, body
    assert body["error"].startswith("wait must be a number of seconds from 0 to 25 (API "
                                    "Gateway ends a request after 29 s), not ")
    assert body["details"] == {"wait": wait}
