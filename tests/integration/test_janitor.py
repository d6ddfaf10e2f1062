"""The janitor: expired leases back to pending or to failed, old done rows purged in batches,
and overlapping drains never wait for each other."""

from __future__ import annotations

import pgdrain
from pgdrain.janitor import vacuum_if_due
from pgdrain.policy import Backoff
from pgdrain.store import JANITOR_LOCK_KEY

SETTINGS = pgdrain.Settings(backoff=Backoff(base_seconds=2, cap_seconds=3600, jitter=0))


def expire_leases(sql):
    sql("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE status = 'running'")


def test_an_expired_lease_without_a_recorded_start_is_refunded(conn, sql):
    # The drain died holding the job and nothing says it started: it is not charged.
    pgdrain.enqueue(conn, "x", max_attempts=1)
    pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    expire_leases(sql)
    result = pgdrain.run_janitor(conn, SETTINGS)
    assert result == pgdrain.JanitorResult(ran=True, reclaimed=1, refunded=1, alone_due=True)
    [row] = sql("SELECT status, attempts, lost_claims, run_at <= now() AS due, last_error, "
                "errors, lease_token, started_at FROM jobs")
    assert (row["status"], row["attempts"], row["lost_claims"], row["due"]) == (
        "pending", 0, 1, True)
    assert (row["last_error"], row["errors"], row["lease_token"]) == (None, [], None)
    # Batches leave it out; it is claimed alone, with its start recorded.
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []
    job = pgdrain.store.claim_alone(conn, lease_seconds=60)
    assert (job.attempts, job.lost_claims) == (1, 1)
    assert sql("SELECT started_at IS NOT NULL AS started FROM jobs")[0]["started"]


def test_an_expired_lease_after_a_recorded_start_is_charged_with_backoff(conn, sql):
    pgdrain.enqueue(conn, "x", max_attempts=3)
    sql("UPDATE jobs SET lost_claims = 1")  # so its claim records its start
    pgdrain.store.claim_alone(conn, lease_seconds=60)
    expire_leases(sql)
    result = pgdrain.run_janitor(conn, SETTINGS)
    assert result == pgdrain.JanitorResult(ran=True, reclaimed=1, alone_due=True)
    [row] = sql("SELECT status, attempts, (run_at - updated_at) AS wait, last_error, errors, "
                "lease_token, lease_expires_at FROM jobs")
    assert (row["status"], row["attempts"]) == ("pending", 1)
    assert row["wait"].total_seconds() == 2
    assert row["last_error"].startswith("lease expired")
    assert row["errors"][0]["attempt"] == 1
    assert (row["lease_token"], row["lease_expires_at"]) == (None, None)


def test_a_job_that_kills_its_worker_every_time_ends_failed(conn, sql):
    # The first death is refunded (no start recorded); from then on the claim records the
    # start, and each death is charged until max_attempts.
    pgdrain.enqueue(conn, "poison", max_attempts=2)
    rounds = 0
    while sql("SELECT status FROM jobs")[0]["status"] != "failed":
        rounds += 1
        assert rounds <= 3
        sql("UPDATE jobs SET run_at = now() WHERE status = 'pending'")
        claimed = (pgdrain.claim(conn, batch_size=1, lease_seconds=60)
                   or [pgdrain.store.claim_alone(conn, lease_seconds=60)])
        assert len(claimed) == 1 and claimed[0] is not None
        expire_leases(sql)  # the worker died: nothing finished the job
        pgdrain.run_janitor(conn, SETTINGS)
    assert rounds == 3
    [row] = sql("SELECT status, attempts, lost_claims, errors FROM jobs")
    assert (row["status"], row["attempts"], row["lost_claims"]) == ("failed", 2, 1)
    assert [e["error"][:13] for e in row["errors"]] == ["lease expired"] * 2
    assert pgdrain.claim(conn, batch_size=1, lease_seconds=60) == []


