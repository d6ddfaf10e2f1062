"""The ``pgdrain`` command, run as a user runs it: a separate process, configured by env."""

from __future__ import annotations

import json
import os
import re
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


def _env(database_url: str | None, tmpdir: str | None = None) -> dict[str, str]:
    """The test's environment without database settings or PGDRAIN_*, plus ``database_url``;
    ``tmpdir`` as the temp dir (where `make demo`'s database would be)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "DB_SECRET_ARN", "DB_IAM_AUTH")
           and not k.startswith("PGDRAIN_")}
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    if tmpdir is not None:
        env["TMPDIR"] = tmpdir
    env["PYTHONPATH"] = os.pathsep.join(
        [str(LIBRARY), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def pgdrain_cli(database_url: str | None, *args: str, tmpdir: str | None = None
                ) -> subprocess.CompletedProcess[str]:
    """Run ``python -m pgdrain ARGS`` with ``DATABASE_URL`` set (or unset, for None)."""
    return subprocess.run(
        [sys.executable, "-m", "pgdrain", *args], env=_env(database_url, tmpdir), cwd=REPO,
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


def test_stats_per_queue_and_type(database_url, conn, sql):
    pgdrain.enqueue_many(conn, [
        {"job_type": "send-email"},
        {"job_type": "send-email"},
        {"job_type": "send-email"},
        {"job_type": "resize", "queue": "images"},
        {"job_type": "later", "delay_seconds": 3600},
        {"job_type": "flaky", "queue": "images"},
        {"job_type": "quick", "queue": "images"},
    ])
    [claimed] = pgdrain.claim(conn, batch_size=1, lease_seconds=60, queues=["images"])
    assert claimed.job_type == "resize"
    sql("UPDATE jobs SET run_at = now() - interval '90 seconds' WHERE job_type = 'send-email'")
    for job in pgdrain.claim(conn, batch_size=2, lease_seconds=60, queues=["images"]):
        assert (pgdrain.fail(conn, job, "boom") if job.job_type == "flaky"
                else pgdrain.complete(conn, [job]).ids)

    result = pgdrain_cli(database_url, "stats", "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    rows = {(r["queue"], r["job_type"]): r for r in found["queues"]}
    assert set(rows) == {("default", "send-email"), ("default", "later"), ("images", "resize"),
                         ("images", "flaky"), ("images", "quick")}
    email = rows["default", "send-email"]
    assert (email["due"], email["scheduled"], email["running"], email["failed"]) == (3, 0, 0, 0)
    assert 89 <= email["oldest_due_seconds"] < 600
    assert (rows["default", "later"]["due"], rows["default", "later"]["scheduled"]) == (0, 1)
    # Nothing due (only scheduled, or only finished): no wait to report.
    assert rows["default", "later"]["oldest_due_seconds"] == 0
    assert rows["images", "quick"]["oldest_due_seconds"] == 0
    assert rows["images", "resize"]["running"] == 1
    assert (rows["images", "flaky"]["failed"], rows["images", "flaky"]["failed_last_hour"]) == (
        1, 1)
    assert (rows["images", "quick"]["done_last_minute"],
            rows["images", "quick"]["done_last_hour"]) == (1, 1)
    assert found["totals"]["due"] == 3 and found["totals"]["failed"] == 1
    assert found["totals"]["cancelled"] == 0 and found["totals"]["waiting"] == 0
    assert found["drains_running"] == 0

    table = pgdrain_cli(database_url, "stats")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["QUEUE", "TYPE", "DUE", "SCHEDULED", "WAITING", "RUNNING",
                                "FAILED", "CANCELLED", "OLDEST", "DUE", "DONE", "1M", "DONE",
                                "1H", "FAILED", "1H"]
    email_line = next(line for line in lines if "send-email" in line).split()
    assert email_line[:8] == ["default", "send-email", "3", "0", "0", "0", "0", "0"]
    assert email_line[8] == "1m"  # the oldest due job has waited a minute and a half
    assert any(line.startswith("(all)") for line in lines)
    assert lines[-2:] == ["drains running: 0", lines[-1]]
    assert lines[-1].startswith("table jobs: ")


def test_stats_and_top_show_the_tables_size_dead_rows_and_last_vacuum(database_url, conn, sql):
    pgdrain.enqueue_many(conn, [{"job_type": "send-email"}] * 50)
    for job in pgdrain.claim(conn, batch_size=50, lease_seconds=60):
        pgdrain.complete(conn, [job])
    sql("VACUUM jobs")
    found = json.loads(pgdrain_cli(database_url, "stats", "--json").stdout)["table"]
    assert found["heap_bytes"] > 0 and found["index_bytes"] > 0
    assert found["total_bytes"] == found["heap_bytes"] + found["index_bytes"]
    assert found["vacuums"] >= 1 and 0 <= found["vacuumed_seconds_ago"] < 600
    assert found["live_rows"] >= 0 and found["dead_rows"] >= 0
    line = pgdrain_cli(database_url, "stats").stdout.splitlines()[-1]
    assert re.fullmatch(r"table jobs: [\d.]+ MB \(heap [\d.]+ MB, indexes [\d.]+ MB\), "
                        r"[\d,]+ live and [\d,]+ dead rows, last vacuum [\d.]+s ago", line), line
    top = pgdrain_cli(database_url, "top", "--once").stdout.splitlines()
    assert any(t.startswith("table jobs: ") and "dead rows" in t for t in top)


def test_stats_on_an_empty_queue(database_url):
    result = pgdrain_cli(database_url, "stats", "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["queues"] == [] and found["totals"]["due"] == 0
    assert pgdrain_cli(database_url, "stats").stdout.startswith("no jobs")


def test_requeue_by_id_gives_only_that_failed_job_fresh_attempts(database_url, conn, sql):
    ids = [r.id for r in pgdrain.enqueue_many(conn, [{"job_type": "flaky"}] * 2)]
    for job in pgdrain.claim(conn, batch_size=2, lease_seconds=60):
        assert pgdrain.fail(conn, job, "boom")
    chosen, other = ids

    result = pgdrain_cli(database_url, "requeue", "--id", str(chosen))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"requeued 1 job(s): {chosen}"
    rows = sql("SELECT id, status, attempts FROM jobs ORDER BY id")
    assert rows == [{"id": chosen, "status": "pending", "attempts": 0},
                    {"id": other, "status": "failed", "attempts": 1}]
    [again] = pgdrain.claim(conn, batch_size=5, lease_seconds=60)
    assert again.id == chosen

    # Named but not failed (claimed again: running), or no such job: said, and exit 1.
    nothing = pgdrain_cli(database_url, "requeue", "--id", str(chosen), "--id", "987654")
    assert nothing.returncode == 1, nothing.stderr
    assert nothing.stdout.strip() == "requeued 0 job(s)"
    said = nothing.stderr.strip().splitlines()[1:]
    assert said == [f"pgdrain requeue: job {chosen} was not requeued: it is running, not failed",
                    "pgdrain requeue: job 987654 was not requeued: there is no such job"]


def test_janitor_reclaims_an_expired_lease(database_url, conn, sql):
    job_id = pgdrain.enqueue(conn, "send-email").id
    pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    sql("UPDATE jobs SET lease_expires_at = now() - interval '1 minute' WHERE id = :id",
        id=job_id)

    result = pgdrain_cli(database_url, "janitor")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"ran": True, "reclaimed": 1, "refunded": 1, "failed": 0,
                                         "expired": 0, "purged": 0}
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


def test_without_a_database_exits_2_saying_how_to_give_one(tmp_path):
    # No setting: an error, never the demo's database unasked (the temp dir is empty here).
    result = pgdrain_cli(None, "stats", tmpdir=str(tmp_path))
    assert result.returncode == 2
    assert "no database configured: set DATABASE_URL, or DB_SECRET_ARN" in result.stderr
    assert "--demo" in result.stderr and "make demo" in result.stderr
    assert result.stdout == ""


def test_a_blank_database_url_is_an_error_that_says_so(tmp_path):
    result = pgdrain_cli(" ", "stats", tmpdir=str(tmp_path))
    assert result.returncode == 2
    assert "DATABASE_URL is set but empty" in result.stderr
    assert result.stdout == ""


def test_every_command_says_which_database_it_is_on(database_url, conn):
    from pgdrain.db import parse_database_url

    params = parse_database_url(database_url)
    pgdrain.enqueue(conn, "where")
    for args in (("stats",), ("list", "--json"), ("show", "1"), ("schedules",), ("janitor",),
                 ("top", "--once")):
        result = pgdrain_cli(database_url, *args)
        first = result.stderr.splitlines()[0]
        assert first == (f"pgdrain {args[0]}: database {params.user}@{params.where} "
                         "(DATABASE_URL)"), (args, result.stderr)
        assert PASSWORD not in result.stderr + result.stdout
    frame = pgdrain_cli(database_url, "top", "--once").stdout.splitlines()
    assert frame[1] == f"database {params.user}@{params.where} (DATABASE_URL)"
    assert json.loads(pgdrain_cli(database_url, "list", "--json").stdout)  # stdout: JSON only


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
    result = pgdrain_cli(empty_database_url, "requeue", "--all")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        'pgdrain requeue: the database refused it: relation "jobs" does not exist '
        "(SQLSTATE 42P01). pgdrain's schema is not in this database: run `pgdrain migrate` "
        "(or check that this is the database the stack uses)")


def test_a_failed_migration_says_why_in_one_line(empty_database_url):
    # An index of the application's own in the way of one of pgdrain's: the server's message
    # and SQLSTATE, not pg8000's whole error record.
    conn = connect(empty_database_url)
    try:
        conn.run("CREATE TABLE app_things (id int)")
        conn.run("CREATE INDEX jobs_pending_idx ON app_things (id)")
    finally:
        conn.close()
    result = pgdrain_cli(empty_database_url, "migrate")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("pgdrain migrate: migration 0001_create_jobs failed: relation "
                           '"jobs_pending_idx" already exists (SQLSTATE 42P07)'), last
    assert "{" not in last and "'S'" not in last


def test_migrating_over_the_apps_own_jobs_table_is_refused_before_anything_is_created(
        empty_database_url):
    conn = connect(empty_database_url)
    try:
        conn.run("CREATE TABLE jobs (id int, note text)")
        result = pgdrain_cli(empty_database_url, "migrate")
        assert result.returncode == 1
        assert result.stderr.strip().splitlines()[-1] == (
            "pgdrain migrate: schema public already has jobs, not created by pgdrain (there is "
            "no pgdrain_migrations beside it); nothing was created. Give pgdrain a schema of "
            "its own: set PGDRAIN_SCHEMA=pgdrain (the same for the functions, the CLI and your "
            "app's enqueues) and migrate again")
        assert conn.run("SELECT c.relname FROM pg_class c JOIN pg_namespace n "
                        "ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
                        "AND c.relkind = 'r'") == [["jobs"]]
    finally:
        conn.close()


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


def _failed_jobs(conn, specs):
    """Enqueue ``specs`` and fail each once: their ids, in order."""
    ids = [r.id for r in pgdrain.enqueue_many(conn, specs)]
    for job in pgdrain.claim(conn, batch_size=len(ids), lease_seconds=60):
        assert pgdrain.fail(conn, job, f"boom {job.id}\nTraceback: line 2")
    return ids


def test_list_filters_by_status_type_queue_and_age(database_url, conn, sql):
    failed = _failed_jobs(conn, [{"job_type": "sync", "queue": "crm"},
                                 {"job_type": "sync", "queue": "crm"},
                                 {"job_type": "email"}])
    pending = pgdrain.enqueue(conn, "sync", queue="crm").id
    sql("UPDATE jobs SET updated_at = now() - interval '2 hours' WHERE id = :id", id=failed[0])

    result = pgdrain_cli(database_url, "list", "--status", "failed", "--type", "sync",
                         "--queue", "crm", "--json")
    assert result.returncode == 0, result.stderr
    assert [r["id"] for r in json.loads(result.stdout)] == [failed[1], failed[0]]
    recent = pgdrain_cli(database_url, "list", "--status", "failed", "--since", "1h", "--json")
    assert [r["id"] for r in json.loads(recent.stdout)] == [failed[2], failed[1]]
    everything = pgdrain_cli(database_url, "list", "--limit", "2", "--json")
    assert [r["id"] for r in json.loads(everything.stdout)] == [pending, failed[2]]

    table = pgdrain_cli(database_url, "list", "--status", "failed")
    lines = table.stdout.splitlines()
    assert lines[0].split()[:4] == ["ID", "TYPE", "QUEUE", "STATUS"]
    # The error's newline is shown escaped: one job, one line.
    assert len(lines) == 4
    assert f"boom {failed[2]}\\nTraceback: line 2" in lines[1]
    none = pgdrain_cli(database_url, "list", "--type", "nothing-like-this")
    assert none.returncode == 0 and none.stdout.strip() == "no jobs match"


def test_show_prints_every_field_and_the_last_error(database_url, conn):
    [ident] = _failed_jobs(conn, [{"job_type": "sync", "payload": {"contact": 42}}])
    result = pgdrain_cli(database_url, "show", str(ident), "--json")
    assert result.returncode == 0, result.stderr
    job = json.loads(result.stdout)
    assert (job["id"], job["status"], job["payload"]) == (ident, "failed", {"contact": 42})
    assert job["last_error"] == f"boom {ident}\nTraceback: line 2"
    assert job["errors"][0]["error"] == job["last_error"]

    text = pgdrain_cli(database_url, "show", str(ident))
    assert text.returncode == 0, text.stderr
    fields = {line.split()[0] for line in text.stdout.splitlines() if line[:1].strip()}
    assert {"id", "job_type", "status", "payload", "attempts", "last_error", "errors",
            "run_at", "created_at", "finished_at"} <= fields

    missing = pgdrain_cli(database_url, "show", "987654321")
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines()[-1] == "pgdrain show: there is no job 987654321"


def test_requeue_selects_by_type_or_queue_or_all_in_batches(database_url, conn, sql):
    ids = _failed_jobs(conn, [{"job_type": "sync"}] * 5 + [{"job_type": "email", "queue": "mail"}]
                       + [{"job_type": "other"}])
    by_queue = pgdrain_cli(database_url, "requeue", "--queue", "mail", "--json", "--yes")
    assert json.loads(by_queue.stdout) == {"requeued": [ids[5]]}
    # Five sync jobs, two per statement: three batches, one call.
    by_type = pgdrain_cli(database_url, "requeue", "--type", "sync", "--batch", "2", "--yes")
    assert by_type.returncode == 0, by_type.stderr
    assert by_type.stdout.strip() == "requeued 5 job(s): " + ", ".join(map(str, ids[:5]))
    rest = pgdrain_cli(database_url, "requeue", "--all", "--json", "--yes")
    assert json.loads(rest.stdout) == {"requeued": [ids[6]]}
    assert sql("SELECT count(*) AS n FROM jobs WHERE status = 'failed'")[0]["n"] == 0


def test_requeue_without_a_selector_counts_then_requeues_every_failed_job_with_yes(
        database_url, conn, sql):
    # As purge: a bulk requeue says how many it would requeue and waits for --yes.
    ids = _failed_jobs(conn, [{"job_type": "a"}, {"job_type": "b", "queue": "q"}])
    for args in ((), ("--all",), ("--type", "a")):
        counted = pgdrain_cli(database_url, "requeue", *args)
        assert counted.returncode == 0, counted.stderr
        assert counted.stdout.strip().startswith(f"{1 if args[:1] == ('--type',) else 2} "
                                                 "failed job(s) match; run again with --yes")
    assert json.loads(pgdrain_cli(database_url, "requeue", "--json").stdout) == {
        "would_requeue": 2, "requeued": []}
    assert sql("SELECT count(*) AS n FROM jobs WHERE status = 'failed'")[0]["n"] == 2
    result = pgdrain_cli(database_url, "requeue", "--yes")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "requeued 2 job(s): " + ", ".join(map(str, ids))


@pytest.mark.parametrize("args, words", [
    (("--queue", "mial"), "no queue 'mial': no job names it (a typo?)"),
    (("--type", "snyc"), "no job has type 'snyc' (a typo?)"),
])
def test_requeue_of_a_queue_or_type_no_job_has_is_a_typo(database_url, conn, args, words):
    _failed_jobs(conn, [{"job_type": "sync", "queue": "mail"}])
    result = pgdrain_cli(database_url, "requeue", *args, "--yes")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"pgdrain requeue: {words}"
    assert result.stdout == ""


@pytest.mark.parametrize("args, advice", [
    (("resume", "mial"), "there is nothing to resume"),
    (("queue", "set", "mial", "--rate", "5/s"), "`pgdrain queue set QUEUE ... --new`"),
    (("pause", "mial"), "`pgdrain pause QUEUE --new`"),
])
def test_a_queue_typo_gets_the_advice_of_its_own_command(database_url, conn, args, advice):
    pgdrain.enqueue(conn, "sync", queue="mail")
    result = pgdrain_cli(database_url, *args)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert "no queue 'mial'" in last and advice in last, last
    if args[0] != "pause":
        assert "pause" not in last.split("(a typo?)")[1]


def test_delete_shows_then_deletes_and_leaves_a_running_job(database_url, conn, sql):
    waiting = pgdrain.enqueue(conn, "a").id
    failed = _failed_jobs(conn, [{"job_type": "b"}])[0]
    running = pgdrain.enqueue(conn, "c").id
    sql("UPDATE jobs SET status = 'running', lease_token = gen_random_uuid(), "
        "lease_expires_at = now() + interval '1 minute' WHERE id = :id", id=running)
    args = ("delete", str(waiting), str(failed), str(running), "987654")
    shown = pgdrain_cli(database_url, *args)
    assert shown.returncode == 0, shown.stderr
    assert "would delete (pending)" in shown.stdout and "would delete (failed)" in shown.stdout
    assert "run again with --yes" in shown.stdout
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 3
    done = pgdrain_cli(database_url, *args, "--yes", "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout) == {str(waiting): "deleted", str(failed): "deleted",
                                       str(running): "running", "987654": "not_found"}
    assert f"job {running} was not deleted: it is running: cancel it first" in done.stderr
    assert [r["id"] for r in sql("SELECT id FROM jobs")] == [running]


def test_run_now_makes_a_waiting_job_due(database_url, conn, sql):
    failed = _failed_jobs(conn, [{"job_type": "c"}])[0]
    later = pgdrain.enqueue(conn, "a", delay_seconds=3600).id
    due = pgdrain.enqueue(conn, "b").id
    result = pgdrain_cli(database_url, "run-now", str(later), str(due), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {str(later): "due_now", str(due): "already_due"}
    assert sql("SELECT run_at <= now() AS due FROM jobs WHERE id = :id", id=later)[0]["due"]
    [claimed, _] = pgdrain.claim(conn, batch_size=5, lease_seconds=60)
    assert claimed.id == later or _.id == later
    refused = pgdrain_cli(database_url, "run-now", str(failed))
    assert refused.returncode == 1
    assert f"job {failed} was not made due: it is failed, not pending" in refused.stderr


def test_enqueue_from_the_shell(database_url, conn, sql):
    result = pgdrain_cli(database_url, "enqueue", "send-email", "--payload",
                         '{"to": "a@example.com"}', "--queue", "mail", "--priority", "-1",
                         "--dedupe-key", "k1")
    assert result.returncode == 0, result.stderr
    [row] = sql("SELECT id, job_type, payload, queue, priority, dedupe_key FROM jobs")
    assert result.stdout.strip() == f"enqueued job {row['id']} (due now)"
    assert (row["job_type"], row["payload"], row["queue"], row["priority"]) == (
        "send-email", {"to": "a@example.com"}, "mail", -1)
    again = pgdrain_cli(database_url, "enqueue", "send-email", "--dedupe-key", "k1", "--json")
    assert json.loads(again.stdout) == {"id": row["id"], "created": False, "due": False}
    later = json.loads(pgdrain_cli(database_url, "enqueue", "x", "--delay", "1h",
                                   "--json").stdout)
    assert later["created"] and not later["due"]
    for bad, words in ((("--payload", "{nope"), "argument --payload: not JSON"),
                       (("--payload", "[1]"), "must be a JSON object"),
                       (("--max-attempts", "0"), "argument --max-attempts")):
        refused = pgdrain_cli(database_url, "enqueue", "x", *bad)
        assert refused.returncode == 2 and words in refused.stderr, refused.stderr
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 2


def test_queues_lists_each_queue_with_its_settings_and_jobs(database_url, conn):
    pgdrain.enqueue_many(conn, [{"job_type": "a", "queue": "mail"}] * 2
                         + [{"job_type": "b", "delay_seconds": 3600}])
    pgdrain.control.set_queue(conn, "partner", max_running=3, rate="10/s", new=True)
    pgdrain.control.pause(conn, "mail")
    found = {q["queue"]: q for q in json.loads(
        pgdrain_cli(database_url, "queues", "--json").stdout)}
    assert set(found) == {"mail", "default", "partner"}
    assert (found["mail"]["paused"], found["mail"]["due"]) == (True, 2)
    assert (found["default"]["scheduled"], found["default"]["paused"]) == (1, False)
    assert (found["partner"]["max_running"], found["partner"]["rate"]) == (3, "10/s")
    table = pgdrain_cli(database_url, "queues").stdout.splitlines()
    assert table[0].split()[:3] == ["QUEUE", "PAUSED", "MAX"]


def test_migrate_status_lists_applied_and_pending_migrations(empty_database_url):
    before = json.loads(pgdrain_cli(empty_database_url, "migrate", "--status", "--json").stdout)
    assert before and all(m["applied_at"] is None for m in before)
    text = pgdrain_cli(empty_database_url, "migrate", "--status").stdout
    assert f"{len(before)} to apply: run `pgdrain migrate`" in text
    assert pgdrain_cli(empty_database_url, "migrate").returncode == 0
    after = json.loads(pgdrain_cli(empty_database_url, "migrate", "--status", "--json").stdout)
    assert [m["version"] for m in after] == [m["version"] for m in before]
    assert all(m["applied_at"] for m in after)
    assert "schema is up to date" in pgdrain_cli(empty_database_url, "migrate",
                                                 "--status").stdout


def test_version():
    from pgdrain.version import VERSION

    result = subprocess.run([sys.executable, "-m", "pgdrain", "--version"], env=_env(None),
                            cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and result.stdout.strip() == f"pgdrain {VERSION}"


def test_purge_counts_first_and_deletes_with_yes(database_url, conn, sql):
    old = _failed_jobs(conn, [{"job_type": "sync"}] * 3)
    young = _failed_jobs(conn, [{"job_type": "sync"}])
    done = pgdrain.enqueue(conn, "email").id
    pgdrain.complete(conn, pgdrain.claim(conn, batch_size=1, lease_seconds=60))
    sql("UPDATE jobs SET finished_at = now() - interval '8 days' WHERE id = ANY(:ids)",
        ids=[*old, done])

    count = pgdrain_cli(database_url, "purge", "--status", "failed", "--older-than", "7d")
    assert count.returncode == 0, count.stderr
    assert count.stdout.strip() == ("3 failed job(s) finished more than 7d 0h ago; run again "
                                    "with --yes to delete them")
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 5

    purge = pgdrain_cli(database_url, "purge", "--status", "failed", "--older-than", "7d",
                        "--yes", "--batch", "2", "--json")
    assert json.loads(purge.stdout) == {"purged": 3}
    left = sql("SELECT id, status FROM jobs ORDER BY id")
    assert left == [{"id": young[0], "status": "failed"}, {"id": done, "status": "done"}]


@pytest.mark.parametrize(("args", "words"), [
    (["purge", "--status", "failed", "--older-than", "7 days"], "a duration is a number"),
    (["purge", "--status", "failed", "--older-than=-1d"], "a duration is a number"),
    (["purge", "--status", "pending", "--older-than", "1d"], "invalid choice: 'pending'"),
    (["purge", "--status", "done"], "the following arguments are required: --older-than"),
    (["list", "--since", "soon"], "a duration is a number"),
    (["list", "--limit", "0"], "a whole number from 1 to 1000000"),
    (["list", "--status", "lost"], "invalid choice: 'lost'"),
    (["list", "--queue", "a\x1b[2Jb"], "without control characters"),
    (["show", "abc"], "a job id is an integer"),
    (["top", "--interval", "0"], "a refresh interval is a number of seconds"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_arguments_exit_2_saying_what_is_wrong(database_url, args, words):
    result = pgdrain_cli(database_url, *args)
    assert result.returncode == 2
    assert words in result.stderr
    assert result.stdout == ""


def test_top_draws_queues_and_the_drains_holding_slots(database_url, conn):
    pgdrain.enqueue_many(conn, [{"job_type": "sync", "queue": "crm"}] * 3)
    conn.run("SELECT pg_advisory_lock(:key::int, 1)", key=pgdrain.store.DRAIN_SLOT_LOCK_KEY)
    try:
        result = pgdrain_cli(database_url, "top", "--once")
    finally:
        conn.run("SELECT pg_advisory_unlock(:key::int, 1)",
                 key=pgdrain.store.DRAIN_SLOT_LOCK_KEY)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("pgdrain top")
    crm = next(line for line in lines if line.startswith("crm")).split()
    assert crm[:4] == ["crm", "3", "0", "0"]
    assert "drains running: 1 of 4 slots" in lines
    slot_line = lines[lines.index("drains running: 1 of 4 slots") + 2].split()
    assert slot_line[:2] == ["1", str(conn.run("SELECT pg_backend_pid()")[0][0])]


def test_top_shows_a_database_outage_and_reconnects(database_url, conn, sql):
    # The runbook watches top during a failover: the first blip must not end it.
    import io

    from pgdrain.cli import top

    pgdrain.enqueue(conn, "sync", queue="crm")
    opened, frames = [], []

    def connect_again():
        opened.append(connect(database_url))
        return opened[-1]

    def sleep(_seconds):
        frames.append(out.getvalue())
        if len(frames) == 1:  # the database goes away under the session top holds
            sql("SELECT pg_terminate_backend(:pid)",
                pid=opened[0].run("SELECT pg_backend_pid()")[0][0])
        if len(frames) == 3:
            raise KeyboardInterrupt

    out = io.StringIO()
    assert top.run(connect_again, interval=0.01, once=False, out=out, max_drains=4,
                   sleep=sleep) == 0
    first, down, back = (frames[0], frames[1][len(frames[0]):], frames[2][len(frames[1]):])
    assert "crm" in first
    assert "DATABASE UNREACHABLE" in down and "connecting again" in down
    assert "crm" in back and "UNREACHABLE" not in back
    assert len(opened) == 2


def test_top_quits_cleanly_on_ctrl_c(database_url):
    import signal
    import time

    process = subprocess.Popen([sys.executable, "-m", "pgdrain", "top", "--interval", "0.2"],
                               env=_env(database_url), cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()
        assert first.startswith("pgdrain top"), process.stderr.read()
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0
    assert [line.split(": database ")[0] for line in err.splitlines()] == ["pgdrain top"]
    assert out.count("pgdrain top") >= 2  # it refreshed before Ctrl-C


def test_with_demo_it_reaches_the_demo_database_and_only_then(tmp_path, monkeypatch):
    # `make demo` leaves its embedded database: --demo reaches it; without --demo and with
    # nothing configured, the command refuses rather than showing the demo's queue.
    pytest.importorskip("pgserver")
    import tempfile

    from pgdrain.migrate import migrate
    from pgdrain_dev import embedded

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with embedded.demo_database() as url:
        conn = connect(url)
        try:
            migrate(conn)
            pgdrain.enqueue(conn, "from-the-demo")
        finally:
            conn.close()
    result = pgdrain_cli(None, "list", "--json", "--demo", tmpdir=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert [r["job_type"] for r in json.loads(result.stdout)] == ["from-the-demo"]
    assert "(the demo's embedded database (--demo))" in result.stderr.splitlines()[0]
    unasked = pgdrain_cli(None, "list", "--json", tmpdir=str(tmp_path))
    assert unasked.returncode == 2 and "no database configured" in unasked.stderr


def test_demo_without_a_demo_database_says_to_run_make_demo(tmp_path):
    pytest.importorskip("pgserver")
    result = pgdrain_cli(None, "stats", "--demo", tmpdir=str(tmp_path))
    assert result.returncode == 2
    assert "no demo database on this machine; run `make demo`" in result.stderr


def test_it_reaches_the_database_through_a_secret_as_the_functions_do(aws, database_url, conn):
    # DB_SECRET_ARN, fetched from (a stand-in for) Secrets Manager, signed by pgdrain itself.
    from pgdrain.db import parse_database_url

    pgdrain.enqueue(conn, "through-the-secret")
    params = parse_database_url(database_url)
    host = params.unix_sock.rsplit("/", 1)[0] if params.unix_sock else params.host
    arn = aws.create_secret(Name="pgdrain/cli", SecretString=json.dumps({
        "engine": "postgres", "host": host, "port": str(params.port), "username": params.user,
        "password": params.password or PASSWORD, "dbname": params.database}))["ARN"]
    env = {**_env(None), "DB_SECRET_ARN": arn,
           "DB_SSLMODE": "disable" if params.unix_sock else "prefer"}
    result = subprocess.run([sys.executable, "-m", "pgdrain", "list", "--json"], env=env,
                            cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert [r["job_type"] for r in json.loads(result.stdout)] == ["through-the-secret"]
    assert PASSWORD not in result.stdout + result.stderr


def test_a_run_at_of_minus_infinity_is_a_very_old_due_job(database_url, sql):
    sql("INSERT INTO jobs (job_type, run_at) VALUES ('ancient', '-infinity')")
    found = json.loads(pgdrain_cli(database_url, "stats", "--json").stdout)
    [row] = found["queues"]
    assert row["due"] == 1 and row["oldest_due_seconds"] > 6e10


def test_stats_counts_cancelled_jobs(database_url, conn):
    ident = pgdrain.enqueue(conn, "send-email", queue="mail").id
    pgdrain.cancel(conn, [ident])
    [row] = json.loads(pgdrain_cli(database_url, "stats", "--json").stdout)["queues"]
    assert (row["queue"], row["cancelled"], row["due"]) == ("mail", 1, 0)


def test_cancel_says_what_happened_to_each_job(database_url, conn):
    pending = pgdrain.enqueue(conn, "send-email").id
    running = pgdrain.enqueue(conn, "sync-crm").id
    conn.run("UPDATE jobs SET status = 'running', lease_token = gen_random_uuid(), "
             "lease_expires_at = now() + interval '1 minute' WHERE id = :id", id=running)
    result = pgdrain_cli(database_url, "cancel", str(pending), str(running), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {str(pending): "cancelled",
                                         str(running): "cancel_requested"}
    again = pgdrain_cli(database_url, "cancel", str(pending), "424242")
    assert again.returncode == 1
    assert f"job {pending} was not cancelled: it is cancelled" in again.stderr
    assert "job 424242 was not cancelled: there is no such job" in again.stderr
    listed = pgdrain_cli(database_url, "list", "--status", "cancelled", "--json")
    assert [r["id"] for r in json.loads(listed.stdout)] == [pending]
    bad = pgdrain_cli(database_url, "cancel", "x")
    assert bad.returncode == 2 and "a job id is an integer" in bad.stderr


def test_pause_and_resume_a_queue(database_url, conn):
    pgdrain.enqueue(conn, "send-email", queue="emails")
    result = pgdrain_cli(database_url, "pause", "emails")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("queue 'emails' is paused (since ")
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []
    stats = pgdrain_cli(database_url, "stats")
    assert "queue 'emails' is PAUSED (for " in stats.stdout
    data = json.loads(pgdrain_cli(database_url, "stats", "--json").stdout)
    assert data["paused_queues"] == ["emails"]
    assert [r["paused"] for r in data["queues"]] == [True]
    resumed = pgdrain_cli(database_url, "resume", "emails", "--json")
    assert json.loads(resumed.stdout) == {"queue": "emails", "paused": False, "paused_at": None}
    assert len(pgdrain.claim(conn, batch_size=10, lease_seconds=60)) == 1


def test_pausing_an_unknown_queue_exits_2_unless_it_is_said_to_be_new(database_url, sql):
    typo = pgdrain_cli(database_url, "pause", "emials")
    assert typo.returncode == 2
    assert "pgdrain pause: no queue 'emials': no job names it" in typo.stderr
    assert sql("SELECT count(*) AS n FROM pgdrain_queues") == [{"n": 0}]
    assert pgdrain_cli(database_url, "resume", "emials").returncode == 2
    assert pgdrain_cli(database_url, "pause", "emials", "--new").returncode == 0
    bad = pgdrain_cli(database_url, "pause", "a\tb")
    assert bad.returncode == 2 and "without control characters" in bad.stderr


def test_schedules_come_from_the_database_not_the_shells_job_modules(database_url, conn):
    # What the drains declared (scheduler.declare, at a drain's first pass) is what the
    # command shows, whatever PGDRAIN_JOBS the operator's shell has (here, other modules).
    from pgdrain import scheduler
    from pgdrain.registry import Registry

    drains = Registry()
    scheduler.schedule("0 3 * * *", "report", tz="Europe/Paris", name="nightly-report",
                       registry=drains)
    scheduler.schedule("*/15 * * * *", "report", name="quarter-hour-report", queue="reports",
                       registry=drains)
    scheduler.declare(conn, drains)
    conn.run("INSERT INTO pgdrain_schedules (name, last_tick, last_job_id) "
             "VALUES ('renamed-away', now() - interval '1 day', 7)")
    env = {**_env(database_url), "PGDRAIN_JOBS": "tests.support.jobs"}

    def schedules(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pgdrain", "schedules", *args], env=env,
                              cwd=REPO, capture_output=True, text=True, timeout=60,
                              check=False)

    result = schedules("--json")
    assert result.returncode == 0, result.stderr
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert set(rows) == {"nightly-report", "quarter-hour-report", "renamed-away"}
    nightly = rows["nightly-report"]
    assert (nightly["cron"], nightly["tz"], nightly["queue"], nightly["declared"]) == (
        "0 3 * * *", "Europe/Paris", "default", True)
    assert nightly["next_run"].endswith("+00:00") and nightly["last_tick"] is None
    assert rows["quarter-hour-report"]["queue"] == "reports"
    assert rows["renamed-away"]["declared"] is False
    table = schedules()
    assert "(removed: stopped)" in table.stdout and "quarter-hour-report" in table.stdout
    # The drains' modules no longer declare the quarter-hour entry: it goes.
    fewer = Registry()
    scheduler.schedule("0 3 * * *", "report", tz="Europe/Paris", name="nightly-report",
                       registry=fewer)
    scheduler.declare(conn, fewer)
    assert {r["name"] for r in json.loads(schedules("--json").stdout)} == {
        "nightly-report", "renamed-away"}


def test_show_prints_a_jobs_result_and_progress(database_url, conn):
    ident = pgdrain.enqueue(conn, "export").id
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    from pgdrain.store import sync_controls

    sync_controls(conn, [job], ['{"fraction": 0.5, "message": "half"}'])
    pgdrain.finish_many(conn, [pgdrain.Finish.done(job, '{"rows": 7}')])
    shown = json.loads(pgdrain_cli(database_url, "show", str(ident), "--json").stdout)
    assert (shown["status"], shown["result"], shown["progress"]) == (
        "done", {"rows": 7}, {"fraction": 0.5, "message": "half"})
    table = pgdrain_cli(database_url, "show", str(ident)).stdout
    assert "result" in table and "rows" in table


def test_queue_set_caps_a_queue_and_none_lifts_it(database_url, conn):
    pgdrain.enqueue(conn, "call-api", queue="partner")
    result = pgdrain_cli(database_url, "queue", "set", "partner", "--max-running", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("queue 'partner': at most 3 running across all drains; "
                                     "no rate limit")
    assert "queue 'partner' is capped at 3 running" in pgdrain_cli(database_url,
                                                                  "stats").stdout
    data = json.loads(pgdrain_cli(database_url, "stats", "--json").stdout)
    assert data["caps"] == {"partner": 3}
    lifted = pgdrain_cli(database_url, "queue", "set", "partner", "--max-running", "none",
                         "--json")
    assert json.loads(lifted.stdout)["max_running"] is None
    for bad in ("0", "-2", "3.5", "many"):
        refused = pgdrain_cli(database_url, "queue", "set", "partner", "--max-running", bad)
        assert refused.returncode == 2 and "a cap is a whole number from 1" in refused.stderr
    typo = pgdrain_cli(database_url, "queue", "set", "partnr", "--max-running", "3")
    assert typo.returncode == 2 and "no queue 'partnr'" in typo.stderr


def test_queue_set_rate_limits_a_queue_keeps_its_cap_and_refuses_bad_rates(database_url, conn):
    pgdrain.enqueue(conn, "call-api", queue="partner")
    assert pgdrain_cli(database_url, "queue", "set", "partner", "--max-running", "3"
                       ).returncode == 0
    result = pgdrain_cli(database_url, "queue", "set", "partner", "--rate", "10/s")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("queue 'partner': at most 3 running across all drains; "
                                     "at most 10/s starts across all drains")
    assert "queue 'partner' is limited to 10/s starts" in pgdrain_cli(database_url,
                                                                     "stats").stdout
    assert json.loads(pgdrain_cli(database_url, "stats", "--json").stdout)["rates"] == {
        "partner": "10/s"}
    for bad, why in (("0/min", "from 1 to 10000"), ("10", "not a rate"),
                     ("5/fortnight", "unknown period"), ("1.5/s", "not a rate"),
                     ("1/0.5s", "from a second to a day"), ("9" * 5000 + "/s", "from 1 to 10000")):
        refused = pgdrain_cli(database_url, "queue", "set", "partner", "--rate", bad)
        assert refused.returncode == 2 and why in refused.stderr, refused.stderr
        assert len(refused.stderr) < 1000, refused.stderr  # the rate quoted cut short
    state = json.loads(pgdrain_cli(database_url, "queue", "set", "partner", "--json",
                                   "--rate", "100/min").stdout)
    assert (state["max_running"], state["rate"]) == (3, "100/min")
    neither = pgdrain_cli(database_url, "queue", "set", "partner")
    assert neither.returncode == 2 and "give --max-running, --rate or both" in neither.stderr
    lifted = json.loads(pgdrain_cli(database_url, "queue", "set", "partner", "--json",
                                    "--rate", "none").stdout)
    assert (lifted["max_running"], lifted["rate"]) == (3, None)


# Text any API caller can put in the database (POST /jobs takes it as a queue, a job type, a
# tenant, a key): escape sequences that clear the screen, retitle the window or recolour it,
# a CR that rewrites the line, BEL, a C1 CSI, U+202E that shows text reversed, DEL, U+2028.
HOSTILE = {"esc": "\x1b[2J\x1b]0;pwned\x07q", "cr": "ok\rEVIL", "bel": "ding\x07",
           "rlo": "evil\u202etxt.exe", "c1": "csi\x9b31m", "mix": "\x1b[31mred\u2028\x7f"}


def raw_controls(text: str) -> list[str]:
    """The control and format characters in ``text`` (a terminal acts on them) other than
    the newlines of the layout."""
    import unicodedata

    return sorted({f"U+{ord(c):04X}" for c in text if c != "\n"
                   and unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")})


def test_no_command_lets_a_control_character_from_the_database_reach_the_terminal(
        database_url, conn, sql):
    names = list(HOSTILE.values())
    failed = [r.id for r in pgdrain.enqueue_many(conn, [
        {"job_type": name, "queue": name, "dedupe_key": name + "-failed"}
        for name in names[:2]])]
    claimed = pgdrain.claim(conn, batch_size=2, lease_seconds=60)
    assert sorted(job.id for job in claimed) == sorted(failed)
    for job in claimed:
        assert pgdrain.fail(conn, job, f"boom {HOSTILE['esc']}\nline 2 {HOSTILE['cr']}")
    ids = failed + [r.id for r in pgdrain.enqueue_many(conn, [
        {"job_type": name, "queue": name, "tenant": name, "ordering_key": name,
         "dedupe_key": name, "payload": {"note": name, name: [name]}} for name in names])]
    pgdrain.pause(conn, HOSTILE["esc"])
    pgdrain.pause(conn, HOSTILE["rlo"])
    pgdrain.set_queue(conn, HOSTILE["cr"], max_running=2, rate="5/min")
    sql("INSERT INTO pgdrain_schedules (name, last_tick, last_job_id) "
        "VALUES (:name, now(), 1)", name=HOSTILE["mix"])
    conn.run("SELECT pg_advisory_lock(:key::int, 1)", key=pgdrain.store.DRAIN_SLOT_LOCK_KEY)
    try:
        top = pgdrain_cli(database_url, "top", "--once")
    finally:
        conn.run("SELECT pg_advisory_unlock(:key::int, 1)",
                 key=pgdrain.store.DRAIN_SLOT_LOCK_KEY)
    runs = {("top", "--once"): top}
    reads = [["stats"], ["stats", "--json"], ["list"], ["list", "--json"],
             ["list", "--status", "failed"], ["schedules"], ["schedules", "--json"],
             ["purge", "--status", "failed", "--older-than", "0s"], ["janitor"]]
    reads += [["show", str(i), *json_flag] for i in ids for json_flag in ([], ["--json"])]
    # The CLI refuses C0 controls in a name it is given; the others it echoes back.
    for name in (HOSTILE["rlo"], HOSTILE["c1"]):
        reads += [["pause", name], ["resume", name], ["queue", "set", name, "--rate", "9/h"],
                  ["queue", "set", name, "--max-running", "3", "--json"],
                  ["pause", name + "-typo"], ["list", "--queue", name]]
    reads += [["cancel", str(ids[-1])], ["requeue", "--id", str(ids[0])]]
    for args in reads:
        runs[tuple(args)] = pgdrain_cli(database_url, *args)
    for args, result in runs.items():
        assert result.returncode in (0, 2), (args, result.stderr)
        assert raw_controls(result.stdout + result.stderr) == [], (args, result.stdout,
                                                                   result.stderr)
    # Shown escaped, not dropped: the operator sees what the name holds.
    stats = runs["stats",].stdout
    assert "\\x1b[2J\\x1b]0;pwned\\x07q" in stats and "evil\\u202etxt.exe" in stats
    assert "queue '\\x1b[2J\\x1b]0;pwned\\x07q' is PAUSED" in stats
    listed = json.loads(runs["list", "--json"].stdout)
    assert sorted(r["queue"] for r in listed) == sorted(names + names[:2])  # JSON keeps them
    assert "boom \\x1b[2J" in runs["list", "--status", "failed"].stdout
    shown = runs["show", str(failed[0])].stdout
    assert "line 2 ok\\rEVIL" in shown  # the error's own lines kept, its CR escaped
    assert runs["pause", HOSTILE["rlo"] + "-typo"].returncode == 2


def test_signal_from_the_shell_and_listing_what_jobs_wait_for(database_url, conn, sql):
    parent = pgdrain.enqueue(conn, "a").id
    child = pgdrain.enqueue(conn, "b", depends_on=[parent]).id
    waiting = sql("INSERT INTO jobs (job_type, payload, status, wait_signal, run_at) "
                  "VALUES ('c', '{}', 'waiting', 'confirm:42', now() + interval '1 hour') "
                  "RETURNING id")[0]["id"]
    listed = pgdrain_cli(database_url, "list", "--waiting-for", "signal", "--json")
    assert [r["id"] for r in json.loads(listed.stdout)] == [waiting]
    assert json.loads(listed.stdout)[0]["waits_for"] == "signal confirm:42"
    listed = pgdrain_cli(database_url, "list", "--waiting-for", "parents")
    assert "1 parent(s)" in listed.stdout and "confirm:42" not in listed.stdout
    assert [r["id"] for r in json.loads(pgdrain_cli(
        database_url, "list", "--waiting-for", "parents", "--json").stdout)] == [child]
    result = pgdrain_cli(database_url, "signal", "confirm:42", "--payload", '{"ok": true}',
                         "--keep", "1h")
    assert result.returncode == 0, result.stderr
    assert f"sent 'confirm:42': 1 job(s) due now ({waiting}); kept until" in result.stdout
    row = sql("SELECT status, wait_result FROM jobs WHERE id = :id", id=waiting)[0]
    assert row["status"] == "pending" and row["wait_result"]["payload"] == {"ok": True}
    shown = json.loads(pgdrain_cli(database_url, "show", str(waiting), "--json").stdout)
    assert shown["wait_result"]["received"] is True and shown["wait_signal"] is None
    refused = pgdrain_cli(database_url, "signal", "a\x01" * 300)
    assert refused.returncode == 1 and "name: must be 1 to 500 characters" in refused.stderr
    bad = pgdrain_cli(database_url, "signal", "x", "--payload", "{nope")
    assert bad.returncode == 2 and "not JSON" in bad.stderr


def test_show_wait_shows_the_finished_job_or_says_it_had_not_finished(database_url, conn):
    pending = pgdrain.enqueue(conn, "sync", {"contact": 1}).id
    cancelled = pgdrain.enqueue(conn, "sync", {"contact": 2}).id
    pgdrain.cancel(conn, [cancelled])
    done = pgdrain_cli(database_url, "show", str(cancelled), "--wait", "30", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "cancelled"
    late = pgdrain_cli(database_url, "show", str(pending), "--wait", "0.2", "--json")
    assert late.returncode == 3, late.stderr
    assert json.loads(late.stdout)["status"] == "pending"
    assert late.stderr.strip().splitlines()[-1] == \
        f"pgdrain show: job {pending} is still pending after 0.2 s"
    missing = pgdrain_cli(database_url, "show", "987654321", "--wait", "1")
    assert missing.returncode == 1
    bad = pgdrain_cli(database_url, "show", str(pending), "--wait", "901")
    assert bad.returncode == 2
    assert "a wait must be a number of seconds from 0 to 900, not '901'" in bad.stderr


def test_schedules_made_at_run_time_are_set_shown_paused_resumed_and_deleted(database_url,
                                                                             conn):
    made = pgdrain_cli(database_url, "schedule", "set", "report:customer-42", "--cron",
                       "0 9 * * mon-fri", "--tz", "Europe/Paris", "--type", "report",
                       "--payload", '{"customer": 42}', "--queue", "reports", "--json")
    assert made.returncode == 0, made.stderr
    entry = json.loads(made.stdout)
    assert (entry["name"], entry["cron"], entry["tz"], entry["payload"], entry["queue"],
            entry["source"], entry["paused"]) == (
        "report:customer-42", "0 9 * * mon-fri", "Europe/Paris", {"customer": 42}, "reports",
        "stored", False)
    changed = pgdrain_cli(database_url, "schedule", "set", "report:customer-42", "--cron",
                          "0 10 * * *", "--type", "report")
    assert changed.returncode == 0, changed.stderr
    assert changed.stdout.startswith("schedule 'report:customer-42' changed: 0 10 * * * (UTC), "
                                     "'report' to queue 'default'")
    paused = pgdrain_cli(database_url, "schedule", "pause", "report:customer-42")
    assert "paused: enqueues nothing until resumed" in paused.stdout
    listed = pgdrain_cli(database_url, "schedules")
    assert "stored" in listed.stdout and "(paused)" in listed.stdout
    rows = json.loads(pgdrain_cli(database_url, "schedules", "--json").stdout)
    assert [(r["name"], r["source"], r["paused"]) for r in rows] == [
        ("report:customer-42", "stored", True)]
    resumed = pgdrain_cli(database_url, "schedule", "resume", "report:customer-42", "--json")
    assert json.loads(resumed.stdout)["paused"] is False
    shown = pgdrain_cli(database_url, "schedule", "show", "report:customer-42")
    assert "next run 20" in shown.stdout
    gone = pgdrain_cli(database_url, "schedule", "delete", "report:customer-42")
    assert gone.stdout.strip() == ("schedule 'report:customer-42' deleted (the jobs it "
                                   "enqueued stay)")
    missing = pgdrain_cli(database_url, "schedule", "pause", "report:customer-42")
    assert missing.returncode == 2
    assert "no schedule stored at run time is named 'report:customer-42'" in missing.stderr


@pytest.mark.parametrize(("args", "words"), [
    (("--cron", "0 9 * *", "--type", "report"), "cron"),
    (("--cron", "0 9 * * *", "--type", "report", "--tz", "Mars/Base"), "unknown time zone"),
    (("--cron", "0 9 * * *", "--type", "report", "--payload", "[1]"), "JSON object"),
    (("--cron", "0 9 * * *"), "--type"),
])
def test_a_schedule_the_cli_cannot_make_is_refused_saying_why(database_url, conn, args, words):
    refused = pgdrain_cli(database_url, "schedule", "set", "r", *args)
    assert refused.returncode == 2 and words in refused.stderr, refused.stderr
    assert conn.run("SELECT count(*) FROM pgdrain_schedules") == [[0]]
