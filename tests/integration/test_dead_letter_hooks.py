"""Dead-letter hooks (on_failed) against PostgreSQL: called once for every job that ends failed,
whichever way (out of attempts, discarded, a lost lease, expiry), with the job and its last
error, and retried when the hook itself raises."""

from __future__ import annotations

import pgdrain
from pgdrain.hooks import HOOK_JOB_TYPE
from pgdrain.registry import Registry
from tests.support.drains import run_drain


def run(database_url, registry, **settings):
    return run_drain(database_url, registry,
                     **{"backoff": pgdrain.Backoff(0, 0, jitter=0), **settings})


def hooked_registry(calls, *, flaky=False):
    registry = Registry()

    def on_failed(job, error):
        calls.append((job["id"], job["status"], error))
        if flaky and len(calls) == 1:
            raise RuntimeError("the pager is down")

    def boom(job):
        raise RuntimeError(f"boom {job.id}")

    def discard(job):
        raise pgdrain.Discard("bad address")

    pgdrain.job("sync-crm", max_attempts=2, on_failed=on_failed, registry=registry)(boom)
    pgdrain.job("send-email", on_failed=on_failed, registry=registry)(discard)
    pgdrain.job("report", on_failed=on_failed, registry=registry)(lambda job: None)
    pgdrain.job("no-hook", max_attempts=1, registry=registry)(boom)
    return registry


def test_every_way_of_failing_calls_the_hook_once(database_url, conn, sql):
    calls: list = []
    registry = hooked_registry(calls)
    crm = pgdrain.enqueue(conn, "sync-crm").id
    email = pgdrain.enqueue(conn, "send-email").id
    late = pgdrain.enqueue(conn, "report", ttl_seconds=60).id
    sql("UPDATE jobs SET expires_at = now() - interval '1 second' WHERE id = :id", id=late)
    lost = pgdrain.enqueue(conn, "report", max_attempts=1).id
    sql("UPDATE jobs SET status = 'running', attempts = 1, lease_token = gen_random_uuid(), "
        "claimed_at = now() - interval '2 hours', started_at = now() - interval '2 hours', "
        "lost_claims = 1, lease_expires_at = now() - interval '1 hour' WHERE id = :id", id=lost)
    pgdrain.enqueue(conn, "no-hook")
    for _ in range(4):  # the retry of sync-crm, then the hooks' own jobs
        run(database_url, registry, concurrency=4)
    assert sorted(calls) == sorted([
        (crm, "failed", f"RuntimeError: boom {crm}"),
        (email, "failed", "Discard: bad address"),
        (late, "failed", "expired"),
        (lost, "failed", pgdrain.janitor.LEASE_EXPIRED_ERROR)])
    hooks = sql("SELECT status, count(*) AS n FROM jobs WHERE job_type = :t GROUP BY status",
                t=HOOK_JOB_TYPE)
    assert hooks == [{"status": "done", "n": 4}]


def test_a_hook_that_raises_is_retried(database_url, conn, sql):
    calls: list = []
    registry = hooked_registry(calls, flaky=True)
    email = pgdrain.enqueue(conn, "send-email").id
    for _ in range(3):
        run(database_url, registry, concurrency=1)
    assert [c[0] for c in calls] == [email, email]
    [hook] = sql("SELECT status, attempts, last_error FROM jobs WHERE job_type = :t",
                 t=HOOK_JOB_TYPE)
    assert (hook["status"], hook["attempts"]) == ("done", 2)
    assert hook["last_error"] == "RuntimeError: the pager is down"


def test_a_retry_or_a_success_calls_no_hook(database_url, conn, sql):
    calls: list = []
    registry = hooked_registry(calls)
    pgdrain.enqueue(conn, "report")
    pgdrain.enqueue(conn, "sync-crm", max_attempts=5)
    run(database_url, registry, backoff=pgdrain.Backoff(60, 60, jitter=0))
    assert sql("SELECT status FROM jobs WHERE job_type = 'sync-crm'") == [
        {"status": "pending"}]
    assert calls == []
    assert sql("SELECT count(*) AS n FROM jobs WHERE job_type = :t", t=HOOK_JOB_TYPE) == [
        {"n": 0}]
