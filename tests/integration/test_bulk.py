"""Bulk actions by filter (pgdrain.bulk): counted first, then done up to the highest id
counted, a batch at a time, each batch a short transaction that neither holds a drain back
nor waits long behind one; a running job is never deleted, and cancelling it asks it to stop."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

import pgdrain
from pgdrain import bulk
from pgdrain.bulk import JobFilter


def tagged(conn, n: int, *tags: str, **options) -> list[int]:
    return [r.id for r in pgdrain.enqueue_many(
        conn, [{"job_type": "t", "tags": list(tags) or None, **options} for _ in range(n)])]


def statuses(sql, ids: list[int]) -> Counter[str]:
    return Counter(r["status"] for r in sql("SELECT status FROM jobs WHERE id = ANY(:ids)",
                                            ids=ids))


def test_count_then_cancel_by_tag_in_batches(conn, sql):
    red = tagged(conn, 25, "red")
    other = tagged(conn, 5, "blue")
    counted = bulk.count(conn, "cancel", JobFilter(tags=("red",)))
    assert (counted.jobs, counted.complete, counted.upto) == (25, True, other[-1])
    done = bulk.act(conn, "cancel", JobFilter(tags=("red",)), upto=counted.upto, batch=7)
    assert (done.outcomes, done.next_upto, done.stopped) == (Counter(cancelled=25), None, None)
    assert statuses(sql, red) == Counter(cancelled=25)
    assert statuses(sql, other) == Counter(pending=5)


def test_a_job_enqueued_after_the_count_is_not_touched(conn, sql):
    tagged(conn, 3, "red")
    counted = bulk.count(conn, "delete", JobFilter(tags=("red",)))
    later = tagged(conn, 2, "red")
    done = bulk.act(conn, "delete", JobFilter(tags=("red",)), upto=counted.upto)
    assert done.outcomes == Counter(deleted=3)
    assert [r["id"] for r in sql("SELECT id FROM jobs ORDER BY id")] == later


def test_delete_leaves_a_running_job_and_cancel_asks_it_to_stop(conn, sql):
    ids = tagged(conn, 3, "red")
    [running] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    match = JobFilter(tags=("red",))
    counted = bulk.count(conn, "delete", match)
    assert counted.jobs == 2  # the running one is not among those delete applies to
    assert bulk.act(conn, "delete", match, upto=counted.upto).outcomes == Counter(deleted=2)
    [row] = sql("SELECT id, status FROM jobs")
    assert (row["id"], row["status"]) == (running.id, "running")
    done = bulk.act(conn, "cancel", match, upto=max(ids))
    assert done.outcomes == Counter(cancel_requested=1)
    assert sql("SELECT cancel_requested_at IS NOT NULL AS asked FROM jobs")[0]["asked"]


def test_requeue_by_meta_takes_failed_jobs_only(conn, sql):
    ids = [pgdrain.enqueue(conn, "t", meta={"customer": "42", "n": i}).id for i in range(4)]
    pgdrain.enqueue(conn, "t", meta={"customer": "7"})
    sql("UPDATE jobs SET status = 'failed', finished_at = now() WHERE id = ANY(:ids)",
        ids=ids[:3])
    match = JobFilter(meta={"customer": "42"})
    counted = bulk.count(conn, "requeue", match)
    assert counted.jobs == 3
    assert bulk.act(conn, "requeue", match, upto=counted.upto).outcomes == Counter(requeued=3)
    assert statuses(sql, ids) == Counter(pending=4)


def test_the_filters_combine(conn, sql):
    a = pgdrain.enqueue(conn, "t", queue="q1", tenant="acme", tags=["x", "y"]).id
    pgdrain.enqueue(conn, "t", queue="q2", tenant="acme", tags=["x", "y"])
    pgdrain.enqueue(conn, "t", queue="q1", tenant="other", tags=["x", "y"])
    pgdrain.enqueue(conn, "t", queue="q1", tenant="acme", tags=["x"])
    match = bulk.job_filter({"queue": "q1", "tenant": "acme", "tags": ["y", "x"],
                             "status": "pending", "newer_than_seconds": 3600})
    counted = bulk.count(conn, "cancel", match)
    assert counted.jobs == 1
    bulk.act(conn, "cancel", match, upto=counted.upto)
    assert [r["id"] for r in sql("SELECT id FROM jobs WHERE status = 'cancelled'")] == [a]
    assert bulk.count(conn, "cancel", replace(match, newer_than_seconds=None,
                                              older_than_seconds=3600)).jobs == 0


def test_a_claim_is_not_held_back_while_a_batch_holds_its_rows(conn, connect_to, sql):
    # While a batch's transaction holds its jobs' rows, a drain's claim skips them and takes
    # the others at once (it would wait, were it not SKIP LOCKED).
    tagged(conn, 5, "red")
    free = tagged(conn, 5, "blue")
    drain = connect_to()
    drain.run("SET statement_timeout = '5s'")  # a wait would fail the test, not hang it
    claimed: list[int] = []
    cancel = bulk.ACTIONS["cancel"]

    def cancel_then_claim(session, ids):
        outcomes = cancel.run(session, ids)
        claimed.extend(j.id for j in pgdrain.claim(drain, batch_size=10, lease_seconds=60))
        return outcomes

    slow = replace(cancel, run=cancel_then_claim)
    done = bulk.act(conn, slow, JobFilter(tags=("red",)), upto=free[-1])
    assert done.outcomes == Counter(cancelled=5)
    assert sorted(claimed) == free


def test_a_batch_whose_rows_a_drain_holds_gives_up_and_says_where(conn, connect_to, sql):
    # A drain holding a job's row (its finish in flight) makes the batch wait no longer than
    # lock_ms a try; after its tries the action stops there, to be run again.
    ids = tagged(conn, 4, "red")
    holder = connect_to()
    holder.run("BEGIN")
    holder.run("SELECT 1 FROM jobs WHERE id = :id FOR UPDATE", id=ids[1])
    pauses: list[float] = []
    try:
        done = bulk.act(conn, "cancel", JobFilter(tags=("red",)), upto=ids[-1], batch=2,
                        lock_ms=50, pause=pauses.append)
    finally:
        holder.run("ROLLBACK")
    assert done.outcomes == Counter(cancelled=2)  # the newer batch went through
    assert (done.stopped, done.next_upto) == ("busy", ids[1])
    assert len(pauses) == bulk.ROUNDS
    assert statuses(sql, ids[:2]) == Counter(pending=2)  # the batch was all or nothing
    again = bulk.act(conn, "cancel", JobFilter(tags=("red",)), upto=done.next_upto)
    assert again.outcomes == Counter(cancelled=2)


def test_act_stops_for_time_with_the_id_to_go_on_from(conn, sql):
    ids = tagged(conn, 6, "red")
    ticks = iter(range(100))
    done = bulk.act(conn, "cancel", JobFilter(tags=("red",)), upto=ids[-1], batch=2,
                    seconds=1, clock=lambda: next(ticks))
    assert (done.outcomes, done.stopped) == (Counter(cancelled=2), "time")
    assert done.next_upto == ids[-2] - 1
    rest = bulk.act(conn, "cancel", JobFilter(tags=("red",)), upto=done.next_upto)
    assert rest.outcomes == Counter(cancelled=4)


def test_an_empty_table_counts_nothing(conn):
    assert bulk.count(conn, "delete", JobFilter()) == bulk.Counted(0, True, 0)
    assert bulk.act(conn, "delete", JobFilter(), upto=0).jobs == 0


def test_an_unknown_action_is_refused(conn):
    with pytest.raises(ValueError, match="the action is one of cancel, requeue"):
        bulk.count(conn, "purge", JobFilter())


def test_delete_checks_the_status_again_when_it_deletes(conn, sql):
    # Between a batch's ids being read and its delete, a failed job may be requeued: the
    # delete then leaves it, and says what it is now.
    from pgdrain import operator_store

    failed, pending = (pgdrain.enqueue(conn, "t").id for _ in range(2))
    sql("UPDATE jobs SET status = 'failed' WHERE id = :id", id=failed)
    outcomes = operator_store.delete_jobs(conn, [failed, pending], statuses=["failed"])
    assert outcomes == {failed: "deleted", pending: "pending"}
    assert [r["id"] for r in sql("SELECT id FROM jobs")] == [pending]


def test_cancel_checks_the_status_again_when_it_cancels(conn, sql):
    # A bulk cancel of pending jobs: one claimed since its batch's ids were read is running
    # now, not what was counted, and is left to run (not asked to stop).
    from pgdrain import operator_store

    claimed_since, pending = (pgdrain.enqueue(conn, "t").id for _ in range(2))
    [running] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    assert running.id == claimed_since
    outcomes = operator_store.cancel(conn, [claimed_since, pending], statuses=["pending"])
    assert outcomes == {claimed_since: "running", pending: "cancelled"}
    rows = {r["id"]: (r["status"], r["cancel_requested_at"]) for r in sql(
        "SELECT id, status, cancel_requested_at FROM jobs")}
    assert rows[claimed_since] == ("running", None)
    assert rows[pending][0] == "cancelled"
    assert operator_store.cancel(conn, [claimed_since]) == {claimed_since: "cancel_requested"}
