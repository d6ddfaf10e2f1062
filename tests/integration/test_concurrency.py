"""Concurrency: several drains claiming at once, concurrent migrations, and the dedupe race.

Every race here is made deterministic: the processes start together behind a barrier, and the
tests that need one session to block on another wait until PostgreSQL reports it blocked
(``pg_blocking_pids`` / ``pg_stat_activity``) before letting the other side go on.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import pgdrain
from pgdrain.db import connect
from pgdrain.sql import migrations
from pgdrain.store import MIGRATION_LOCK_KEY

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "layers" / "pgdrain"

WORKERS = 4
JOBS = 2000
BATCH = 7
# Generous bounds for waits on other processes, never asserted as durations.
WAIT_SECONDS = 30


def _rows(conn, statement: str, **params) -> list[dict]:
    rows = conn.run(statement, **params) if params else conn.run(statement)
    names = [c["name"] for c in conn.columns or []]
    return [dict(zip(names, row, strict=True)) for row in rows]


def _wait_until(condition, what: str) -> None:
    """Poll ``condition`` until true; fail naming ``what`` if it never becomes true."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.02)


# --- four processes draining one queue ------------------------------------------------------


def drain_worker(url: str, barrier, results, worker: int) -> None:
    """A spawned process: claim batches until the queue is empty, completing each batch.

    Module-level so that the spawn start method can import it: the child inherits the parent's
    ``sys.path`` (which holds this directory and ``layers/pgdrain``) and imports this module.
    Puts ``(worker, claimed ids, batch sizes, stale ids, error)`` on ``results``.
    """
    ids: list[int] = []
    sizes: list[int] = []
    stale: list[int] = []
    try:
        conn = connect(url)
        try:
            barrier.wait(timeout=WAIT_SECONDS)
            while True:
                jobs = pgdrain.claim(conn, batch_size=BATCH, lease_seconds=60)
                if not jobs:
                    break
                sizes.append(len(jobs))
                ids.extend(job.id for job in jobs)
                stale.extend(pgdrain.complete(conn, jobs).stale)
        finally:
            conn.close()
    except BaseException as exc:
        results.put((worker, ids, sizes, stale, f"{type(exc).__name__}: {exc}"))
        raise
    results.put((worker, ids, sizes, stale, None))


def _collect(results, processes) -> list[tuple]:
    """One report per process; fail (with exit codes) if a process died without reporting."""
    reports: list[tuple] = []
    deadline = time.monotonic() + WAIT_SECONDS * 2
    while len(reports) < len(processes):
        try:
            reports.append(results.get(timeout=0.5))
        except queue.Empty:
            dead = all(process.exitcode is not None for process in processes)
            if dead or time.monotonic() > deadline:
                codes = [process.exitcode for process in processes]
                pytest.fail(f"{len(reports)} of {len(processes)} workers reported "
                            f"(exit codes {codes})")
    return reports


def test_four_processes_claim_every_job_exactly_once(database_url, conn, sql):
    created = pgdrain.enqueue_many(
        conn, [{"job_type": "work", "payload": {"n": n}} for n in range(JOBS)])
    all_ids = {r.id for r in created}
    assert len(all_ids) == JOBS

    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(WORKERS)
    results = context.Queue()
    processes = [
        context.Process(target=drain_worker, args=(database_url, barrier, results, worker))
        for worker in range(WORKERS)
    ]
    for process in processes:
        process.start()
    try:
        reports = _collect(results, processes)
    finally:
        for process in processes:
            process.join(timeout=WAIT_SECONDS)
            if process.is_alive():
                process.kill()
                process.join()
        results.close()
        results.join_thread()

    assert [error for *_, error in reports if error] == []
    assert [process.exitcode for process in processes] == [0] * WORKERS

    claimed = Counter(job_id for _, ids, *_ in reports for job_id in ids)
    assert sorted(n for n in claimed.values() if n > 1) == [], "a job was claimed twice"
    assert set(claimed) == all_ids
    sizes = [size for _, _, batch_sizes, *_ in reports for size in batch_sizes]
    assert max(sizes) <= BATCH
    assert sum(sizes) == JOBS
    assert [stale for _, _, _, stale, _ in reports if stale] == []
    # Every process got work: the drain really ran concurrently.
    assert sorted(len(batch_sizes) > 0 for _, _, batch_sizes, *_ in reports) == [True] * WORKERS
    assert sql("SELECT status, attempts, count(*) AS n FROM jobs GROUP BY status, attempts") == [
        {"status": "done", "attempts": 1, "n": JOBS}
    ]


# --- concurrent migrations ------------------------------------------------------------------


