"""Dead-letter hooks (on_failed) against PostgreSQL: called once for every job that ends failed,
whichever way (out of attempts, discarded, a lost lease, expiry), with the job and its last
error, and retried when the hook itself raises; whichever process fails the job (a drain, the
CLI's janitor, the library)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pgdrain
from pgdrain import store as pgstore
from pgdrain.drain import drain
from pgdrain.hooks import HOOK_JOB_TYPE
from pgdrain.registry import Registry
from pgdrain.settings import Settings
from tests.support.drains import clock, connector_to, run_drain

REPO = Path(__file__).resolve().parents[2]


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


def _cli_janitor(database_url):
    """`pgdrain janitor` as an operator runs it from a shell: its own process, with no job
    modules loaded (it knows no handler and no hook)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "DB_SECRET_ARN", "DB_IAM_AUTH")
           and not k.startswith("PGDRAIN_")}
    env["DATABASE_URL"] = database_url
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "layers" / "pgdrain"), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "pgdrain", "janitor"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_clis_janitor_hooks_what_it_fails_and_a_drain_runs_the_hook(
        database_url, conn, sql):
    calls: list = []
    registry = hooked_registry(calls)
    run(database_url, registry)  # a drain with the hooks has run: it recorded the types
    lost = pgdrain.enqueue(conn, "report", max_attempts=1).id
    sql("UPDATE jobs SET status = 'running', attempts = 1, lease_token = gen_random_uuid(), "
        "claimed_at = now() - interval '2 hours', started_at = now() - interval '2 hours', "
        "lost_claims = 1, lease_expires_at = now() - interval '1 hour' WHERE id = :id", id=lost)
    late = pgdrain.enqueue(conn, "send-email", ttl_seconds=60).id
    sql("UPDATE jobs SET expires_at = now() - interval '1 second' WHERE id = :id", id=late)
    unhooked = pgdrain.enqueue(conn, "no-hook", ttl_seconds=60).id
    sql("UPDATE jobs SET expires_at = now() - interval '1 second' WHERE id = :id", id=unhooked)

    result = _cli_janitor(database_url)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["failed"] == 1
    assert sql("SELECT id, status FROM jobs WHERE id = ANY(:ids) ORDER BY id",
               ids=[lost, late, unhooked]) == [
        {"id": lost, "status": "failed"}, {"id": late, "status": "failed"},
        {"id": unhooked, "status": "failed"}]
    hooks = sql("SELECT payload->>'job_id' AS job_id, status FROM jobs WHERE job_type = :t "
                "ORDER BY id", t=HOOK_JOB_TYPE)
    assert sorted(hooks, key=lambda h: int(h["job_id"])) == [
        {"job_id": str(lost), "status": "pending"}, {"job_id": str(late), "status": "pending"}]

    run(database_url, registry)  # the hooks run in a drain that has them
    assert sorted(calls) == sorted([(lost, "failed", pgdrain.janitor.LEASE_EXPIRED_ERROR),
                                    (late, "failed", "expired")])
    assert sql("SELECT status FROM jobs WHERE job_type = :t", t=HOOK_JOB_TYPE) == [
        {"status": "done"}, {"status": "done"}]


def test_a_failure_the_library_records_is_hooked_too(database_url, conn, sql):
    calls: list = []
    registry = hooked_registry(calls)
    run(database_url, registry)
    job_id = pgdrain.enqueue(conn, "sync-crm").id
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    assert job.id == job_id and pgdrain.fail(conn, job, "gave up by hand")
    run(database_url, registry)
    assert calls == [(job_id, "failed", "gave up by hand")]


def test_a_drain_records_its_hooked_types_once_per_warm_connection(database_url, sql,
                                                                   monkeypatch):
    declared: list = []
    declare = pgstore.declare_hooked_types
    monkeypatch.setattr(pgstore, "declare_hooked_types",
                        lambda conn, types: (declared.append(sorted(types)), declare(conn, types)))
    registry = hooked_registry([])
    connector = connector_to(database_url)
    try:
        for _ in range(2):  # two invocations of one warm container
            drain(connector, registry, Settings(), time_left=clock(30))
    finally:
        connector.discard()
    assert declared == [["report", "send-email", "sync-crm"]]
    rows = "SELECT job_type, xmin::text AS version FROM pgdrain_hooked_types ORDER BY 1"
    before = sql(rows)
    assert [r["job_type"] for r in before] == ["report", "send-email", "sync-crm"]
    run(database_url, registry)  # another container declares them again: nothing written
    assert len(declared) == 2 and sql(rows) == before


def test_no_hook_declared_no_hook_job_and_no_hooked_types(database_url, conn, sql):
    registry = Registry()
    pgdrain.job("plain", max_attempts=1, registry=registry)(lambda job: 1 / 0)
    pgdrain.enqueue(conn, "plain")
    run(database_url, registry)
    assert sql("SELECT status FROM jobs") == [{"status": "failed"}]
    assert sql("SELECT count(*) AS n FROM pgdrain_hooked_types") == [{"n": 0}]
