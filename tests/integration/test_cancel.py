"""Cancel (pgdrain.cancel, plain SQL) and the retention of failed and cancelled jobs, against
PostgreSQL: a cancelled job never runs, a running one asked to stop ends cancelled instead of
retried, a finished one stays as it was, and a cancel racing a claim never lets the job run
after the cancel committed."""

from __future__ import annotations

import threading

import pytest

import pgdrain
from pgdrain import Settings
from pgdrain.db import connect


def test_a_pending_job_is_cancelled_and_never_claimed(conn, sql):
    due, later = (pgdrain.enqueue(conn, "send-email").id,
                  pgdrain.enqueue(conn, "report", delay_seconds=3600).id)
    assert pgdrain.cancel(conn, [due, later]) == {due: "cancelled", later: "cancelled"}
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []
    rows = sql("SELECT status, finished_at IS NOT NULL AS finished FROM jobs ORDER BY id")
    assert rows == [{"status": "cancelled", "finished": True}] * 2
    # Again: it had finished (as cancelled).
    assert pgdrain.cancel(conn, [due]) == {due: "already_cancelled"}
    assert pgdrain.get_job(conn, due)["status"] == "cancelled"


def test_a_running_job_asked_to_stop_ends_cancelled_instead_of_retried(conn):
    ident = pgdrain.enqueue(conn, "sync-crm").id
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    assert pgdrain.cancel(conn, [ident]) == {ident: "cancel_requested"}
    assert pgdrain.get_job(conn, ident)["cancel_requested_at"] is not None
    assert pgdrain.retry(conn, job, "CRM API timed out", 5)
    view = pgdrain.get_job(conn, ident)
    assert (view["status"], view["last_error"]) == ("cancelled", "CRM API timed out")
    assert view["finished_at"] is not None


@pytest.mark.parametrize(("finish", "status"), [("complete", "done"), ("fail", "failed")])
def test_a_running_job_that_finishes_anyway_keeps_its_outcome(conn, finish, status):
    ident = pgdrain.enqueue(conn, "sync-crm").id
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    pgdrain.cancel(conn, [ident])
    if finish == "complete":
        pgdrain.complete(conn, [job])
    else:
        pgdrain.fail(conn, job, "boom")
    assert pgdrain.get_job(conn, ident)["status"] == status
    assert pgdrain.cancel(conn, [ident]) == {ident: f"already_{status}"}


def test_a_requeued_job_forgets_an_old_request_to_stop(conn):
    ident = pgdrain.enqueue(conn, "sync-crm").id
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    pgdrain.cancel(conn, [ident])
    pgdrain.fail(conn, job, "boom")
    assert pgdrain.requeue_failed(conn, ids=[ident]) == [ident]
    [again] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    assert pgdrain.retry(conn, again, "flaky", 0)
    assert pgdrain.get_job(conn, ident)["status"] == "pending"


def test_unknown_ids_and_bad_ids(conn):
    assert pgdrain.cancel(conn, [987654]) == {987654: "not_found"}
    assert pgdrain.cancel(conn, []) == {}
    with pytest.raises(pgdrain.InvalidJobId):
        pgdrain.cancel(conn, [0])


def test_plain_sql_cancels_a_pending_job(conn, sql):
    ident = pgdrain.enqueue(conn, "send-email").id
    sql("UPDATE jobs SET status = 'cancelled' WHERE id = :id AND status = 'pending'", id=ident)
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []
    with pytest.raises(Exception, match="jobs_status_check"):
        sql("UPDATE jobs SET status = 'canceled' WHERE id = :id", id=ident)