def _cli_env(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "DATABASE_URL" and not k.startswith("PGDRAIN_")}
    env["DATABASE_URL"] = database_url
    env["PYTHONPATH"] = os.pathsep.join(
        [str(LIBRARY), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def _migrate_command(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pgdrain", "migrate"], env=env, cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_two_migrations_at_once_both_succeed(empty_database_url):
    expected = "applied: " + ", ".join(f"{v:04d}_{name}" for v, name, _ in migrations())
    env = _cli_env(empty_database_url)
    monitor = connect(empty_database_url)
    try:
        # Hold the migration lock so that both runs are certainly inside their transactions,
        # waiting on it, at the same time; then let them race.
        monitor.run("SELECT pg_advisory_lock(:key::bigint)", key=MIGRATION_LOCK_KEY)
        runs = [_migrate_command(env), _migrate_command(env)]
        try:

            def both_waiting() -> bool:
                exited = [run for run in runs if run.poll() is not None]
                if exited:
                    out, err = exited[0].communicate()
                    pytest.fail(f"migrate exited before the lock was released: {out}{err}")
                waiting = _rows(
                    monitor,
                    "SELECT count(*) AS n FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
                )
                return waiting[0]["n"] == 2

            _wait_until(both_waiting, "both migrate runs to wait on the migration lock")
            monitor.run("SELECT pg_advisory_unlock(:key::bigint)", key=MIGRATION_LOCK_KEY)
            outputs = [run.communicate(timeout=WAIT_SECONDS) for run in runs]
        finally:
            for run in runs:
                if run.poll() is None:
                    run.kill()
                run.communicate()  # reap it and close its pipes

        assert [run.returncode for run in runs] == [0, 0], outputs
        assert sorted(out.strip() for out, _ in outputs) == sorted(
            [expected, "schema is up to date"])

        recorded = _rows(monitor, "SELECT version, count(*) AS n FROM pgdrain_migrations "
                                  "GROUP BY version ORDER BY version")
        assert recorded == [{"version": v, "n": 1} for v, _, _ in migrations()]
        assert _rows(monitor, "SELECT to_regclass('public.jobs') IS NOT NULL AS present") == [
            {"present": True}]

        third = subprocess.run(
            [sys.executable, "-m", "pgdrain", "migrate"], env=env, cwd=REPO,
            capture_output=True, text=True, timeout=WAIT_SECONDS, check=False,
        )
        assert third.returncode == 0, third.stderr
        assert third.stdout.strip() == "schema is up to date"
    finally:
        monitor.close()


# --- the dedupe race ------------------------------------------------------------------------


def _enqueue_in_thread(conn, **options):
    """Start ``pgdrain.enqueue`` on ``conn`` in a thread; returns (thread, outcome list)."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(pgdrain.enqueue(conn, "send-email", {"from": "B"}, **options))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _race_on_key(connect_to, sql, *, a_commits: bool):
    a = connect_to()
    b = connect_to()
    a_pid = a.run("SELECT pg_backend_pid()")[0][0]
    b_pid = b.run("SELECT pg_backend_pid()")[0][0]

    a.run("BEGIN")
    a_result = pgdrain.enqueue(a, "send-email", {"from": "A"}, dedupe_key="k")
    assert a_result.created
    thread, outcome = _enqueue_in_thread(b, dedupe_key="k")

    def b_blocked_by_a() -> bool:
        rows = sql("SELECT :a::int = ANY(pg_blocking_pids(:b::int)) AS blocked", a=a_pid, b=b_pid)
        return rows[0]["blocked"]

    _wait_until(b_blocked_by_a, "B's enqueue to block on A's uncommitted row")
    assert outcome == [], "B returned while A's row was still uncommitted"
    a.run("COMMIT" if a_commits else "ROLLBACK")
    thread.join(timeout=WAIT_SECONDS)
    assert not thread.is_alive(), "B's enqueue did not return after A finished"
    assert len(outcome) == 1
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return a_result, outcome[0]


def test_dedupe_race_second_enqueue_gets_the_committed_job(connect_to, sql):
    a_result, b_result = _race_on_key(connect_to, sql, a_commits=True)

    assert b_result == pgdrain.EnqueueResult(id=a_result.id, created=False)
    live = sql("SELECT id, payload FROM jobs WHERE dedupe_key = 'k' "
               "AND status IN ('pending', 'running')")
    assert live == [{"id": a_result.id, "payload": {"from": "A"}}]
    assert sql("SELECT count(*) AS n FROM jobs") == [{"n": 1}]


def test_dedupe_race_second_enqueue_inserts_when_first_rolls_back(connect_to, sql):
    a_result, b_result = _race_on_key(connect_to, sql, a_commits=False)

    assert b_result.created is True
    assert b_result.id != a_result.id
    rows = sql("SELECT id, status, payload FROM jobs WHERE dedupe_key = 'k'")
    assert rows == [{"id": b_result.id, "status": "pending", "payload": {"from": "B"}}]


# --- SKIP LOCKED ----------------------------------------------------------------------------


def test_claim_skips_a_locked_job_without_waiting(conn, connect_to, sql):
    ids = [r.id for r in pgdrain.enqueue_many(
        conn, [{"job_type": "work", "payload": {"n": n}} for n in range(5)])]
    oldest = ids[0]
    holder = connect_to()
    holder.run("BEGIN")
    locked = holder.run("SELECT id FROM jobs WHERE id = :id FOR UPDATE", id=oldest)
    assert locked == [[oldest]]

    claimer = connect_to()
    # Were the claim to wait for the lock, it would fail with a statement timeout instead.
    claimer.run("SET statement_timeout = '2s'")
    first = pgdrain.claim(claimer, batch_size=1, lease_seconds=60)
    assert [job.id for job in first] == [ids[1]]
    rest = pgdrain.claim(claimer, batch_size=10, lease_seconds=60)
    assert [job.id for job in rest] == ids[2:]
    assert sql("SELECT status, attempts FROM jobs WHERE id = :id", id=oldest) == [
        {"status": "pending", "attempts": 0}]

    holder.run("ROLLBACK")
    after = pgdrain.claim(claimer, batch_size=10, lease_seconds=60)
    assert [job.id for job in after] == [oldest]
