"""Done rows not kept (PGDRAIN_RETENTION_SECONDS=0): a drain deletes each done job as it
finishes it, in the same statement as a finish (and, for a transactional handler, in the
handler's own transaction), unless the job has something to keep: a result, the reason a
result is missing, or a dedupe key (a unique window counts done rows). Those stay done until
the next janitor's purge."""

from __future__ import annotations

import pytest

import pgdrain
from pgdrain.registry import Registry
from pgdrain.store import overview
from tests.support.drains import run_drain as run


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_drain_keeping_no_done_rows_deletes_each_job_it_finishes(database_url, conn, sql,
                                                                 concurrency):
    sql("CREATE TABLE ledger (job_id bigint PRIMARY KEY)")
    registry = Registry()
    pgdrain.job("plain", registry=registry)(lambda job: None)
    pgdrain.job("answer", registry=registry)(lambda job: {"n": 42})

    def credit(job, tx):
        tx.run("INSERT INTO ledger VALUES (:id)", id=job.id)

    pgdrain.job("credit", transactional=True, registry=registry)(credit)
    plain = [pgdrain.enqueue(conn, "plain").id for _ in range(5)]
    credited = pgdrain.enqueue(conn, "credit").id
    answer = pgdrain.enqueue(conn, "answer").id
    keyed = pgdrain.enqueue(conn, "plain", dedupe_key="once").id

    summary = run(database_url, registry, retention_seconds=0, concurrency=concurrency)
    assert (summary.claimed, summary.done, summary.stale) == (8, 8, 0)
    assert sql("SELECT id, status FROM jobs ORDER BY id") == [
        {"id": answer, "status": "done"}, {"id": keyed, "status": "done"}]
    assert pgdrain.get_job(conn, answer)["result"] == {"n": 42}
    assert sql("SELECT job_id FROM ledger") == [{"job_id": credited}]
    assert not set(plain) & {r["id"] for r in sql("SELECT id FROM jobs")}

    # The next drain's janitor purges what was kept (retention 0: every done row).
    assert run(database_url, registry, retention_seconds=0).purged == 2
    assert sql("SELECT count(*) AS n FROM jobs") == [{"n": 0}]


def test_a_transactional_handler_that_fails_keeps_its_job_and_its_writes_roll_back(
        database_url, conn, sql):
    sql("CREATE TABLE ledger (job_id bigint PRIMARY KEY)")
    registry = Registry()

    def credit(job, tx):
        tx.run("INSERT INTO ledger VALUES (:id)", id=job.id)
        raise RuntimeError("declined")

    pgdrain.job("credit", transactional=True, registry=registry)(credit)
    ident = pgdrain.enqueue(conn, "credit", max_attempts=1).id
    summary = run(database_url, registry, retention_seconds=0)
    assert (summary.done, summary.failed) == (0, 1)
    assert sql("SELECT id, status FROM jobs") == [{"id": ident, "status": "failed"}]
    assert sql("SELECT count(*) AS n FROM ledger") == [{"n": 0}]


def test_by_default_done_rows_are_not_kept_and_a_retention_keeps_them(database_url, conn,
                                                                       sql):
    registry = Registry()
    pgdrain.job("plain", registry=registry)(lambda job: None)
    pgdrain.enqueue(conn, "plain")
    shipped = pgdrain.Settings().retention_seconds
    assert shipped == 0
    assert run(database_url, registry, retention_seconds=shipped).done == 1
    assert sql("SELECT count(*) AS n FROM jobs") == [{"n": 0}]
    ident = pgdrain.enqueue(conn, "plain").id
    assert run(database_url, registry, retention_seconds=86400).done == 1
    assert sql("SELECT id, status FROM jobs") == [{"id": ident, "status": "done"}]


def test_stats_count_the_done_jobs_that_left_no_row(database_url, conn, sql):
    """`pgdrain stats` (job_overview_by_queue_type) says how many finished in the last minute
    and hour, whether or not their rows were kept; counts older than an hour are purged by the
    janitor."""
    registry = Registry()
    pgdrain.job("plain", registry=registry)(lambda job: None)
    pgdrain.job("answer", registry=registry)(lambda job: {"n": 1})
    for queue, job_type, n in (("default", "plain", 30), ("mail", "plain", 4),
                               ("default", "answer", 2)):
        pgdrain.enqueue_many(conn, [{"job_type": job_type, "queue": queue}] * n)
    summary = run(database_url, registry, batch_size=7, max_drains=1, retention_seconds=0)
    assert summary.done == 36
    stats = {(r["queue"], r["job_type"]): (r["done_last_minute"], r["done_last_hour"])
             for r in overview(conn)}
    assert stats == {("default", "plain"): (30, 30), ("mail", "plain"): (4, 4),
                     ("default", "answer"): (2, 2)}  # kept (a result) or counted: once each
    assert sql("SELECT sum(done)::int AS n FROM pgdrain_done_counts") == [{"n": 34}]

    # A count from over an hour ago is read by neither figure, and the janitor deletes it.
    sql("INSERT INTO pgdrain_done_counts VALUES "
        "('default', 'plain', date_trunc('minute', now()) - interval '2 hours', 99)")
    assert {(r["queue"], r["job_type"]): r["done_last_hour"]
            for r in overview(conn)}[("default", "plain")] == 30
    run(database_url, registry, retention_seconds=0)
    assert sql("SELECT count(*) AS n FROM pgdrain_done_counts "
               "WHERE minute < now() - interval '1 hour'") == [{"n": 0}]


def test_forgotten_jobs_free_their_ordering_key_and_their_queues_cap(database_url, conn, sql):
    """Retention 0 beside the controls: a deleted job is no longer live, so its key's next job
    is the head and its capped queue has room again. Keys still go in id order, one at a
    time, the cap holds, a tenant's jobs are shared fairly, and nothing is left."""
    import threading

    registry, started, lock = Registry(), [], threading.Lock()
    running = {"now": 0, "most": 0}

    def step(job):
        with lock:
            running["now"] += 1
            running["most"] = max(running["most"], running["now"])
            started.append((job.payload["key"], job.payload["n"]))
        with lock:
            running["now"] -= 1

    pgdrain.job("step", registry=registry)(step)
    for n in range(3):
        for key in ("a", "b"):
            pgdrain.enqueue(conn, "step", {"key": key, "n": n}, queue="serial",
                            ordering_key=key, tenant=f"tenant-{key}")
    pgdrain.set_queue(conn, "serial", max_running=1)
    done = 0
    for _ in range(20):  # keyed jobs become heads one drain pass at a time
        done += run(database_url, registry, retention_seconds=0, concurrency=4).done
        if done == 6:
            break
    assert done == 6 and running["most"] == 1
    for key in ("a", "b"):
        assert [n for k, n in started if k == key] == [0, 1, 2]
    assert sql("SELECT count(*) AS n FROM jobs") == [{"n": 0}]