def _race(database_url: str, ident: int) -> dict[str, object]:
    """A claim and a cancel of ``ident``, started together on two connections."""
    outcome: dict[str, object] = {}
    start = threading.Barrier(2)

    def claim() -> None:
        c = connect(database_url)
        try:
            start.wait()
            outcome["claimed"] = [j.id for j in pgdrain.claim(c, batch_size=1, lease_seconds=60)]
        finally:
            c.close()

    def cancel() -> None:
        c = connect(database_url)
        try:
            start.wait()
            outcome["cancel"] = pgdrain.cancel(c, [ident])[ident]
        finally:
            c.close()

    threads = [threading.Thread(target=claim), threading.Thread(target=cancel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcome


def test_a_cancel_racing_a_claim_never_lets_the_job_run_after_it(database_url, conn, sql):
    # 200 rounds: a claim and a cancel start together. Either the cancel committed first (the
    # job is cancelled and the claim took nothing) or the claim did (the job was running and
    # is asked to stop). Never both a committed cancel and a claim after it.
    for _ in range(200):
        ident = pgdrain.enqueue(conn, "send-email").id
        outcome = _race(database_url, ident)
        status = pgdrain.get_job(conn, ident)["status"]
        if outcome["cancel"] == "cancelled":
            assert outcome["claimed"] == [] and status == "cancelled"
        else:
            assert outcome["cancel"] == "cancel_requested"
            assert outcome["claimed"] == [ident] and status == "running"
        sql("DELETE FROM jobs WHERE id = :id", id=ident)


def test_the_janitor_purges_failed_and_cancelled_jobs_after_their_retention(conn, sql):
    ids = [r.id for r in pgdrain.enqueue_many(conn, [{"job_type": "t"}] * 6)]
    jobs = pgdrain.claim(conn, batch_size=4, lease_seconds=60)
    pgdrain.fail(conn, jobs[0], "old failure")
    pgdrain.fail(conn, jobs[1], "new failure")
    pgdrain.complete(conn, jobs[2:4])
    pgdrain.cancel(conn, ids[4:6])
    sql("UPDATE jobs SET finished_at = now() - interval '31 days' WHERE id = ANY(:ids)",
        ids=[ids[0], ids[2], ids[4]])
    result = pgdrain.run_janitor(conn, Settings(retention_seconds=40 * 86400))
    assert result.purged == 2  # the old failed and the old cancelled; done is kept 40 days
    left = sql("SELECT id, status FROM jobs ORDER BY id")
    assert [r["id"] for r in left] == [ids[1], ids[2], ids[3], ids[5]]
    # Nothing else is ever deleted: pending and running jobs stay whatever their age.
    assert Settings().failed_retention_seconds == 30 * 86400


def test_a_pending_job_asked_to_stop_is_neither_claimed_nor_counted_due(conn, sql):
    # Plain SQL can make a job asked to stop pending again (job_cancel marks running ones):
    # no claim takes it, and the due count that decides continuation does not count it.
    ident = pgdrain.enqueue(conn, "export").id
    sql("UPDATE jobs SET cancel_requested_at = now() WHERE id = :id", id=ident)
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60, fair=True) == []
    from pgdrain.store import due_count
    assert due_count(conn, limit=10) == (0, False)
    assert pgdrain.get_job(conn, ident)["status"] == "pending"


def test_the_janitor_ends_a_pending_job_asked_to_stop_cancelled(conn, sql):
    # A job asked to stop while it ran, then made pending again by plain SQL that did not clear
    # the request (pgdrain.requeue does): no claim takes it, so it stayed pending for ever,
    # neither due nor scheduled. The janitor ends it cancelled; other pending jobs stay.
    stopped, other = (r.id for r in pgdrain.enqueue_many(conn, [{"job_type": "export"}] * 2))
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    assert job.id == stopped
    assert pgdrain.cancel(conn, [stopped]) == {stopped: "cancel_requested"}
    sql("UPDATE jobs SET status = 'pending', lease_token = NULL, lease_expires_at = NULL "
        "WHERE id = :id", id=stopped)
    result = pgdrain.run_janitor(conn, Settings())
    assert result.cancelled == 1
    assert pgdrain.get_job(conn, stopped)["status"] == "cancelled"
    assert pgdrain.get_job(conn, stopped)["finished_at"] is not None
    assert pgdrain.get_job(conn, other)["status"] == "pending"
    assert pgdrain.run_janitor(conn, Settings()).cancelled == 0
