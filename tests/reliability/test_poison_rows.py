"""A poison row fails alone, or runs, on every claim path (issue: faults, item 1; issue:
faults in the seams, item 7).

Plain SQL may insert what the driver or Python cannot hold. PostgreSQL's jsonb keeps numbers
of any size and any depth: ``{"x": 1e5000}`` comes back as a 5,001-digit integer (past
Python's 4,300-digit limit for int(str)), and an array nested 3,000 deep past json's recursion
limit. Its timestamptz takes ``-infinity``, ``infinity``, BC dates and years up to 294276,
which pg8000 hands back as text, not datetime: sorting or subtracting them next to a datetime
raises. Either kind, met after the claim had committed, made the drain raise with the whole
batch running, and every lease expiry repeated it until the innocent jobs ran out of
attempts (the controlled claim sorted its batch in Python, and so crashed on a -infinity
run_at). Each poison goes through each claim path of the real drain function, one handler at
a time and four: it ends as it should, its nine batch-mates are done on their first attempt,
nothing stays running, and lambda_handler answers every time.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest

import pgdrain
from pgdrain_dev.context import LambdaContext
from tests.functions import conftest as function_fixtures
from tests.support.functions import load_event

function_env = function_fixtures.function_env
load_function = function_fixtures.load_function

UNDECODABLE = "undecodable payload: the stored JSON "
# The rate-limited type of poison_jobs.py, named here rather than imported: importing the
# module would register it in this process's REGISTRY for every test collected with this one.
RATED_JOBS, RATED = "tests.reliability.poison_jobs", "test-poison-rated"


@dataclass(frozen=True)
class Poison:
    """A job row plain SQL may insert: its payload (JSON text) and timestamps (PostgreSQL's
    literals; None: the default). ``fails`` when the drain cannot run it (it ends failed,
    alone, saying why); otherwise it runs and is done."""

    payload: str = "{}"
    run_at: str | None = None
    expires_at: str | None = None
    created_at: str | None = None
    fails: bool = False


POISONS = {
    "a 5,001-digit number": Poison(payload='{"x": 1e5000}', fails=True),
    "an array nested 3,000 deep": Poison(payload='{"x": ' + "[" * 3000 + "]" * 3000 + "}",
                                         fails=True),
    "a run_at of -infinity": Poison(run_at="-infinity"),
    "a BC run_at": Poison(run_at="0044-03-15 12:00:00+00 BC"),
    "the earliest run_at": Poison(run_at="4714-11-24 00:00:00+00 BC"),
    "a run_at in year 1": Poison(run_at="0001-01-01 00:00:00+00"),
    "an expires_at of infinity": Poison(expires_at="infinity"),
    "an expires_at in year 10000": Poison(expires_at="10000-01-01 00:00:00+00"),
    "a created_at of -infinity": Poison(created_at="-infinity"),
    "a BC created_at": Poison(created_at="0044-03-15 12:00:00+00 BC"),
    "the latest created_at": Poison(created_at="294276-12-31 23:59:59+00"),
}
UNDECODABLE_POISONS = {name: poison for name, poison in POISONS.items() if poison.fails}


def _insert_with_plain_sql(sql, poison: Poison, job_type: str = "test-noop") -> int:
    return sql("INSERT INTO jobs (job_type, payload, run_at, expires_at, created_at) "
               "VALUES (:t, CAST(:p AS jsonb), COALESCE(CAST(:run_at AS timestamptz), now()), "
               "CAST(:expires_at AS timestamptz), "
               "COALESCE(CAST(:created_at AS timestamptz), now())) RETURNING id",
               t=job_type, p=poison.payload, run_at=poison.run_at,
               expires_at=poison.expires_at, created_at=poison.created_at)[0]["id"]


@dataclass(frozen=True)
class ClaimPath:
    """How the drain claims the ten jobs: their type, and what makes it take that path
    (``arrange(conn, sql, poison_id, innocent_ids)``, after they are inserted)."""

    arrange: Callable[..., object]
    job_type: str = "test-noop"


def _nothing(conn, sql, bad, innocent):
    pass


def _lost_a_claim(conn, sql, bad, innocent):
    # A drain died holding it, its start unknown: the next drain claims it alone.
    sql("UPDATE jobs SET lost_claims = 1 WHERE id = :id", id=bad)


def _tenants(conn, sql, bad, innocent):
    # One tenant per job: the fair claim's shares add up to the whole batch in one claim.
    sql("UPDATE jobs SET tenant = 'tenant-' || id")


def _ordering_keys(conn, sql, bad, innocent):
    # The poison holds its key's first place: the job behind it runs only once it has ended.
    sql("UPDATE jobs SET ordering_key = CASE WHEN id IN (:bad, :next) THEN 'shared' "
        "ELSE 'own-' || id END", bad=bad, next=innocent[-1])


PATHS = {
    "plain": ClaimPath(_nothing),
    "lone": ClaimPath(_lost_a_claim),
    "fair": ClaimPath(_tenants),
    "capped queue": ClaimPath(lambda conn, *_: pgdrain.set_queue(conn, "default",
                                                                 max_running=100)),
    # Per minute, as the rated type's (poison_jobs.py): a slack of 1 s, not 50 ms.
    "queue rate": ClaimPath(lambda conn, *_: pgdrain.set_queue(conn, "default",
                                                               rate="1000/min")),
    "rated type": ClaimPath(_nothing, job_type=RATED),
    "ordered": ClaimPath(_ordering_keys),
}


@pytest.fixture
def rated_type_unloaded():
    """Take the rated type out of the process's REGISTRY (and its module out of sys.modules)
    after the test, as before it: the other tests' drains must not claim for it."""
    yield
    pgdrain.REGISTRY._handlers.pop(RATED, None)
    sys.modules.pop(RATED_JOBS, None)