def test_unstarted_batch_mates_are_never_charged_however_often_their_drain_dies(conn, sql):
    # A killer heads each batch; its batch-mates never start. However many rounds it takes
    # for the killer to be dead-lettered, they end with no attempt spent.
    pgdrain.enqueue(conn, "killer", max_attempts=3, priority=-1)
    pgdrain.enqueue_many(conn, [{"job_type": "innocent", "max_attempts": 1}] * 4)
    claims = []
    for _ in range(5):
        if sql("SELECT status FROM jobs WHERE job_type = 'killer'")[0]["status"] == "failed":
            break
        # As a drain claims: one job whose claim was lost, alone, while there are any.
        alone = pgdrain.store.claim_alone(conn, lease_seconds=60)
        claims.append([alone.job_type] if alone else
                      [j.job_type for j in pgdrain.claim(conn, batch_size=5, lease_seconds=60)])
        expire_leases(sql)
        pgdrain.run_janitor(conn, SETTINGS)
        sql("UPDATE jobs SET run_at = now() WHERE status = 'pending'")
    # Once its claim was lost, the killer is claimed alone: the innocent jobs never share a
    # claim with it again.
    assert claims == [["killer"] + ["innocent"] * 4] + [["killer"]] * 3
    rows = {r["job_type"]: r for r in sql(
        "SELECT job_type, status, max(attempts) AS attempts FROM jobs GROUP BY 1, 2")}
    assert (rows["killer"]["status"], rows["killer"]["attempts"]) == ("failed", 3)
    assert sql("SELECT count(*) AS n FROM jobs WHERE job_type = 'innocent' AND "
               "status = 'pending' AND attempts = 0")[0]["n"] == 4


def test_live_leases_are_left_alone(conn, sql):
    pgdrain.enqueue_many(conn, [{"job_type": "live"}, {"job_type": "dead"}])
    live, dead = pgdrain.claim(conn, batch_size=2, lease_seconds=600)
    sql("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = :id",
        id=dead.id)
    assert pgdrain.run_janitor(conn, SETTINGS).reclaimed == 1
    assert pgdrain.complete(conn, [live]).ids == (live.id,)
    assert pgdrain.complete(conn, [dead]).stale == (dead.id,)


def test_purge_deletes_old_done_rows_in_bounded_batches(conn, sql):
    sql("""INSERT INTO jobs (job_type, status, finished_at)
           SELECT 'old', 'done', now() - interval '2 days' FROM generate_series(1, 25)""")
    sql("""INSERT INTO jobs (job_type, status, finished_at)
           SELECT 'recent', 'done', now() FROM generate_series(1, 3)""")
    sql("""INSERT INTO jobs (job_type, status, finished_at)
           SELECT 'dead-letter', 'failed', now() - interval '2 days' FROM generate_series(1, 2)""")
    settings = pgdrain.Settings(retention_seconds=86400, purge_batch_size=10,
                                purge_max_batches=2)
    assert pgdrain.run_janitor(conn, settings).purged == 20
    assert pgdrain.run_janitor(conn, settings).purged == 5
    assert pgdrain.run_janitor(conn, settings).purged == 0
    left = {r["job_type"]: r["n"] for r in sql("SELECT job_type, count(*) AS n FROM jobs "
                                               "GROUP BY job_type")}
    assert left == {"recent": 3, "dead-letter": 2}  # failed jobs are kept for inspection


def test_overlapping_janitor_skips_instead_of_waiting(conn, connect_to, sql):
    other = connect_to()
    other.run("BEGIN")
    other.run("SELECT pg_advisory_xact_lock(:key)", key=JANITOR_LOCK_KEY)
    pgdrain.enqueue(conn, "x")
    pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    expire_leases(sql)
    sql("SET statement_timeout = '2s'")  # waiting for the lock would fail this test
    assert pgdrain.run_janitor(conn, SETTINGS) == pgdrain.JanitorResult(ran=False)
    other.run("COMMIT")
    assert pgdrain.run_janitor(conn, SETTINGS).reclaimed == 1


