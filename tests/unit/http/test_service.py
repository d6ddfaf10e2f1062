"""The enqueue API's answers that need no database: unknown routes, bad ids, every failure's
status and shape, and the job view."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pgdrain.errors import DatabaseTimeout, DatabaseUnavailable, DedupeContention, QueryFailed
from pgdrain.http import service
from pgdrain.http.requests import ApiError, Limits
from pgdrain.http.routes import match
from pgdrain.registry import Registry


def test_an_unknown_path_lists_the_routes():
    answer = service.no_route("GET", "/nope")
    assert answer.status == 404
    assert answer.body == {"error": "no route /nope", "details": {"routes": [
        "POST /jobs", "POST /jobs/cancel", "POST /jobs/requeue", "POST /jobs/delete",
        "GET /jobs/{id}", "POST /jobs/{id}/retry", "POST /jobs/{id}/cancel",
        "POST /queues/{queue}/pause", "POST /queues/{queue}/resume", "PUT /queues/{queue}",
        "POST /signals/{name}", "GET /schedules", "GET /schedules/{name}",
        "PUT /schedules/{name}", "DELETE /schedules/{name}", "POST /schedules/{name}/pause",
        "POST /schedules/{name}/resume"]}}


def test_a_known_path_with_another_method_is_405_with_allow():
    answer = service.no_route("DELETE", "/jobs/7")
    assert (answer.status, answer.headers) == (405, {"Allow": "GET"})
    assert answer.body["details"] == {"allow": "GET"}


def test_a_path_with_an_id_no_job_can_have_goes_to_its_route_which_answers_400():
    # Not a 405 (the method is right) nor a guess in no_route: the route checks its id.
    found = match("GET", "/jobs/%00", "enqueue")
    assert found is not None and (found.route.operation_id, found.params) == (
        "getJob", {"id": "\x00"})
    with pytest.raises(ApiError) as caught:
        service.job_id(found.params["id"])
    assert caught.value.status == 400 and caught.value.message == service.BAD_ID


@pytest.mark.parametrize("raw", ["0", "-1", "abc", "1.5", "9223372036854775808", "9" * 5000])
def test_bad_ids_are_400_before_the_database(raw):
    with pytest.raises(ApiError) as caught:
        service.job_id(raw)
    assert caught.value.status == 400 and len(caught.value.details["id"]) <= 64


def test_good_ids():
    assert service.job_id("9223372036854775807") == 2**63 - 1


@pytest.mark.parametrize(("error", "status", "drop", "retry_after"), [
    (ApiError(422, "bad"), 422, False, None),
    (DedupeContention("contended"), 503, False, "1"),
    (DatabaseTimeout("slow"), 503, True, "1"),
    (DatabaseUnavailable("gone"), 503, True, None),
    (QueryFailed("server said no", "XX000"), 503, True, None),
    (RuntimeError("bug"), 500, True, None),
])
def test_every_failure_has_its_answer(error, status, drop, retry_after):
    answer = service.error_response(error, "req-1")
    assert (answer.status, answer.drop_connection) == (status, drop)
    assert answer.headers.get("Retry-After") == retry_after
    assert isinstance(answer.body["error"], str) and answer.body["error"]
    if status >= 500:
        assert answer.body["request_id"] == "req-1"
        assert "bug" not in answer.body["error"] and "server said" not in answer.body["error"]
    assert answer.log is not None


def test_the_job_view_keeps_the_lease_token_back():
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    view = service.job_view({"id": 1, "lease_token": "secret-ish", "run_at": when,
                             "payload": {"a": 1}})
    assert view == {"id": 1, "run_at": "2030-01-02T03:04:05+00:00", "payload": {"a": 1}}


def test_an_unknown_operation_is_a_programming_error():
    api = service.EnqueueApi(registry=Registry(), limits=Limits(), session=lambda: None)
    with pytest.raises(LookupError, match="no operation 'nope'"):
        api.handle("nope", service.Request(body=None))


def test_a_refused_request_never_opens_the_database():
    def session():
        raise AssertionError("no database for a request that is refused")

    api = service.EnqueueApi(registry=Registry(), limits=Limits(), session=session)
    with pytest.raises(ApiError) as caught:
        api.handle("enqueueJobs", service.Request(body='{"job_type": "unknown"}',
                                                  headers={"content-type": "application/json"}))
    assert caught.value.status == 422
    with pytest.raises(ApiError):
        api.handle("getJob", service.Request(body=None, path_params={"id": "x"}))
