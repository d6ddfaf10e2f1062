"""A row the driver cannot decode fails alone (issue: faults, item 1).

Plain SQL may insert any jsonb, and PostgreSQL keeps numbers of any size and any depth:
``{"x": 1e5000}`` comes back as a 5,001-digit integer (past Python's 4,300-digit limit for
int(str)), and an array nested 3,000 deep past json's recursion limit. Decoded per batch,
either one made the claim's result raise after the claim had committed: the whole batch stayed
running, and every lease expiry repeated it until the innocent jobs ran out of attempts.
"""

from __future__ import annotations

import json

import pytest

import pgdrain
from pgdrain_dev.context import LambdaContext
from tests.functions import conftest as function_fixtures
from tests.support.functions import load_event

function_env = function_fixtures.function_env
load_function = function_fixtures.load_function

POISONS = {
    "a 5,001-digit number": '{"x": 1e5000}',
    "an array nested 3,000 deep": '{"x": ' + "[" * 3000 + "]" * 3000 + "}",
}


def _insert_with_plain_sql(sql, payload: str, *, priority: int = 0) -> int:
    return sql("INSERT INTO jobs (job_type, payload, priority) "
               "VALUES ('test-noop', CAST(:p AS jsonb), :prio) RETURNING id",
               p=payload, prio=priority)[0]["id"]


@pytest.mark.parametrize("poison", POISONS)
def test_a_poison_row_fails_alone_and_its_batch_mates_run(load_function, conn, sql, poison):
    # The poison comes first in its batch, between innocent jobs of the same claim.
    bad = _insert_with_plain_sql(sql, POISONS[poison], priority=-1)
    innocent = [r.id for r in pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 9)]
    app = load_function("drain", PGDRAIN_BATCH_SIZE="10")

    response = app.lambda_handler(load_event("drain_api.json"), LambdaContext())
    assert response["statusCode"] == 200, response["body"]
    summary = json.loads(response["body"])
    assert (summary["claimed"], summary["done"], summary["failed"]) == (10, 9, 1)

    rows = {r["id"]: r for r in sql("SELECT id, status, attempts, last_error FROM jobs")}
    assert rows[bad]["status"] == "failed"
    assert rows[bad]["last_error"].startswith("undecodable payload: the stored JSON ")
    assert all((rows[i]["status"], rows[i]["attempts"]) == ("done", 1) for i in innocent)
    assert sql("SELECT count(*) AS n FROM jobs WHERE status = 'running'")[0]["n"] == 0


@pytest.mark.parametrize("poison", POISONS)
def test_the_api_shows_a_poison_row_with_a_readable_error(load_function, conn, sql, poison):
    bad = _insert_with_plain_sql(sql, POISONS[poison])
    sql("UPDATE jobs SET errors = CAST(:e AS jsonb) WHERE id = :id",
        e='[{"attempt": 1, "at": "2030-01-01T00:00:00Z", "error": "x", "n": 1e5000}]', id=bad)
    app = load_function("enqueue")
    event = load_event("job_get.json")
    event["path"], event["pathParameters"] = f"/jobs/{bad}", {"id": str(bad)}
    response = app.lambda_handler(event, LambdaContext())
    assert response["statusCode"] == 200, response["body"]
    body = json.loads(response["body"])
    assert (body["id"], body["payload"], body["errors"]) == (bad, None, None)
    assert body["payload_error"].startswith("the stored JSON ")
    assert body["errors_error"].startswith("the stored JSON cannot be decoded")
    # The library says the same.
    job = pgdrain.get_job(conn, bad)
    assert (job["payload"], job["payload_error"]) == (None, body["payload_error"])


def test_lease_expiries_never_charge_the_batch_mates_of_a_poison_row(load_function, conn, sql):
    # Rounds of drain, then leases expire (as time passing would): the innocent jobs run once
    # and are done, whatever happens to the poison.
    _insert_with_plain_sql(sql, POISONS["a 5,001-digit number"], priority=-1)
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop", "max_attempts": 1}] * 9)
    app = load_function("drain", PGDRAIN_BATCH_SIZE="10")
    for _ in range(3):
        app.lambda_handler({}, LambdaContext())
        sql("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
            "WHERE status = 'running'")
    counts = {(r["job_type"], r["status"], r["attempts"]): r["n"] for r in sql(
        "SELECT job_type, status, attempts, count(*) AS n FROM jobs GROUP BY 1, 2, 3")}
    assert counts == {("test-noop", "failed", 1): 1, ("test-noop", "done", 1): 9}
