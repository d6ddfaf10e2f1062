"""Requeueing failed jobs and the queue's statistics."""

from __future__ import annotations

import pgdrain


def fail_one(conn, job_type, **options):
    job_id = pgdrain.enqueue(conn, job_type, max_attempts=1, **options).id
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    assert job.id == job_id
    pgdrain.fail(conn, job, "boom")
    return job_id


def test_requeue_failed_gives_a_fresh_set_of_attempts(conn, sql):
    a = fail_one(conn, "a")
    b = fail_one(conn, "b", queue="other")
    c = fail_one(conn, "c")
    assert pgdrain.requeue_failed(conn, ids=[a]) == [a]
    assert pgdrain.requeue_failed(conn, queue="other") == [b]
    assert pgdrain.requeue_failed(conn, job_type="nope") == []
    rows = {r["id"]: r for r in sql("SELECT id, status, attempts, finished_at, last_error "
                                    "FROM jobs")}
    assert (rows[a]["status"], rows[a]["attempts"], rows[a]["finished_at"]) == (
        "pending", 0, None)
    assert rows[a]["last_error"] == "boom"  # history stays
    assert rows[c]["status"] == "failed"
    assert pgdrain.requeue_failed(conn) == [c]
    assert {j.id for j in pgdrain.claim(conn, batch_size=10, lease_seconds=60)} == {a, b, c}


def test_requeue_skips_a_job_whose_dedupe_key_is_live_again(conn, sql):
    # Two failed jobs with key k, one with key j, one without: a new live job now holds k.
    k_old, k_new = fail_one(conn, "x", dedupe_key="k"), fail_one(conn, "x", dedupe_key="k")
    j_old, j_new = fail_one(conn, "x", dedupe_key="j"), fail_one(conn, "x", dedupe_key="j")
    plain = fail_one(conn, "x")
    live = pgdrain.enqueue(conn, "x", dedupe_key="k").id
    # One live job per key: nothing with k; the newest with j; the rest are unaffected.
    assert pgdrain.requeue_failed(conn) == sorted([j_new, plain])
    statuses = {r["id"]: r["status"] for r in sql("SELECT id, status FROM jobs")}
    assert statuses == {k_old: "failed", k_new: "failed", j_old: "failed", j_new: "pending",
                        plain: "pending", live: "pending"}
    assert pgdrain.requeue_failed(conn, ids=[k_new]) == []
    assert pgdrain.store.live_job_with_key(conn, "k") == live


def test_requeue_touches_only_failed_jobs(conn):
    pending = pgdrain.enqueue(conn, "x").id
    assert pgdrain.requeue_failed(conn, ids=[pending]) == []


def test_stats_counts_by_queue_and_status_and_reports_lag(conn, sql):
    fail_one(conn, "d")
    pgdrain.enqueue_many(conn, [{"job_type": "a"}, {"job_type": "a"},
                                {"job_type": "b", "queue": "emails"},
                                {"job_type": "c", "delay_seconds": 3600}])
    sql("UPDATE jobs SET run_at = now() - interval '30 seconds' WHERE job_type = 'b'")
    found = pgdrain.stats(conn)
    assert found.counts == {"default": {"pending": 3, "failed": 1}, "emails": {"pending": 1}}
    assert found.due == 3
    assert 30 <= found.oldest_due_seconds < 60
    assert found.total("pending") == 4


def test_stats_of_an_empty_queue(conn):
    found = pgdrain.stats(conn)
    assert (found.counts, found.due, found.oldest_due_seconds) == ({}, 0, 0.0)


def test_a_requeue_racing_another_for_the_same_key_skips_instead_of_failing(
        conn, connect_to, sql):
    import threading
    import time

    first, second = fail_one(conn, "x", dedupe_key="k"), fail_one(conn, "x", dedupe_key="k")
    other = connect_to()
    other.run("BEGIN")
    assert pgdrain.requeue_failed(other, ids=[first]) == [first]  # not yet committed
    outcome = []
    racer = threading.Thread(target=lambda: outcome.append(
        _capture(lambda: pgdrain.requeue_failed(conn, ids=[second]))))
    racer.start()
    # Its statement saw no live holder of k, and now waits on the first one's row lock.
    watcher = connect_to()
    for _ in range(200):
        if watcher.run("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                       "AND datname = current_database()")[0][0]:
            break
        time.sleep(0.05)
    other.run("COMMIT")
    racer.join(timeout=30)
    assert outcome == [[]]  # retried once the conflict showed: k is live, so it stays failed
    statuses = {r["id"]: r["status"] for r in sql("SELECT id, status FROM jobs")}
    assert statuses == {first: "pending", second: "failed"}


def _capture(call):
    try:
        return call()
    except Exception as exc:  # the assertion shows it
        return exc