def _dead_rows(conn, sql, n):
    pgdrain.enqueue_many(conn, [{"job_type": "x"}] * n)
    pgdrain.complete(conn, pgdrain.claim(conn, batch_size=n, lease_seconds=60))
    sql("SELECT pg_stat_force_next_flush()")  # publish this session's counters now
    sql("SELECT 1")


def test_the_drain_vacuums_jobs_when_dead_rows_pile_up(conn, sql):
    _dead_rows(conn, sql, 300)
    off = pgdrain.Settings(vacuum_dead_tuples=0)
    assert vacuum_if_due(conn, off) is False
    settings = pgdrain.Settings(vacuum_dead_tuples=100, vacuum_interval_seconds=0)
    assert vacuum_if_due(conn, settings) is True
    [row] = sql("SELECT last_vacuum IS NOT NULL AS vacuumed FROM pg_stat_user_tables "
                "WHERE relname = 'jobs'")
    assert row["vacuumed"]
    # Not again within the interval, however many dead rows come.
    _dead_rows(conn, sql, 300)
    later = pgdrain.Settings(vacuum_dead_tuples=100, vacuum_interval_seconds=3600)
    assert vacuum_if_due(conn, later) is False


def test_a_role_that_may_not_vacuum_is_skipped_without_an_error(conn, sql, database_url):
    from pgdrain.db import connect

    _dead_rows(conn, sql, 300)
    role = f"pgdrain_novac_{database_url.rsplit('/', 1)[-1].split('?')[0][-8:]}"
    sql(f"CREATE ROLE {role} LOGIN")
    try:
        sql(f"GRANT SELECT, UPDATE, DELETE ON jobs TO {role}")
        as_role = connect(database_url.replace("postgres@", f"{role}@", 1)
                          .replace("postgres:@", f"{role}:@", 1))
        try:
            assert as_role.run("SELECT current_user") == [[role]]
            settings = pgdrain.Settings(vacuum_dead_tuples=100, vacuum_interval_seconds=0)
            # Not the owner (nor, on PostgreSQL 17, granted MAINTAIN): not due for this role,
            # rather than a VACUUM that PostgreSQL skips with a warning and a false report.
            assert vacuum_if_due(as_role, settings) is False
        finally:
            as_role.close()
    finally:
        sql(f"DROP OWNED BY {role}")
        sql(f"DROP ROLE {role}")


def test_a_job_whose_claim_was_lost_is_claimed_alone(conn, sql):
    ids = [r.id for r in pgdrain.enqueue_many(conn, [{"job_type": "x"}] * 6)]
    sql("UPDATE jobs SET lost_claims = 1 WHERE id IN (:a, :b)", a=ids[3], b=ids[5])
    assert [j.id for j in pgdrain.claim(conn, batch_size=10, lease_seconds=60)] == [
        ids[0], ids[1], ids[2], ids[4]]
    alone = [pgdrain.store.claim_alone(conn, lease_seconds=60) for _ in range(3)]
    assert [j.id if j else None for j in alone] == [ids[3], ids[5], None]
    started = {r["id"]: r["started"] for r in sql(
        "SELECT id, started_at IS NOT NULL AS started FROM jobs")}
    assert started == {i: i in (ids[3], ids[5]) for i in ids}
    # Any finishing write clears it: the next claim of the job starts afresh.
    assert pgdrain.complete(conn, [alone[0]]).ids == (ids[3],)
    assert sql("SELECT started_at FROM jobs WHERE id = :id", id=ids[3]) == [{"started_at": None}]


def test_the_janitor_says_when_a_job_to_claim_alone_is_due(conn, sql):
    pgdrain.enqueue(conn, "x")
    assert pgdrain.run_janitor(conn, SETTINGS).alone_due is False
    pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    expire_leases(sql)
    assert pgdrain.run_janitor(conn, SETTINGS).alone_due is True  # it refunded one
    assert pgdrain.run_janitor(conn, SETTINGS).alone_due is True  # and it is still due
