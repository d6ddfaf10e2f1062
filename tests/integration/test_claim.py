"""The claim: one statement, SKIP LOCKED, ordered, bounded, stamping the lease."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

import pgdrain
from pgdrain.db import Session
from pgdrain.sql import QUERIES


def test_claim_flips_to_running_spends_an_attempt_and_stamps_a_lease(conn, sql):
    pgdrain.enqueue(conn, "send-email", {"to": "sarah@example.com"})
    [job] = pgdrain.claim(conn, batch_size=5, lease_seconds=90)
    assert job.attempts == 1
    [row] = sql("SELECT status, attempts, claimed_at, lease_expires_at - claimed_at AS lease, "
                "lease_token::text AS token, updated_at = claimed_at AS stamped FROM jobs")
    assert (row["status"], row["attempts"]) == ("running", 1)
    assert row["lease"] == timedelta(seconds=90)
    assert row["token"] == job.lease_token
    assert row["stamped"]
    assert pgdrain.claim(conn, batch_size=5, lease_seconds=90) == []  # nothing left to claim


def test_claim_order_is_priority_then_run_at_then_id(conn, sql):
    ids = {}
    for name, priority, ago in [("late-low", 5, 10), ("early-low", 5, 20), ("urgent", -1, 1),
                                ("normal-a", 0, 30), ("normal-b", 0, 30)]:
        ids[name] = pgdrain.enqueue(conn, name, priority=priority).id
        sql("UPDATE jobs SET run_at = now() - make_interval(secs => :ago) WHERE id = :id",
            ago=ago, id=ids[name])
    claimed = pgdrain.claim(conn, batch_size=10, lease_seconds=60)
    assert [j.job_type for j in claimed] == ["urgent", "normal-a", "normal-b", "early-low",
                                             "late-low"]
    first_two = [j.job_type for j in claimed[:2]]
    assert first_two == ["urgent", "normal-a"]


def test_claim_takes_at_most_batch_size_in_order(conn):
    ids = [r.id for r in pgdrain.enqueue_many(conn, [{"job_type": "x"}] * 25)]
    batches = [pgdrain.claim(conn, batch_size=10, lease_seconds=60) for _ in range(4)]
    assert [len(b) for b in batches] == [10, 10, 5, 0]
    assert [j.id for b in batches for j in b] == ids


def test_future_jobs_wait_for_run_at(conn):
    pgdrain.enqueue(conn, "later", delay_seconds=60)
    due = pgdrain.enqueue(conn, "now").id
    assert [j.id for j in pgdrain.claim(conn, batch_size=10, lease_seconds=60)] == [due]


def test_queue_filter(conn):
    pgdrain.enqueue(conn, "a", queue="emails")
    pgdrain.enqueue(conn, "b", queue="webhooks")
    pgdrain.enqueue(conn, "c", queue="exports")
    claimed = pgdrain.claim(conn, batch_size=10, lease_seconds=60, queues=["emails", "exports"])
    assert sorted(j.job_type for j in claimed) == ["a", "c"]
    assert [j.job_type for j in pgdrain.claim(conn, batch_size=10, lease_seconds=60)] == ["b"]


def test_prepared_claim_behaves_the_same(conn):
    session = Session(conn, prepare=True)
    pgdrain.enqueue_many(conn, [{"job_type": "x"}] * 3)
    for _ in range(7):  # past PostgreSQL's switch to a generic plan after five runs
        pgdrain.claim(session, batch_size=1, lease_seconds=60, queues=["nope"])
    assert len(pgdrain.claim(session, batch_size=2, lease_seconds=60)) == 2
    assert len(pgdrain.claim(session, batch_size=2, lease_seconds=60, queues=["default"])) == 1


def test_claim_uses_the_pending_index_with_a_large_history(conn, sql):
    sql("""INSERT INTO jobs (job_type, status, finished_at)
           SELECT 'old', 'done', now() FROM generate_series(1, 20000)""")
    pgdrain.enqueue_many(conn, [{"job_type": "x"}] * 5)
    sql("ANALYZE jobs")
    statement = QUERIES["job_claim_batch"].replace(":queues::text[]", "NULL::text[]") \
        .replace(":limited_types::text[]", "NULL::text[]") \
        .replace(":batch_size::int", "10").replace(":lease_seconds::float8", "60")
    plan = "\n".join(r["QUERY PLAN"] for r in sql("EXPLAIN " + statement))
    assert "jobs_pending_idx" in plan


def test_every_claim_returns_the_jobs_fields_in_their_order(conn):
    # The claims that return rows (job_claim_returning) name Job's fields, in order; the
    # plain claims' document (job_claim_document) holds as many values, in the same order
    # (the next test reads them back as a row would give them).
    from dataclasses import fields

    from pgdrain.models import Job

    expected = [f.name for f in fields(Job)][:20]
    assert expected[-1] == "trace_context" and "payload_error" not in expected
    pgdrain.enqueue_many(conn, [{"job_type": "a", "payload": {"n": 1}, "queue": "q"},
                                {"job_type": "b", "dedupe_key": "k"}, {"job_type": "c"}])
    session = Session(conn)
    [row] = session.rows("job_claim_ids", ids=[conn.run("SELECT min(id) FROM jobs")[0][0]],
                         lease_seconds=60)
    assert list(row) == expected
    for name in ("job_claim_batch", "job_claim_batch_by_queue"):
        [[document]] = session.values(name, batch_size=1, lease_seconds=60, queues=None,
                                      limited_types=None)
        [values] = json.loads(document)
        assert len(values) == len(expected), name
    [[document]] = session.values("job_claim_batch", batch_size=1, lease_seconds=60,
                                  queues=None, limited_types=None)
    assert document is None  # nothing left: no row of jobs, no empty array
    assert pgdrain.claim(conn, batch_size=5, lease_seconds=60) == []


RETURNING = """id, job_type, payload::text AS payload, attempts, max_attempts, queue, priority,
run_at, created_at, claimed_at, lease_expires_at, lease_token::text AS lease_token,
dedupe_key, lost_claims, tenant, after_parents, tags AS tag_list, meta::text AS meta_json"""
"""job_claim_returning's columns, to read a claimed job back as a row."""


