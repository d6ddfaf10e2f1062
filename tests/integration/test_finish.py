"""Finishing writes: complete, retry, fail, release, each guarded by the claim it belongs to."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

import pgdrain
from pgdrain.models import Finish
from pgdrain.policy import Backoff

NO_JITTER = Backoff(base_seconds=2, cap_seconds=3600, jitter=0)


def claim_one(conn, **kwargs):
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60, **kwargs)
    return job


def expire_leases(sql):
    sql("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE status = 'running'")


def test_complete(conn, sql):
    pgdrain.enqueue_many(conn, [{"job_type": "a"}, {"job_type": "b"}])
    jobs = pgdrain.claim(conn, batch_size=2, lease_seconds=60)
    assert pgdrain.complete(conn, jobs) == pgdrain.Written(ids=tuple(j.id for j in jobs))
    rows = sql("SELECT status, finished_at IS NOT NULL AS finished, lease_token, "
               "lease_expires_at FROM jobs")
    assert rows == [{"status": "done", "finished": True, "lease_token": None,
                     "lease_expires_at": None}] * 2


def test_retry_backs_off_on_the_database_clock_and_keeps_the_error(conn, sql):
    pgdrain.enqueue(conn, "sync-crm")
    job = claim_one(conn)
    status, written = pgdrain.record_failure(conn, job, "TimeoutError: CRM API timed out",
                                             NO_JITTER)
    assert (status, written) == ("pending", True)
    [row] = sql("SELECT status, attempts, run_at - updated_at AS wait, last_error, errors, "
                "lease_token FROM jobs")
    assert (row["status"], row["attempts"]) == ("pending", 1)
    assert row["wait"] == timedelta(seconds=2)
    assert row["last_error"] == "TimeoutError: CRM API timed out"
    assert [(e["attempt"], e["error"]) for e in row["errors"]] == [
        (1, "TimeoutError: CRM API timed out")]
    assert row["lease_token"] is None
    assert pgdrain.claim(conn, batch_size=1, lease_seconds=60) == []  # waiting out the backoff


def test_out_of_attempts_lands_in_failed_with_every_error(conn, sql):
    pgdrain.enqueue(conn, "flaky", max_attempts=3)
    for attempt in (1, 2, 3):
        sql("UPDATE jobs SET run_at = now() WHERE status = 'pending'")  # skip the backoff
        job = claim_one(conn)
        assert job.attempts == attempt
        status, written = pgdrain.record_failure(conn, job, f"boom {attempt}", NO_JITTER)
        assert written
    assert status == "failed"
    [row] = sql("SELECT status, attempts, last_error, errors, finished_at IS NOT NULL AS f "
                "FROM jobs")
    assert (row["status"], row["attempts"], row["last_error"], row["f"]) == (
        "failed", 3, "boom 3", True)
    assert [e["attempt"] for e in row["errors"]] == [1, 2, 3]


def test_not_retryable_fails_at_once(conn):
    pgdrain.enqueue(conn, "x", max_attempts=5)
    job = claim_one(conn)
    assert pgdrain.record_failure(conn, job, "bad request", NO_JITTER, retryable=False) == (
        "failed", True)


def test_release_refunds_the_attempt_and_is_due_at_once(conn, sql):
    pgdrain.enqueue(conn, "x")
    job = claim_one(conn)
    assert pgdrain.release(conn, [job]).ids == (job.id,)
    [row] = sql("SELECT status, attempts, lease_token, run_at <= now() AS due FROM jobs")
    assert row == {"status": "pending", "attempts": 0, "lease_token": None, "due": True}
    assert claim_one(conn).attempts == 1


def test_error_text_is_bounded_and_nul_free(conn):
    pgdrain.enqueue(conn, "x", max_attempts=1)
    job = claim_one(conn)
    assert pgdrain.fail(conn, job, "a\x00b" + "z" * 10_000)
    last_error = pgdrain.get_job(conn, job.id)["last_error"]
    assert last_error.startswith("a\\0b") and len(last_error) == 4000


def test_stale_worker_changes_nothing(conn, sql):
    """A slow worker loses its lease, another claims the job: the slow one's writes are stale."""
    pgdrain.enqueue(conn, "slow")
    sql("UPDATE jobs SET lost_claims = 1")  # claimed alone, its start recorded: charged below
    slow = pgdrain.store.claim_alone(conn, lease_seconds=60)
    expire_leases(sql)
    assert pgdrain.run_janitor(conn, pgdrain.Settings(backoff=Backoff(0, 0, 0))).reclaimed == 1
    fresh = pgdrain.store.claim_alone(conn, lease_seconds=60)
    assert fresh.id == slow.id and fresh.attempts == 2

    assert pgdrain.complete(conn, [slow]) == pgdrain.Written(stale=(slow.id,))
    assert pgdrain.retry(conn, slow, "late", 5) is False
    assert pgdrain.fail(conn, slow, "late") is False
    assert pgdrain.release(conn, [slow]) == pgdrain.Written(stale=(slow.id,))
    [row] = sql("SELECT status, attempts, lease_token::text AS token FROM jobs")
    assert row == {"status": "running", "attempts": 2, "token": fresh.lease_token}

    assert pgdrain.complete(conn, [fresh]).ids == (fresh.id,)
    assert pgdrain.complete(conn, [fresh]).stale == (fresh.id,)  # a second finish is stale too