def _drain_until_idle(app) -> Counter:
    """Invoke the function (POST /drain, as an operator would) until a drain claims nothing;
    every answer must be a 200. The counts added up."""
    totals: Counter = Counter()
    for _ in range(4):
        response = app.lambda_handler(load_event("drain_api.json"), LambdaContext())
        assert response["statusCode"] == 200, response["body"]
        summary = json.loads(response["body"])
        totals.update({k: v for k, v in summary.items() if isinstance(v, int)})
        if summary["claimed"] == 0:
            return totals
    raise AssertionError(f"still claiming after 4 invocations: {totals}")


@pytest.mark.parametrize("concurrency", ["1", "4"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("poison", POISONS)
def test_a_poison_row_ends_alone_and_its_batch_mates_run(load_function, function_env, conn,
                                                         sql, rated_type_unloaded, poison,
                                                         path, concurrency):
    how, what = PATHS[path], POISONS[poison]
    # One innocent job first, then the poison at the head of the rest (inserted before them,
    # at their priority): a drain's first claim takes one job per free handler, its next ones
    # more, so at either concurrency the poison shares a claim with innocent jobs.
    lead = pgdrain.enqueue(conn, how.job_type, priority=-1).id
    bad = _insert_with_plain_sql(sql, what, how.job_type)
    innocent = [lead] + [r.id for r in pgdrain.enqueue_many(
        conn, [{"job_type": how.job_type}] * 8)]
    how.arrange(conn, sql, bad, innocent)
    modules = function_env["PGDRAIN_JOBS"] + (f",{RATED_JOBS}" if how.job_type == RATED else "")
    app = load_function("drain", PGDRAIN_BATCH_SIZE="10", PGDRAIN_CONCURRENCY=concurrency,
                        PGDRAIN_JOBS=modules)

    totals = _drain_until_idle(app)
    assert (totals["claimed"], totals["done"], totals["failed"], totals["retried"],
            totals["released"]) == (10, 9 if what.fails else 10, 1 if what.fails else 0, 0, 0)

    rows = {r["id"]: r for r in sql("SELECT id, status, attempts, last_error FROM jobs")}
    if what.fails:
        assert rows[bad]["status"] == "failed"
        assert rows[bad]["last_error"].startswith(UNDECODABLE), rows[bad]
    else:
        assert (rows[bad]["status"], rows[bad]["attempts"]) == ("done", 1), rows[bad]
    assert all((rows[i]["status"], rows[i]["attempts"]) == ("done", 1) for i in innocent), rows
    assert sql("SELECT count(*) AS n FROM jobs WHERE status = 'running'")[0]["n"] == 0


@pytest.mark.parametrize("poison", UNDECODABLE_POISONS)
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
    _insert_with_plain_sql(sql, POISONS["a 5,001-digit number"])
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop", "max_attempts": 1}] * 9)
    app = load_function("drain", PGDRAIN_BATCH_SIZE="10")
    for _ in range(3):
        app.lambda_handler({}, LambdaContext())
        sql("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
            "WHERE status = 'running'")
    counts = {(r["job_type"], r["status"], r["attempts"]): r["n"] for r in sql(
        "SELECT job_type, status, attempts, count(*) AS n FROM jobs GROUP BY 1, 2, 3")}
    assert counts == {("test-noop", "failed", 1): 1, ("test-noop", "done", 1): 9}


@pytest.mark.parametrize("poison", ["a run_at of -infinity", "a BC run_at"])
def test_the_queue_lag_of_a_job_due_before_year_1_counts_from_year_1(load_function, conn, sql,
                                                                     capsys, poison):
    # As the backlog's OldestDueAge counts it: the metric that says how late jobs start must
    # not show the oldest job of all as on time.
    _insert_with_plain_sql(sql, POISONS[poison])
    app = load_function("drain")
    capsys.readouterr()
    response = app.lambda_handler(load_event("drain_api.json"), LambdaContext())
    assert json.loads(response["body"])["done"] == 1
    [emf] = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if '"_aws"' in line and '"QueueLag"' in line]
    [lag] = emf["QueueLag"]
    assert lag > 6e10  # seconds since year 1
