"""Database faults during a drain (issue scenario 3): PostgreSQL restarted mid-drain, and the
drain's own connection terminated mid-batch.

Each time the invocation must end, not hang: with a clear error naming the database failure,
or with its summary. Nothing may be lost: after the leases of the interrupted claims expire
(forced here by SQL, as time would), the next invocation finishes every job, and none is left
running. Jobs are of the "record" type (``tests/reliability/recording_jobs.py``), so the
``executions`` table shows what ran, including the re-runs that at-least-once allows.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import pgdrain
from pgdrain.db import connect, with_database
from pgdrain.migrate import migrate
from pgdrain_dev.context import LambdaContext
from tests.functions import conftest as function_fixtures
from tests.reliability import faults
from tests.support.functions import killed_at_exit, load_event

# The function tests' fixtures (load_function needs function_env).
function_env = function_fixtures.function_env
load_function = function_fixtures.load_function

JOBS = 40
SECONDS = 0.1  # per job: 2 s of work, two at a time, so a fault lands mid-drain


@pytest.fixture
def drains() -> Iterator[Callable[..., subprocess.Popen]]:
    """Start drain invocations in processes of their own; any left running is killed."""
    with killed_at_exit() as started:

        def start(database_url: str, **env: str) -> subprocess.Popen:
            process = faults.start_drain(database_url, **env)
            started.append(process)
            return process

        yield start


def _enqueue_recorded_jobs(conn: Any, count: int = JOBS) -> list[int]:
    conn.run(faults.executions_ddl())
    results = pgdrain.enqueue_many(conn, [{"job_type": "record", "payload": {"seconds": SECONDS}}
                                          for _ in range(count)])
    return [r.id for r in results]


def _executions(conn: Any) -> int:
    return conn.run("SELECT count(*) FROM executions")[0][0]


def _interrupted_then_completed(drains: Any, conn: Any, database_url: str, ids: list[int],
                                code: int, output: str) -> dict[str, Any]:
    """The interrupted invocation's ending, then the next one's, and the final state."""
    # It returns its summary either way: stopped by the failure, saying so in a few words
    # (the log has the driver's error), or finished after all.
    assert code == 0, output[-4000:]
    summary = faults.summary_in(output)
    assert summary is not None, output[-4000:]
    error = faults.DATABASE_ERROR.search(output)
    if summary["stopped"] == "database_error":
        assert summary["error"] in ("the connection to the database failed",
                                    "could not connect to the database"), summary
        assert "drain stopped: " in output and error, output[-4000:]
    else:
        assert summary["stopped"] == "empty", summary
    stuck = conn.run("SELECT count(*) FROM jobs WHERE status = 'running'")[0][0]

    # The interrupted claims' leases run out; the next invocation reclaims and finishes them.
    conn.run("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
             "WHERE status = 'running'")
    next_code, output = faults.finish(drains(database_url))
    assert next_code == 0, output[-4000:]
    after = faults.summary_in(output)
    assert after is not None and after["stopped"] == "empty", output[-4000:]
    assert after["reclaimed"] == stuck

    statuses = dict(conn.run("SELECT status, count(*) FROM jobs GROUP BY status"))
    assert statuses == {"done": len(ids)}, statuses  # none lost, none running, none failed
    finished = conn.run("SELECT count(DISTINCT job_id) FROM executions "
                        "WHERE outcome = 'returned'")[0][0]
    assert finished == len(ids)  # every job's handler ran to its end at least once
    executions = _executions(conn)
    return {"jobs": len(ids), "done": statuses["done"], "lost": len(ids) - statuses["done"],
            "stuck_running": stuck, "executions": executions,
            "re_executions": executions - len(ids), "first_exit": code,
            "first_error": error.group(1) if error else None}


def test_postgresql_restarted_during_a_drain(tmp_path, drains):
    if os.environ.get("DATABASE_URL"):
        pytest.skip("restarts the server: only on a private embedded server (DATABASE_URL set)")
    with faults.private_server(tmp_path / "pg") as server:
        admin = connect(server.url)
        admin.run('CREATE DATABASE "faults"')
        admin.close()
        url = with_database(server.url, "faults")
        conn = connect(url)
        migrate(conn)
        ids = _enqueue_recorded_jobs(conn)
        conn.close()

        drain = drains(url)
        watcher = connect(url)
        faults.wait_for(lambda: _executions(watcher) >= 5, what="the drain to run jobs")
        watcher.close()
        assert drain.poll() is None, "the drain finished before the fault"
        faults.restart(server)  # -m fast: every session, the drain's included, is terminated
        code, output = faults.finish(drain)

        conn = connect(url)  # the old connections died with the restart
        try:
            figures = _interrupted_then_completed(drains, conn, url, ids, code, output)
        finally:
            conn.close()
    print(f"restart: {figures}")


def test_drain_connection_terminated_mid_batch(database_url, conn, drains):
    ids = _enqueue_recorded_jobs(conn)
    drain = drains(database_url)
    faults.wait_for(lambda: _executions(conn) >= 3, what="the drain to run jobs")
    # Two sessions say application_name 'pgdrain' (with this test's own, three): the drain's
    # and the recording module's, whose every statement touches executions.
    own = conn.run("SELECT pg_backend_pid()")[0][0]
    sessions = faults.wait_for(lambda: [
        s for s in faults.backend_pids(database_url)
        if s["application_name"] == "pgdrain" and "executions" not in s["query"]
        and s["pid"] != own], what="the drain's session")
    [session] = sessions
    assert drain.poll() is None, "the drain finished before the fault"
    assert conn.run("SELECT pg_terminate_backend(:pid)", pid=session["pid"]) == [[True]]
    code, output = faults.finish(drain)
    stopped = faults.summary_in(output)
    assert stopped is not None and stopped["stopped"] == "database_error", output[-4000:]

    figures = _interrupted_then_completed(drains, conn, database_url, ids, code, output)
    print(f"terminate: {figures}")


def test_api_drain_whose_connection_dies_mid_batch_answers_503_then_recovers(
        load_function, conn, sql, database_url):
    """In process, through API Gateway: the failed invocation answers a 503 that says why, and
    the same warm container's next invocation reconnects and finishes the work."""
    ids = [r.id for r in pgdrain.enqueue_many(
        conn, [{"job_type": "test-sleep", "payload": {"seconds": 0.3}}] * 4)]
    app = load_function("drain", PGDRAIN_BATCH_SIZE="4", PGDRAIN_BACKOFF_BASE_SECONDS="0")
    [[pid]] = app.CONNECTOR.session().conn.run("SELECT pg_backend_pid()")

    def terminate() -> None:
        killer = connect(database_url)
        try:
            faults.wait_for(lambda: killer.run(
                "SELECT count(*) FROM jobs WHERE status = 'running'")[0][0] == 4,
                what="the batch to be claimed")
            killer.run("SELECT pg_terminate_backend(:pid)", pid=pid)
        finally:
            killer.close()

    thread = threading.Thread(target=terminate)
    thread.start()
    response = app.lambda_handler(load_event("drain_api.json"), LambdaContext())
    thread.join(30)
    assert response["statusCode"] == 503
    body = json.loads(response["body"])
    # A short error and the request id; the driver's error and the server's fields (source
    # file, line, routine) are in the log only.
    assert body["error"] == "the drain stopped: the connection to the database failed", body
    assert body["request_id"] and body["summary"]["stopped"] == "database_error"
    assert not faults.DATABASE_ERROR.search(response["body"]), response["body"]
    assert "'F':" not in response["body"] and "postgres.c" not in response["body"]

    sql("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
        "WHERE status = 'running'")
    response = app.lambda_handler(load_event("drain_api.json"), LambdaContext())
    assert response["statusCode"] == 200, response["body"]
    assert sql("SELECT id, status FROM jobs ORDER BY id") == [
        {"id": i, "status": "done"} for i in ids]
