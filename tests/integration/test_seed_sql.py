"""The seed article's plain SQL keeps working against pgdrain's table."""

from __future__ import annotations

import pgdrain


def test_plain_insert_enqueues_a_claimable_job(conn, sql):
    sql("""INSERT INTO jobs (job_type, payload)
           VALUES ('send-email', '{"to": "sarah@example.com"}')""")
    [job] = pgdrain.claim(conn, batch_size=10, lease_seconds=60)
    assert (job.job_type, job.payload, job.attempts, job.max_attempts) == (
        "send-email", {"to": "sarah@example.com"}, 1, 3)
    assert (job.queue, job.priority) == ("default", 0)


def test_plain_requeue_runs_a_failed_job_again(conn, sql):
    pgdrain.enqueue(conn, "sync-crm", {"contactId": 42}, max_attempts=1)
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    assert pgdrain.fail(conn, job, "CRM API timed out")

    sql("UPDATE jobs SET status = 'pending', run_at = now() WHERE status = 'failed'")

    [again] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    assert again.id == job.id
    assert pgdrain.complete(conn, [again]).ids == (job.id,)
    row = pgdrain.get_job(conn, job.id)
    assert row["status"] == "done"
    assert row["last_error"] == "CRM API timed out"  # the history of the failure is kept


def test_seed_retry_query_still_applies(conn, sql):
    # The article's own retry statement, run by hand on a claimed job.
    pgdrain.enqueue(conn, "x")
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    sql("""UPDATE jobs
           SET status = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END,
               run_at = now() + make_interval(secs => power(2, attempts))
           WHERE id = :id""", id=job.id)
    assert pgdrain.get_job(conn, job.id)["status"] == "pending"