@pytest.mark.parametrize("by_queue", [False, True])
def test_a_claimed_job_is_the_same_from_the_document_as_from_its_row(conn, by_queue):
    # Every value comes back from the plain claim's JSON document as the job's row gives it:
    # text exactly, numbers, payloads (one Python cannot decode fails alone), and timestamps
    # Python has no datetime for as PostgreSQL's text.
    from pgdrain import store
    from pgdrain.claimed import claimed_job

    text = "tab\t quote\" backslash\\ é \u2028 \U0001f600 \x01 \u00a0 end "
    pgdrain.enqueue(conn, "a", {"n": [1, 2.5], "s": text, "big": 2**70}, queue=text,
                    priority=-3, dedupe_key=text, tags=["x", "y:Z"], meta={"s": text})
    conn.run("INSERT INTO jobs (job_type, payload) VALUES ('bad', "
             "('[' || repeat('[', 3000) || repeat(']', 3000) || ']')::jsonb)")
    conn.run("INSERT INTO jobs (job_type, run_at, created_at) "
             "VALUES ('old', '-infinity', '0044-03-15 12:00:00+00 BC')")
    jobs = store.claim(conn, batch_size=5, lease_seconds=60, by_queue=by_queue)
    assert [j.job_type for j in jobs] == ["a", "old", "bad"]
    rows = {r[0]: dict(zip([c["name"] for c in conn.columns], r, strict=True))
            for r in conn.run(f"SELECT {RETURNING} FROM jobs")}
    assert jobs == [claimed_job(rows[job.id]) for job in jobs]
    a, old, bad = jobs
    assert a.payload == {"n": [1, 2.5], "s": text, "big": 2**70} and a.payload_error is None
    assert (a.queue, a.dedupe_key, a.priority, a.attempts) == (text, text, -3, 1)
    assert (a.tags, a.meta, old.tags, old.meta) == (["x", "y:Z"], {"s": text}, [], {})
    assert bad.payload is None and "nested too deeply" in bad.payload_error
    assert old.run_at == "-infinity" and old.created_at.endswith(" BC")
    assert a.claimed_at.tzinfo is not None and a.lease_expires_at > a.claimed_at