def test_a_forged_lease_token_is_one_array_element_and_changes_nothing(conn, sql):
    # Every element of an array parameter is quoted: a token that tries to end the literal
    # and add an element of its own is just an invalid uuid.
    from dataclasses import replace

    pgdrain.enqueue(conn, "x")
    job = claim_one(conn)
    forged = replace(job, lease_token=f'x"}}, {{"{job.lease_token}')
    with pytest.raises(pgdrain.QueryFailed, match="invalid input syntax for type uuid"):
        pgdrain.complete(conn, [forged])
    assert sql("SELECT status FROM jobs")[0]["status"] == "running"
    assert pgdrain.complete(conn, [job]).ids == (job.id,)



def test_a_done_job_forgotten_leaves_no_row_but_one_holding_a_dedupe_key_stays_done(conn, sql):
    """Done rows not kept (PGDRAIN_RETENTION_SECONDS=0): the finish deletes the row, guarded
    by the claim as a finish is; a job holding a dedupe key stays done, as a unique window
    counts done rows, for the janitor's purge."""
    pgdrain.enqueue_many(conn, [{"job_type": "a"}, {"job_type": "b", "dedupe_key": "b-1"},
                                {"job_type": "c"}])
    claimed = {j.job_type: j for j in pgdrain.claim(conn, batch_size=3, lease_seconds=60)}
    a, b, c = claimed["a"], claimed["b"], claimed["c"]
    written = pgdrain.store.finish_many(conn, [Finish.done(j, forget=True) for j in (a, b)])
    assert sorted(written.ids) == sorted([a.id, b.id]) and written.stale == ()
    assert sql("SELECT id, status, dedupe_key, finished_at IS NOT NULL AS finished, "
               "lease_token::text AS token FROM jobs ORDER BY job_type") == [
        {"id": b.id, "status": "done", "dedupe_key": "b-1", "finished": True, "token": None},
        {"id": c.id, "status": "running", "dedupe_key": None, "finished": False,
         "token": c.lease_token}]
    # A second finish of a forgotten job, or one with another claim's token, is stale.
    assert pgdrain.store.finish_many(conn, [Finish.done(a, forget=True)]).stale == (a.id,)
    forged = replace(c, lease_token=a.lease_token)
    assert pgdrain.store.finish_many(conn, [Finish.done(forged, forget=True)]).stale == (c.id,)
    assert sql("SELECT status FROM jobs WHERE id = :id", id=c.id) == [{"status": "running"}]
