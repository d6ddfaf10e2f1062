"""Every text value round-trips exactly (issue: faults, item 3).

pg8000 builds array literals itself and quotes an element only when it must; it missed that
PostgreSQL reads an unquoted ``null`` in any case as NULL. The strings "null", "Null" and
"nULl" then became SQL NULLs in every batched statement: a queue of "null" broke the NOT NULL
constraint, a dedupe key of "null" vanished (and the enqueue inserted six rows before giving
up), and ``PGDRAIN_QUEUES=null`` drained nothing. pgdrain now quotes every element itself.

Checked here: hand-picked strings, then hypothesis with arbitrary text in every string field
(job_type, queue, dedupe_key, payload keys and values), through the library on a native
connection in autocommit, on a DB-API connection in the caller's transaction, in batches, and
through the enqueue function and the drain's queue filter.
"""

from __future__ import annotations

import json
import os

import pg8000.dbapi
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pgdrain
from pgdrain.db import parse_database_url
from pgdrain_dev.context import LambdaContext
from tests.functions import conftest as function_fixtures
from tests.support.functions import load_event

function_env = function_fixtures.function_env
load_function = function_fixtures.load_function

EXAMPLES = int(os.environ.get("PGDRAIN_FUZZ_EXAMPLES") or 300)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# What PostgreSQL's array syntax gives a meaning to, in every case and spacing.
TRICKY = ["null", "Null", "nULl", "NULL", " null", "null ", "NULL\t", '"', '""', "\\", "\\\\",
          "{", "}", "{}", ",", "a,b", "{null}", '"null"', "'", "a b", " ", "\t", "\n",
          "\u00e9", "\U0001f600", "\u200b", "\ufeff", "NaN", "-infinity", "t", "f", "0", "1e5"]


def _valid(text: str) -> bool:
    # What new_job accepts: non-blank, no NUL, no lone surrogate.
    return bool(text.strip()) and "\x00" not in text and not any(
        0xD800 <= ord(c) <= 0xDFFF for c in text)


texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                min_size=1, max_size=40).filter(_valid) | st.sampled_from(
                    [t for t in TRICKY if _valid(t)])
payload_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8)
jobs = st.fixed_dictionaries({
    "job_type": texts, "queue": texts, "payload": st.dictionaries(texts, payload_values,
                                                                 max_size=4)},
    optional={"dedupe_key": texts})


def _stored(sql, ident: int) -> dict:
    [row] = sql("SELECT job_type, queue, dedupe_key, payload::text AS payload FROM jobs "
                "WHERE id = :id", id=ident)
    return {**row, "payload": json.loads(row["payload"])}


def _expected(job: dict) -> dict:
    return {"job_type": job["job_type"], "queue": job["queue"],
            "dedupe_key": job.get("dedupe_key"), "payload": job["payload"]}


@pytest.mark.parametrize("text", [t for t in TRICKY if _valid(t)])
def test_tricky_strings_in_every_field(conn, sql, text):
    result = pgdrain.enqueue(conn, text, {text: text}, queue=text, dedupe_key=text)
    assert result.created
    assert _stored(sql, result.id) == {"job_type": text, "queue": text, "dedupe_key": text,
                                       "payload": {text: text}}
    # The key really is live: the same key again gets the same job, and nothing is added.
    assert pgdrain.enqueue(conn, text, {}, dedupe_key=text) == pgdrain.EnqueueResult(
        result.id, False)
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 1


def test_arbitrary_text_round_trips_on_a_native_connection(conn, sql):
    @FUZZ
    @given(batch=st.lists(jobs, min_size=1, max_size=5))
    def check(batch):
        sql("DELETE FROM jobs")
        results = pgdrain.enqueue_many(conn, batch)
        seen_keys: dict[str, int] = {}
        for job, result in zip(batch, results, strict=True):
            key = job.get("dedupe_key")
            if key is not None and key in seen_keys:  # an earlier item of the batch holds it
                assert (result.id, result.created) == (seen_keys[key], False)
                continue
            assert result.created
            assert _stored(sql, result.id) == _expected(job)
            if key is not None:
                seen_keys[key] = result.id

    check()


def test_arbitrary_text_round_trips_on_a_dbapi_connection_in_its_transaction(
        database_url, sql):
    params = parse_database_url(database_url)
    app = pg8000.dbapi.connect(user=params.user, password=params.password,
                               host=params.host or "localhost", port=params.port,
                               database=params.database, unix_sock=params.unix_sock)
    try:
        @FUZZ
        @given(job=jobs)
        def check(job):
            result = pgdrain.enqueue(app, job["job_type"], job["payload"],
                                     queue=job["queue"], dedupe_key=job.get("dedupe_key"))
            app.commit()
            assert _stored(sql, result.id) == _expected(job)
            sql("DELETE FROM jobs")

        check()
    finally:
        app.close()


@pytest.mark.parametrize("text", ["null", "Null", "nULl"])
def test_the_api_keeps_the_text_it_was_sent(load_function, sql, text):
    app = load_function("enqueue")

    def post(body: dict, **headers: str) -> tuple[int, dict]:
        event = load_event("enqueue_single.json")
        event["body"] = json.dumps(body)
        event["headers"] = {**event["headers"], **headers}
        response = app.lambda_handler(event, LambdaContext())
        return response["statusCode"], json.loads(response["body"])

    assert post({"job_type": "test-noop", "queue": text})[0] == 201
    status, body = post({"job_type": "test-noop", "dedupe_key": text})
    assert status == 201
    assert post({"job_type": "test-noop", "dedupe_key": text}) == (
        200, {"ids": body["ids"], "created": [False]})
    # The header is the same key: the same job.
    assert post({"job_type": "test-noop"}, **{"Idempotency-Key": text}) == (
        200, {"ids": body["ids"], "created": [False]})
    assert sorted((r["queue"], r["dedupe_key"]) for r in sql(
        "SELECT queue, dedupe_key FROM jobs")) == sorted([(text, None), ("default", text)])


def test_a_queue_named_null_is_drained(load_function, conn, sql):
    pgdrain.enqueue(conn, "test-noop", queue="null")
    pgdrain.enqueue(conn, "test-noop", queue="other")
    summary = load_function("drain", PGDRAIN_QUEUES="null").lambda_handler({}, LambdaContext())
    assert (summary["claimed"], summary["done"]) == (1, 1)
    assert {r["queue"]: r["status"] for r in sql("SELECT queue, status FROM jobs")} == {
        "null": "done", "other": "pending"}
