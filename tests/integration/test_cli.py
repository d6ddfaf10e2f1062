"""The ``pgdrain`` command, run as a user runs it: a separate process, configured by env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pgdrain
from pgdrain.db import connect
from pgdrain.sql import migrations
from pgdrain.store import JANITOR_LOCK_KEY

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "layers" / "pgdrain"
PASSWORD = "s3cret-pw"
APPLIED = "applied: " + ", ".join(f"{v:04d}_{name}" for v, name, _ in migrations())


def _env(database_url: str | None) -> dict[str, str]:
    """The test's environment without DATABASE_URL or PGDRAIN_*, plus ``database_url``."""
    env = {k: v for k, v in os.environ.items()
           if k != "DATABASE_URL" and not k.startswith("PGDRAIN_")}
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    env["PYTHONPATH"] = os.pathsep.join(
        [str(LIBRARY), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def pgdrain_cli(database_url: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m pgdrain ARGS`` with ``DATABASE_URL`` set (or unset, for None)."""
    return subprocess.run(
        [sys.executable, "-m", "pgdrain", *args], env=_env(database_url), cwd=REPO,
        capture_output=True, text=True, timeout=60, check=False,
    )


def test_migrate_applies_the_schema_then_reports_it_up_to_date(empty_database_url):
    assert APPLIED.startswith("applied: 0001_create_jobs")
    first = pgdrain_cli(empty_database_url, "migrate")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == APPLIED

    second = pgdrain_cli(empty_database_url, "migrate")
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "schema is up to date"

    conn = connect(empty_database_url)
    try:
        pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"})  # the schema works
        assert conn.run("SELECT version FROM pgdrain_migrations ORDER BY version") == [
            [v] for v, _, _ in migrations()]
    finally:
        conn.close()


def test_stats_prints_counts_as_json(database_url, conn):
    pgdrain.enqueue_many(conn, [
        {"job_type": "send-email"},
        {"job_type": "send-email"},
        {"job_type": "send-email"},
        {"job_type": "resize", "queue": "images"},
        {"job_type": "later", "delay_seconds": 3600},
    ])
    [claimed] = pgdrain.claim(conn, batch_size=1, lease_seconds=60, queues=["images"])
    assert claimed.job_type == "resize"

    result = pgdrain_cli(database_url, "stats")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["counts"] == {"default": {"pending": 4}, "images": {"running": 1}}
    assert found["due"] == 3
    assert found["oldest_due_seconds"] >= 0


def test_stats_on_an_empty_queue(database_url):
    result = pgdrain_cli(database_url, "stats")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"counts": {}, "due": 0, "oldest_due_seconds": 0}


def test_requeue_by_id_gives_only_that_failed_job_fresh_attempts(database_url, conn, sql):
    ids = [r.id for r in pgdrain.enqueue_many(conn, [{"job_type": "flaky"}] * 2)]
    for job in pgdrain.claim(conn, batch_size=2, lease_seconds=60):
        assert pgdrain.fail(conn, job, "boom")
    chosen, other = ids

    result = pgdrain_cli(database_url, "requeue", "--id", str(chosen))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"requeued 1 job(s): [{chosen}]"
    rows = sql("SELECT id, status, attempts FROM jobs ORDER BY id")
    assert rows == [{"id": chosen, "status": "pending", "attempts": 0},
                    {"id": other, "status": "failed", "attempts": 1}]
    [again] = pgdrain.claim(conn, batch_size=5, lease_seconds=60)
    assert again.id == chosen

    nothing = pgdrain_cli(database_url, "requeue", "--id", str(chosen))
    assert nothing.returncode == 0, nothing.stderr
    assert nothing.stdout.strip() == "requeued 0 job(s)"


def test_janitor_reclaims_an_expired_lease(database_url, conn, sql):
    job_id = pgdrain.enqueue(conn, "send-email").id
    pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    sql("UPDATE jobs SET lease_expires_at = now() - interval '1 minute' WHERE id = :id",
        id=job_id)

    result = pgdrain_cli(database_url, "janitor")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"ran": True, "reclaimed": 1, "refunded": 1, "failed": 0,
                                         "purged": 0}
    # Its start was never recorded: back to pending with the attempt given back.
    [row] = sql("SELECT status, attempts, lost_claims, last_error FROM jobs WHERE id = :id",
                id=job_id)
    assert (row["status"], row["attempts"], row["lost_claims"], row["last_error"]) == (
        "pending", 0, 1, None)


def test_janitor_skips_while_another_drain_holds_its_lock(database_url, conn):
    conn.run("SELECT pg_advisory_lock(:key::bigint)", key=JANITOR_LOCK_KEY)
    try:
        result = pgdrain_cli(database_url, "janitor")
    finally:
        conn.run("SELECT pg_advisory_unlock(:key::bigint)", key=JANITOR_LOCK_KEY)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ran"] is False


@pytest.mark.parametrize("database_url_value", [None, ""], ids=["unset", "empty"])
def test_without_database_url_exits_2_saying_so(database_url_value):
    result = pgdrain_cli(database_url_value, "stats")
    assert result.returncode == 2
    assert "DATABASE_URL is not set" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("url", [
    f"postgresql://u:{PASSWORD}@127.0.0.1:1/db?sslmode=disable",
    f"postgresql://u@127.0.0.1:1/db?sslmode=disable&password={PASSWORD}",
    f"postgresql://u:{PASSWORD}@127.0.0.1:notaport/db",
    f"postgresql://u:{PASSWORD}@127.0.0.1:1/db?sslmode=bogus",
], ids=["closed-port", "password-in-query", "bad-port", "bad-sslmode"])
def test_connection_errors_never_print_the_password(url):
    result = pgdrain_cli(url, "stats")
    assert result.returncode != 0
    assert result.stderr.strip().startswith("pgdrain stats:")
    assert PASSWORD not in result.stdout
    assert PASSWORD not in result.stderr


@pytest.mark.parametrize("separator", ["/", "?", "#"])
def test_a_password_with_an_unencoded_separator_is_not_echoed(separator):
    result = pgdrain_cli(f"postgresql://u:s3cret{separator}pw@127.0.0.1:1/db", "stats")
    assert result.returncode == 2
    assert "DATABASE_URL" in result.stderr
    assert "s3cret" not in result.stderr + result.stdout


def test_a_closed_port_is_reported_as_a_connection_failure():
    result = pgdrain_cli(f"postgresql://u:{PASSWORD}@127.0.0.1:1/db?sslmode=disable", "migrate")
    assert result.returncode == 1
    assert "127.0.0.1" in result.stderr
    assert PASSWORD not in result.stderr + result.stdout


def test_a_non_postgresql_url_exits_2_naming_the_problem():
    result = pgdrain_cli(f"mysql://u:{PASSWORD}@127.0.0.1:3306/db", "migrate")
    assert result.returncode == 2
    assert "DATABASE_URL must start with postgresql://" in result.stderr
    assert PASSWORD not in result.stderr + result.stdout


def test_the_console_script_runs(empty_database_url):
    script = Path(sys.executable).with_name("pgdrain")
    if not script.is_file():
        pytest.skip(f"no console script at {script} (pgdrain is not installed in this venv)")
    env = _env(empty_database_url)
    result = subprocess.run([str(script), "migrate"], env=env, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == APPLIED
    usage = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60,
                           check=False)
    assert usage.returncode == 2
    assert "usage: pgdrain" in usage.stderr


@pytest.mark.parametrize("ident", ["99999999999999999999", "0", "-3", "7" * 5000, "x"])
def test_requeue_with_an_id_no_job_can_have_says_so(database_url, ident):
    result = pgdrain_cli(database_url, "requeue", "--id", ident)
    assert result.returncode == 2
    assert "argument --id: a job id is an integer from 1 to 9223372036854775807" in result.stderr
    assert "{" not in result.stderr  # not the server's error record


def test_a_database_error_prints_the_servers_message_only(empty_database_url):
    # No schema: the server refuses the statement. One line, its message and SQLSTATE; not
    # the record pg8000 carries (severity, source file, line, routine).
    result = pgdrain_cli(empty_database_url, "requeue")
    assert result.returncode == 1
    assert result.stderr.strip() == ('pgdrain requeue: the database refused it: relation "jobs" '
                                     'does not exist (SQLSTATE 42P01)')


def test_the_library_refuses_an_id_no_job_can_have(conn):
    with pytest.raises(pgdrain.InvalidJobId, match="about 31 digits"):
        pgdrain.get_job(conn, 10**30)
    with pytest.raises(pgdrain.InvalidJobId):
        pgdrain.requeue_failed(conn, ids=[0])


def test_invoke_says_where_it_comes_from_without_the_dev_tools(monkeypatch, capsys):
    # pgdrain-dev registers `invoke`; where it is not installed the command says how to get it.
    import importlib.metadata

    from pgdrain import cli

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    assert cli.main(["invoke", "DrainFunction", "-e", "events/drain_direct.json"]) == 2
    assert "comes with pgdrain's development tools" in capsys.readouterr().err
