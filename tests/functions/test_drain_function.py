"""The drain function, fed the files in events/ against a real PostgreSQL."""

from __future__ import annotations

import json
import signal
import socket
import sys
import time
from urllib.parse import urlsplit

import pytest

import pgdrain
from pgdrain_dev.context import LambdaContext
from tests.support.functions import load_event, summary_of

COUNTS = ("reclaimed", "claimed", "done", "retried", "failed", "released")


def test_scheduled_event_drains_and_returns_the_summary(load_function, conn):
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 3 + [{"job_type": "test-boom"}])
    app = load_function("drain")
    summary = app.lambda_handler(load_event("drain_schedule.json"), LambdaContext())
    assert {k: summary[k] for k in COUNTS} == {
        "reclaimed": 0, "claimed": 4, "done": 3, "retried": 1, "failed": 0, "released": 0}
    assert all(isinstance(summary[k], int) for k in COUNTS)
    assert pgdrain.stats(conn).counts == {"default": {"done": 3, "pending": 1}}


def test_at_the_shipped_retention_done_jobs_leave_no_row_and_stats_still_count_them(
        load_function, conn, monkeypatch):
    monkeypatch.delenv("PGDRAIN_RETENTION_SECONDS")  # the template's default: 0
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 3 + [{"job_type": "test-boom"}])
    app = load_function("drain")
    summary = app.lambda_handler(load_event("drain_schedule.json"), LambdaContext())
    assert (summary["claimed"], summary["done"], summary["retried"]) == (4, 3, 1)
    assert pgdrain.stats(conn).counts == {"default": {"pending": 1}}
    from pgdrain.store import overview
    [noop] = [r for r in overview(conn) if r["job_type"] == "test-noop"]
    assert (noop["done_last_minute"], noop["done_last_hour"]) == (3, 3)


def test_api_event_returns_the_summary_as_a_200_json_body(load_function, conn):
    pgdrain.enqueue(conn, "test-noop")
    app = load_function("drain")
    response = app.lambda_handler(load_event("drain_api.json"), LambdaContext())
    assert response["statusCode"] == 200
    assert response["headers"]["Content-Type"] == "application/json"
    body = json.loads(response["body"])
    assert (body["claimed"], body["done"]) == (1, 1)


def test_api_event_with_another_method_is_refused(load_function, conn):
    pgdrain.enqueue(conn, "test-noop")
    app = load_function("drain")
    response = app.lambda_handler({**load_event("drain_api.json"), "httpMethod": "GET"},
                                  LambdaContext())
    assert response["statusCode"] == 405
    assert pgdrain.stats(conn).counts == {"default": {"pending": 1}}


def test_direct_invoke(load_function, conn):
    pgdrain.enqueue(conn, "test-noop")
    app = load_function("drain")
    summary = app.lambda_handler(load_event("drain_direct.json"), LambdaContext())
    assert summary["done"] == 1


def test_deadline_releases_unstarted_jobs_and_returns_in_time(load_function, conn, sql):
    # Fast jobs first, so the drain's pace says "claim a full batch": the batch then holds
    # 1-second jobs (5 s budgets) that the 7 s invocation cannot all start.
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 3
                         + [{"job_type": "test-sleep", "payload": {"seconds": 1}}] * 6)
    app = load_function("drain", PGDRAIN_SAFETY_MARGIN_SECONDS="0.5", PGDRAIN_BATCH_SIZE="6",
                        PGDRAIN_CONCURRENCY="1")
    sql("UPDATE jobs SET run_at = now() - interval '1 second'")
    context = LambdaContext(timeout_seconds=7)
    summary = app.lambda_handler({}, context)
    assert context.get_remaining_time_in_millis() > 0  # it returned before its deadline
    assert summary["released"] > 0
    assert summary["done"] + summary["released"] == summary["claimed"]
    assert summary["stopped"] == "deadline"
    rows = sql("SELECT status, attempts FROM jobs")
    assert not [r for r in rows if r["status"] == "running"]
    assert sorted((r["status"], r["attempts"]) for r in rows) == sorted(
        [("done", 1)] * summary["done"] + [("pending", 0)] * (9 - summary["done"]))


def test_two_seconds_left_with_one_second_jobs(load_function, conn, sql):
    pgdrain.enqueue_many(conn, [{"job_type": "test-sleep", "payload": {"seconds": 1}}] * 5)
    app = load_function("drain", PGDRAIN_SAFETY_MARGIN_SECONDS="0.2",
                        PGDRAIN_JOB_TIMEOUT_SECONDS="1", PGDRAIN_BATCH_SIZE="5",
                        PGDRAIN_CONCURRENCY="1")
    context = LambdaContext(timeout_seconds=2)
    summary = app.lambda_handler({}, context)
    assert context.get_remaining_time_in_millis() > 0
    assert summary["released"] > 0
    assert sql("SELECT count(*) AS n FROM jobs WHERE status = 'running'")[0]["n"] == 0


def test_a_budget_longer_than_the_function_can_give_does_not_block_the_queue(
        load_function, conn, sql, capsys):
    # test-long declares 300 s; this function has 10. Released every time, it would sit at the
    # head of the queue for ever: it runs with the time left, as long as that is at least half
    # of what the invocation could ever give it (the whole of it for the first job).
    ids = [j.id for j in pgdrain.enqueue_many(conn, [
        {"job_type": "test-long", "payload": {"seconds": 0.1}},
        {"job_type": "test-long", "payload": {"seconds": 0.1}},
        {"job_type": "test-noop"}])]
    app = load_function("drain", PGDRAIN_SAFETY_MARGIN_SECONDS="1")
    first = app.lambda_handler({}, LambdaContext(timeout_seconds=10))
    assert (first["done"], first["released"], first["stopped"]) == (3, 0, "empty")
    # The library's warning, in the function's JSON log.
    log = capsys.readouterr().out
    assert log.count("(test-long) has a 300 s time budget but this invocation has") == 1
    rows = sql("SELECT id, status, attempts FROM jobs ORDER BY id")
    assert [(r["id"], r["status"], r["attempts"]) for r in rows] == [
        (ids[0], "done", 1), (ids[1], "done", 1), (ids[2], "done", 1)]


def test_a_job_cut_short_after_the_first_gets_half_of_what_the_invocation_could_give(
        load_function, conn, sql):
    # 4 s, margin 0.2: 3.8 s usable. The first 300-s job takes 2 s; the second would start
    # with 1.7 s, less than half of 3.8: released for an invocation of its own.
    pgdrain.enqueue_many(conn, [{"job_type": "test-long", "payload": {"seconds": 2}}] * 2)
    app = load_function("drain", PGDRAIN_SAFETY_MARGIN_SECONDS="0.2", PGDRAIN_CONCURRENCY="1")
    summary = app.lambda_handler({}, LambdaContext(timeout_seconds=4))
    assert (summary["done"], summary["released"], summary["stopped"]) == (1, 1, "deadline")
    assert sorted((r["status"], r["attempts"]) for r in sql("SELECT * FROM jobs")) == [
        ("done", 1), ("pending", 0)]


def test_a_function_shorter_than_every_budget_still_drains(conn, sql, database_url):
    # Only a 30 s budget is registered and the function has 10 s: jobs run anyway, with the
    # time there is, instead of nothing ever being claimed.
    from pgdrain.db import Connector, connect
    from pgdrain.drain import drain
    from pgdrain.registry import Handler, Registry

    ran = []
    registry = Registry()
    registry.register(Handler("slow-type", ran.append, timeout=30))
    pgdrain.enqueue_many(conn, [{"job_type": "slow-type"}] * 2)
    connector = Connector(lambda timeout=None: connect(database_url, timeout=timeout))
    settings = pgdrain.Settings(safety_margin_seconds=2)  # done rows not kept, as shipped
    try:
        deadline = time.monotonic() + 10
        summary = drain(connector, registry, settings,
                        time_left=lambda d=deadline: d - time.monotonic())
        assert (summary.done, summary.released, summary.stopped) == (2, 0, "empty"), summary
    finally:
        connector.discard()
    assert len(ran) == 2
    assert sql("SELECT status FROM jobs") == []


# SystemExit passes the function's error metric by; Powertools then warns of an empty flush.
@pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")
def test_a_drain_stopped_mid_batch_hands_back_the_jobs_it_never_started(
        load_function, conn, sql):
    ids = [j.id for j in pgdrain.enqueue_many(conn, [
        {"job_type": "test-noop"}, {"job_type": "test-exit"}, {"job_type": "test-noop"},
        {"job_type": "test-noop"}])]
    # One at a time, on the drain's thread, SystemExit stops the drain (on a worker thread
    # it is the job's failure: tests/unit/test_drain_concurrent.py).
    app = load_function("drain", PGDRAIN_CONCURRENCY="1")
    with pytest.raises(SystemExit):
        app.lambda_handler({}, LambdaContext())
    rows = {r["id"]: (r["status"], r["attempts"]) for r in sql("SELECT * FROM jobs")}
    # Done is recorded, the job that stopped the drain waits for its lease, the rest are
    # pending again with their attempt refunded (not left running to lose it to the janitor).
    assert rows == {ids[0]: ("done", 1), ids[1]: ("running", 1), ids[2]: ("pending", 0),
                    ids[3]: ("pending", 0)}


@pytest.mark.parametrize("seconds", ["inf", "nan", 1e17])
def test_an_impossible_snooze_is_that_attempts_failure(load_function, conn, sql, seconds):
    snoozer = pgdrain.enqueue(conn, "test-snooze", {"seconds": seconds}).id
    after = pgdrain.enqueue(conn, "test-noop").id
    summary = load_function("drain").lambda_handler({}, LambdaContext())
    assert (summary["retried"], summary["done"]) == (1, 1)
    rows = {r["id"]: r for r in sql("SELECT id, status, last_error FROM jobs")}
    assert rows[snoozer]["status"] == "pending"
    assert rows[snoozer]["last_error"].startswith(
        "ValueError: Snooze delay_seconds must be at most 315360000 (ten years)")
    assert rows[after]["status"] == "done"


def test_a_transactional_job_whose_commit_fails_is_retried(load_function, conn, sql):
    sql("CREATE TABLE parents (id bigint PRIMARY KEY)")
    sql("CREATE TABLE children (parent bigint REFERENCES parents "
        "DEFERRABLE INITIALLY DEFERRED)")
    orphan = pgdrain.enqueue(conn, "test-orphan").id
    after = pgdrain.enqueue(conn, "test-noop").id
    summary = load_function("drain").lambda_handler({}, LambdaContext())
    assert (summary["retried"], summary["done"]) == (1, 1)
    rows = {r["id"]: r for r in sql("SELECT id, status, last_error FROM jobs")}
    assert rows[orphan]["status"] == "pending" and "23503" in rows[orphan]["last_error"]
    assert rows[after]["status"] == "done"
    assert sql("SELECT count(*) AS n FROM children")[0]["n"] == 0


def test_a_transactional_handler_stopped_mid_statement_leaves_no_lock_behind(
        load_function, conn, sql, connect_to):
    # The handler's connection is dropped when its time limit stops it inside pg_sleep; the
    # server must not run that statement on for a minute, holding the row lock it took.
    sql("CREATE TABLE holds (id int PRIMARY KEY, n int)")
    sql("INSERT INTO holds VALUES (1, 0)")
    job_id = pgdrain.enqueue(conn, "test-hold").id
    summary = load_function("drain").lambda_handler({}, LambdaContext())
    assert summary["retried"] == 1
    [row] = sql("SELECT last_error FROM jobs WHERE id = :id", id=job_id)
    assert row["last_error"] == "HandlerTimeout: test-hold timed out after 1 s"
    other = connect_to()
    other.run("SET lock_timeout = '20s'")
    other.run("UPDATE holds SET n = n + 10 WHERE id = 1")  # 55P03 if the lock were still held
    assert sql("SELECT n FROM holds")[0]["n"] == 10  # and the handler's update rolled back


def test_max_jobs_bounds_one_invocation(load_function, conn):
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 7)
    app = load_function("drain", PGDRAIN_MAX_JOBS="5", PGDRAIN_BATCH_SIZE="2")
    summary = app.lambda_handler({}, LambdaContext())
    assert (summary["claimed"], summary["done"], summary["stopped"]) == (5, 5, "max_jobs")
    assert app.lambda_handler({}, LambdaContext())["done"] == 2


def test_handler_outcomes(load_function, conn, sql, tmp_path):
    marker = tmp_path / "marker"
    ids = {job_type: pgdrain.enqueue(conn, job_type, payload).id for job_type, payload in [
        ("test-boom", {}), ("test-snooze", {"seconds": 120}), ("test-discard", {}),
        ("test-overrun", {"marker": str(marker)}), ("no-such-type", {})]}
    app = load_function("drain")
    summary = app.lambda_handler({}, LambdaContext())
    assert {k: summary[k] for k in ("retried", "snoozed", "failed", "done")} == {
        "retried": 2, "snoozed": 1, "failed": 2, "done": 0}
    rows = {r["id"]: r for r in sql("SELECT id, status, attempts, last_error, "
                                    "run_at > now() + interval '100 seconds' AS later "
                                    "FROM jobs")}
    assert rows[ids["test-boom"]]["last_error"] == "ValueError: boom on attempt 1"
    assert rows[ids["test-boom"]]["status"] == "pending"
    snoozed = rows[ids["test-snooze"]]
    assert (snoozed["status"], snoozed["attempts"], snoozed["later"]) == ("pending", 0, True)
    assert rows[ids["test-discard"]]["status"] == "failed"
    assert rows[ids["test-discard"]]["last_error"] == "Discard: the customer no longer exists"
    overrun = rows[ids["test-overrun"]]
    assert overrun["status"] == "pending"
    assert overrun["last_error"] == "HandlerTimeout: test-overrun timed out after 0.5 s"
    assert rows[ids["no-such-type"]]["status"] == "failed"
    assert rows[ids["no-such-type"]]["last_error"] == (
        "no handler registered for job_type 'no-such-type'")
    time.sleep(2)
    assert not marker.exists()  # the overrunning handler was stopped, not left running


def test_lease_must_outlast_the_function_timeout(load_function, conn):
    app = load_function("drain", PGDRAIN_LEASE_SECONDS="30")
    with pytest.raises(pgdrain.ConfigError, match="PGDRAIN_LEASE_SECONDS"):
        app.lambda_handler({}, LambdaContext(timeout_seconds=60))


def test_transactional_handler_commits_with_done_and_rolls_back_with_failure(
        load_function, conn, sql):
    sql("CREATE TABLE side_effects (job_id bigint, attempt int)")
    ok = pgdrain.enqueue(conn, "test-record", {}).id
    bad = pgdrain.enqueue(conn, "test-record", {"fail": True}).id
    app = load_function("drain")
    summary = app.lambda_handler({}, LambdaContext())
    assert (summary["done"], summary["retried"]) == (1, 1)
    assert sql("SELECT job_id, attempt FROM side_effects") == [{"job_id": ok, "attempt": 1}]
    statuses = {r["id"]: r["status"] for r in sql("SELECT id, status FROM jobs")}
    assert statuses == {ok: "done", bad: "pending"}


def test_transactional_handler_with_a_lost_claim_writes_nothing(load_function, conn, sql):
    sql("CREATE TABLE side_effects (job_id bigint, attempt int)")
    # A trigger makes the job look reclaimed by someone else as the handler writes: its done
    # write then finds a different lease token, and the handler's row must roll back with it.
    sql("""CREATE FUNCTION steal() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN UPDATE jobs SET lease_token = gen_random_uuid() WHERE id = NEW.job_id;
           RETURN NEW; END $$""")
    sql("CREATE TRIGGER steal AFTER INSERT ON side_effects FOR EACH ROW EXECUTE FUNCTION steal()")
    pgdrain.enqueue(conn, "test-record", {})
    app = load_function("drain")
    summary = app.lambda_handler({}, LambdaContext())
    assert (summary["done"], summary["stale"]) == (0, 1)
    assert sql("SELECT count(*) AS n FROM side_effects")[0]["n"] == 0


def test_warm_invocations_reuse_the_connection_and_replace_a_dead_one(load_function, conn, sql):
    app = load_function("drain")
    app.lambda_handler({}, LambdaContext())
    first = app.CONNECTOR.session().conn
    app.lambda_handler({}, LambdaContext())
    assert app.CONNECTOR.session().conn is first
    [backend] = first.run("SELECT pg_backend_pid()")[0]
    sql("SELECT pg_terminate_backend(:pid)", pid=backend)
    pgdrain.enqueue(conn, "test-noop")
    summary = app.lambda_handler({}, LambdaContext())
    assert summary["done"] == 1
    assert app.CONNECTOR.session().conn is not first


def test_logs_and_metrics(load_function, conn, capsys, database_url):
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}, {"job_type": "test-boom"}])
    app = load_function("drain")
    capsys.readouterr()
    app.lambda_handler({}, LambdaContext(request_id="req-123"))
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # Done jobs are logged a batch to a line, grouped by queue and type; other outcomes one
    # line each.
    jobs = [r for r in lines if r.get("job_id")]
    jobs += [{"job_id": job_id, "job_type": group["job_type"], "queue": group["queue"],
              "attempt": attempt, "duration_ms": duration, "outcome": r["outcome"],
              "correlation_id": r["correlation_id"]}
             for r in lines if r.get("message") == "jobs done" for group in r["jobs"]
             for job_id, attempt, duration in zip(group["job_ids"], group["attempts"],
                                                  group["duration_ms"], strict=True)]
    assert {(r["job_type"], r["outcome"], r["attempt"]) for r in jobs} == {
        ("test-noop", "done", 1), ("test-boom", "retried", 1)}
    assert all(r["correlation_id"] == "req-123" and "duration_ms" in r for r in jobs)
    [emf] = [r for r in lines if "_aws" in r and "queue" not in r]  # per queue: apart
    names = {m["Name"] for m in emf["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert {"JobsClaimed", "JobsDone", "JobsRetried", "JobsFailed", "LeasesReclaimed",
            "JobsReleased", "StaleWrites", "JobDuration", "QueueLag", "Backlog",
            "OldestDueAge", "JobsTableBytes", "JobsDeadRows"} <= names
    assert emf["JobsTableBytes"][0] > 0 and emf["JobsDeadRows"][0] >= 0
    assert (emf["JobsClaimed"], emf["JobsDone"], emf["JobsRetried"]) == ([2.0], [1.0], [1.0])
    [finished] = [r for r in lines if r.get("message") == "drain finished"]
    assert finished["pgdrain_version"] == pgdrain.__version__


def test_a_drain_of_many_jobs_logs_each_done_job_and_samples_a_hundred_values(
        load_function, conn, capsys):
    # Done jobs are grouped by queue and type in their lines; the per-job metrics are a
    # sample of 100 values in one EMF document, the counts exact.
    ids = pgdrain.enqueue_many(conn, [{"job_type": "test-noop", "queue": f"q{i % 2}"}
                                      for i in range(150)])
    app = load_function("drain")
    capsys.readouterr()
    summary = app.lambda_handler({}, LambdaContext())
    assert summary["done"] == 150
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    done = [r for r in lines if r.get("message") == "jobs done"]
    logged = {(group["queue"], job_id) for r in done for group in r["jobs"]
              for job_id in group["job_ids"]}
    assert sum(r["done"] for r in done) == 150
    assert all(len(g["job_ids"]) == len(g["attempts"]) == len(g["duration_ms"])
               for r in done for g in r["jobs"])
    assert {q for q, _ in logged} == {"q0", "q1"}
    assert logged == {(f"q{i % 2}", r.id) for i, r in enumerate(ids)}
    documents = [r for r in lines if "_aws" in r]
    values = {}
    for document in documents:
        for name in ("JobDuration", "QueueLag", "JobsDone"):
            if name in document:
                found = document[name]
                values.setdefault(name, []).extend(found if isinstance(found, list)
                                                   else [found])
    assert len(values["JobDuration"]) == len(values["QueueLag"]) == 100
    assert sum(values["JobsDone"]) == 150


def test_no_secret_in_logs_or_metrics(load_function, conn, capsys, database_url, monkeypatch):
    # Trust authentication ignores the password, so the drain runs with it in DATABASE_URL.
    secret = "s3cret-Pw-in-url"
    parts = urlsplit(database_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    with_password = parts._replace(netloc=f"postgres:{secret}@{host}").geturl()
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}, {"job_type": "test-boom"}])
    app = load_function("drain", DATABASE_URL=with_password)
    app.lambda_handler(load_event("drain_schedule.json"), LambdaContext())
    app.CONNECTOR.discard()
    monkeypatch.setenv("DATABASE_URL", with_password.replace("/pgdrain_t_", "/missing_"))
    broken = load_function("drain")
    summary = broken.lambda_handler({}, LambdaContext())
    assert (summary["stopped"], summary["error"]) == ("database_error",
                                                      "could not connect to the database")
    response = broken.lambda_handler(load_event("drain_api.json"), LambdaContext())
    assert response["statusCode"] == 503
    captured = capsys.readouterr()
    assert "could not connect to" in captured.out  # the details are in the log
    assert secret not in captured.out + captured.err + response["body"] + json.dumps(summary)


def test_killed_mid_job_is_reclaimed_and_finished_by_a_later_drain(drain_process, conn, sql):
    job_id = pgdrain.enqueue(conn, "test-sleep", {"seconds": 30, "on_attempts": [1]}).id
    process = drain_process(10, PGDRAIN_LEASE_SECONDS="60", PGDRAIN_BACKOFF_BASE_SECONDS="0",
                            PGDRAIN_JOB_TIMEOUT_SECONDS="5")
    for _ in range(200):
        if sql("SELECT status FROM jobs WHERE id = :id", id=job_id)[0]["status"] == "running":
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert sql("SELECT status FROM jobs WHERE id = :id", id=job_id)[0]["status"] == "running"

    sql("UPDATE jobs SET lease_expires_at = now() - interval '1 second'")  # the lease runs out
    # The same attempt runs again (it was never charged): this time it does not hang.
    sql("UPDATE jobs SET payload = '{\"seconds\": 0}'")
    summary = summary_of(drain_process(10, PGDRAIN_LEASE_SECONDS="60",
                                       PGDRAIN_BACKOFF_BASE_SECONDS="0"))
    assert (summary["reclaimed"], summary["reclaimed_refunded"], summary["done"]) == (1, 1, 1)
    # No start was recorded when the drain died: the attempt was given back, not charged.
    [row] = sql("SELECT status, attempts, lost_claims, last_error FROM jobs")
    assert (row["status"], row["attempts"], row["lost_claims"], row["last_error"]) == (
        "done", 1, 1, None)


def test_a_job_that_ran_a_while_is_recorded_done_before_the_next_one_starts(
        drain_process, conn, sql):
    # The next job kills the process; the one before it, which took longer than the done
    # writes are ever held, must not come back to run again (or fail out of attempts).
    first = pgdrain.enqueue(conn, "test-sleep", {"seconds": 0.2}, max_attempts=1).id
    pgdrain.enqueue(conn, "test-kill")
    # (One at a time: with many at once, a process kill takes every job in flight, and each
    # comes back uncharged, see test_drain_concurrency.py.)
    drain_process(10, PGDRAIN_BATCH_SIZE="2", PGDRAIN_CONCURRENCY="1").wait(timeout=60)
    assert sql("SELECT status FROM jobs WHERE id = :id", id=first)[0]["status"] == "done"


def test_a_job_that_kills_every_drain_ends_failed(drain_process, conn, sql):
    # The first death is not charged (no start was recorded); the drains then record its
    # start before running it, and charge each death: failed after max_attempts.
    pgdrain.enqueue(conn, "test-kill")  # max_attempts=2 from its handler's declaration
    codes = []
    for _ in range(3):
        process = drain_process(10, PGDRAIN_LEASE_SECONDS="60",
                                PGDRAIN_BACKOFF_BASE_SECONDS="0")
        codes.append(process.wait(timeout=60))
        sql("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
            "WHERE status = 'running'")
    assert codes == [-signal.SIGKILL] * 3
    last = summary_of(drain_process(10, PGDRAIN_LEASE_SECONDS="60"))
    assert (last["reclaimed"], last["reclaimed_failed"], last["claimed"]) == (1, 1, 0)
    [row] = sql("SELECT status, attempts, lost_claims, errors FROM jobs")
    assert (row["status"], row["attempts"], row["lost_claims"]) == ("failed", 2, 1)
    assert [e["error"][:13] for e in row["errors"]] == ["lease expired"] * 2


def test_handler_receives_the_parsed_payload_model(load_function, conn, sql):
    ok = pgdrain.enqueue(conn, "test-typed", {"to": "sarah"}).id
    # Plain SQL can insert a payload the model rejects: it is discarded with the reason.
    [bad] = sql("""INSERT INTO jobs (job_type, payload) VALUES ('test-typed', '{"to": 7}')
                   RETURNING id""")
    app = load_function("drain")
    summary = app.lambda_handler({}, LambdaContext())
    assert (summary["done"], summary["failed"]) == (1, 1)
    rows = {r["id"]: r for r in sql("SELECT id, status, last_error FROM jobs")}
    assert rows[ok]["status"] == "done"
    assert (rows[bad["id"]]["status"], rows[bad["id"]]["last_error"]) == (
        "failed", "Discard: invalid payload: payload.to: must be a string")


def test_library_enqueue_checks_the_payload_model(load_function, conn, sql):
    load_function("drain")  # registers the test job types, as importing a job module would
    with pytest.raises(pgdrain.InvalidJobError, match=r"payload\.to: must be a string"):
        pgdrain.enqueue(conn, "test-typed", {"to": 7})
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 0


def test_without_prepared_statements_the_drain_leaves_no_session_state(load_function, conn):
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 3)
    app = load_function("drain", PGDRAIN_PREPARED_STATEMENTS="false", PGDRAIN_BATCH_SIZE="1")
    assert app.lambda_handler({}, LambdaContext())["done"] == 3
    drain_conn = app.CONNECTOR.session().conn
    assert drain_conn.run("SELECT count(*) FROM pg_prepared_statements") == [[0]]
    assert drain_conn.run("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                          "AND pid = pg_backend_pid()") == [[0]]
    # With them (the default), each statement is prepared once and reused.
    prepared = load_function("drain", PGDRAIN_PREPARED_STATEMENTS="true")
    prepared.lambda_handler({}, LambdaContext())
    assert prepared.CONNECTOR.session().conn.run(
        "SELECT count(*) FROM pg_prepared_statements")[0][0] > 0


def test_the_drain_vacuums_jobs_when_dead_rows_pile_up(load_function, conn, sql):
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 200)
    app = load_function("drain", PGDRAIN_VACUUM_DEAD_TUPLES="100",
                        PGDRAIN_VACUUM_INTERVAL_SECONDS="0")
    assert app.lambda_handler({}, LambdaContext())["done"] == 200
    app.CONNECTOR.session().conn.run("SELECT pg_stat_force_next_flush()")
    app.CONNECTOR.session().conn.run("SELECT 1")
    summary = app.lambda_handler({}, LambdaContext())  # prepared statements: VACUUM too
    assert summary["vacuumed"] == 1
    assert sql("SELECT last_vacuum IS NOT NULL AS v FROM pg_stat_user_tables "
               "WHERE relname = 'jobs'")[0]["v"]


def test_tracing_sends_the_drain_to_the_xray_daemon(drain_process, conn, tmp_path):
    # In its own process: the Tracer patches botocore and friends process-wide.
    pgdrain.enqueue(conn, "test-noop")
    daemon = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    daemon.bind(("127.0.0.1", 0))
    daemon.settimeout(10)
    trace_id = "1-5759e988-bd862e3fe1be46a994272793"
    process = drain_process(
        10, PGDRAIN_TRACING="true", LAMBDA_TASK_ROOT=str(tmp_path),
        AWS_XRAY_DAEMON_ADDRESS=f"127.0.0.1:{daemon.getsockname()[1]}",
        _X_AMZN_TRACE_ID=f"Root={trace_id};Parent=53995c3f42cd8ad8;Sampled=1")
    assert summary_of(process)["done"] == 1
    documents = []
    with daemon:
        while not any(d.get("name", "").startswith("## ") for d in documents):
            header, _, body = daemon.recv(65536).decode().partition("\n")
            assert json.loads(header) == {"format": "json", "version": 1}
            documents.append(json.loads(body))
    handler = next(d for d in documents if d["name"].startswith("## "))
    assert handler["trace_id"] == trace_id
    assert handler["annotations"]["ColdStart"] is True


def test_a_three_second_function_drains(load_function, conn, sql):
    # Lambda's default timeout. A fixed 2 s margin left less than the second the first job
    # needs, and every invocation claimed nothing; the margin now scales with the time left.
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 3)
    context = LambdaContext(timeout_seconds=3)
    summary = load_function("drain").lambda_handler({}, context)
    assert (summary["claimed"], summary["done"], summary["stopped"]) == (3, 3, "empty")
    assert context.get_remaining_time_in_millis() > 0


def test_a_function_too_short_to_run_any_job_says_so_once(load_function, conn, capsys):
    pgdrain.enqueue(conn, "test-noop")
    app = load_function("drain")
    capsys.readouterr()
    first = app.lambda_handler({}, LambdaContext(timeout_seconds=0.5))
    second = app.lambda_handler({}, LambdaContext(timeout_seconds=0.5))
    assert [s["claimed"] for s in (first, second)] == [0, 0]
    errors = [json.loads(line) for line in capsys.readouterr().out.splitlines()
              if '"level":"ERROR"' in line]
    assert len(errors) == 1, errors  # at the container's first invocation only
    assert "cannot run any job" in errors[0]["message"]
    assert "raise the function's timeout" in errors[0]["message"]


def test_the_dead_letter_metric_counts_the_janitors_failures(load_function, conn, capsys):
    # A job whose start was recorded, out of attempts when its drain died: the janitor fails
    # it, and JobsFailed (which the dead-letter alarm watches) counts it.
    pgdrain.enqueue(conn, "test-noop", max_attempts=1)
    conn.run("UPDATE jobs SET lost_claims = 1")  # so its claim records its start
    pgdrain.store.claim_alone(conn, lease_seconds=60)
    conn.run("UPDATE jobs SET lease_expires_at = now() - interval '1 second'")
    app = load_function("drain")
    capsys.readouterr()
    summary = app.lambda_handler({}, LambdaContext())
    assert (summary["reclaimed_failed"], summary["failed"]) == (1, 0)
    [emf] = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if '"_aws"' in line and '"QueueBacklog"' not in line]
    assert emf["JobsFailed"] == [1.0] and emf["LeasesRefunded"] == [0.0]


@pytest.mark.parametrize("payload", [{"once": True}, {}])
def test_a_handler_that_swallows_its_timeout_is_stopped_and_recorded_as_timed_out(
        load_function, conn, sql, payload):
    # test-swallow catches BaseException around a sleep: once then returns, or for ever.
    swallower = pgdrain.enqueue(conn, "test-swallow", payload).id
    after = pgdrain.enqueue(conn, "test-noop").id
    context = LambdaContext(timeout_seconds=10)
    started = time.monotonic()
    summary = load_function("drain").lambda_handler({}, context)
    assert time.monotonic() - started < 3  # 0.5 s budget, 0.2 s grace, then it is made to stop
    assert (summary["retried"], summary["done"]) == (1, 1), summary
    rows = {r["id"]: r for r in sql("SELECT id, status, last_error FROM jobs")}
    assert rows[swallower]["status"] == "pending"
    assert rows[swallower]["last_error"] == "HandlerTimeout: test-swallow timed out after 0.5 s"
    assert rows[after]["status"] == "done"
    assert sys.gettrace() is None  # the drain's tracing is gone with the handler


def test_a_drain_reads_no_table_in_full(load_function, conn, sql):
    # With a history of done jobs, nothing the drain runs (janitor, claim, finishing writes,
    # the metrics' backlog) scans the jobs table: the old stats() GROUP BY after every drain did.
    sql("INSERT INTO jobs (job_type, status, finished_at) "
        "SELECT 'old', 'done', now() FROM generate_series(1, 30000)")
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 5)
    sql("VACUUM ANALYZE jobs")
    app = load_function("drain")
    app.lambda_handler({}, LambdaContext())  # connect and prepare: nothing to do but once

    def seq_scans() -> int:
        sql("SELECT pg_stat_force_next_flush()")
        return sql("SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'jobs'")[0][
            "seq_scan"]

    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 5)
    before = seq_scans()
    summary = app.lambda_handler({}, LambdaContext())
    app.CONNECTOR.session().conn.run("SELECT pg_stat_force_next_flush()")
    assert summary["done"] == 5
    assert seq_scans() == before


def test_a_run_at_of_minus_infinity_leaves_the_drain_and_its_metrics_working(
        load_function, conn, sql, capsys):
    # Plain SQL may store '-infinity': now() minus it cannot be computed, and the backlog
    # query failed every drain after its work, in a queue it was not even draining.
    sql("INSERT INTO jobs (job_type, queue, run_at) VALUES ('test-noop', 'other', '-infinity')")
    pgdrain.enqueue(conn, "test-noop")
    app = load_function("drain", PGDRAIN_QUEUES="default")
    capsys.readouterr()
    response = app.lambda_handler(load_event("drain_api.json"), LambdaContext())
    assert response["statusCode"] == 200, response["body"]
    [emf] = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if '"_aws"' in line and '"QueueBacklog"' not in line]
    assert emf["Backlog"] == [1.0] and emf["OldestDueAge"][0] > 6e10  # from year 1
    assert pgdrain.stats(conn).oldest_due_seconds > 6e10


def test_the_library_logs_as_the_function_json_with_the_correlation_id(load_function, conn,
                                                                        capsys):
    # A 300-s job in a 10-s function: pgdrain.drain warns (a stdlib logger in the library).
    pgdrain.enqueue(conn, "test-long", {"seconds": 0})
    app = load_function("drain")
    context = LambdaContext(timeout_seconds=10)
    assert app.lambda_handler({}, context)["done"] == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if line.startswith("{")]
    library = [line for line in lines if line.get("name") == "pgdrain.drain"]
    assert [line["level"] for line in library] == ["WARNING"]
    assert library[0]["correlation_id"] == context.aws_request_id
    assert library[0]["service"] == app.logger.service


def test_expired_jobs_are_counted_and_never_run(load_function, conn, sql, capsys):
    ident = pgdrain.enqueue(conn, "test-noop", ttl_seconds=60).id
    sql("UPDATE jobs SET expires_at = now() - interval '1 second' WHERE id = :id", id=ident)
    app = load_function("drain")
    capsys.readouterr()
    summary = app.lambda_handler({}, LambdaContext())
    assert (summary["expired"], summary["claimed"], summary["done"]) == (1, 0, 0)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if line.startswith("{")]
    [emf] = [r for r in lines if "_aws" in r and "queue" not in r]  # per queue: apart
    assert (emf["JobsExpired"], emf["JobsFailed"]) == ([1.0], [1.0])
    assert pgdrain.get_job(conn, ident)["last_error"] == "expired"


def test_a_paused_queue_waits_and_the_metric_says_so(load_function, conn, capsys):
    held = pgdrain.enqueue(conn, "test-noop", queue="emails").id
    ran = pgdrain.enqueue(conn, "test-noop").id
    pgdrain.pause(conn, "emails")
    app = load_function("drain")
    capsys.readouterr()
    summary = app.lambda_handler(load_event("drain_schedule.json"), LambdaContext())
    assert (summary["claimed"], summary["done"]) == (1, 1)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if line.startswith("{")]
    [emf] = [r for r in lines if "_aws" in r and "queue" not in r]  # per queue: apart
    # The paused queue's job waits on purpose: it counts apart, and the oldest-due alarm's
    # metric leaves it out.
    assert (emf["QueuesPaused"], emf["Backlog"], emf["PausedBacklog"]) == ([1.0], [0.0], [1.0])
    assert emf["OldestDueAge"] == [0.0]
    [queue] = [r for r in lines if "_aws" in r and "queue" in r]
    assert (queue["queue"], queue["paused"], queue["QueueBacklog"]) == ("emails", True, 1)
    assert queue["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service", "queue"]]
    assert (pgdrain.get_job(conn, held)["status"], pgdrain.get_job(conn, ran)["status"]) == (
        "pending", "done")


def test_each_queue_has_its_own_backlog_metrics_the_longest_waits_first(
        load_function, conn, sql, capsys):
    """One busy queue cannot hide another: each queue's due jobs and oldest wait go out with a
    queue dimension, at most PGDRAIN_METRIC_QUEUES of them, the longest waits first."""
    for queue, age in (("reports", 300), ("emails", 60), ("webhooks", 5)):
        pgdrain.enqueue(conn, "test-noop", queue=queue)
        sql("UPDATE jobs SET run_at = now() - make_interval(secs => :age) WHERE queue = :q",
            age=age, q=queue)
    pgdrain.pause(conn, "reports")
    pgdrain.pause(conn, "emails")
    pgdrain.pause(conn, "webhooks")
    app = load_function("drain", PGDRAIN_METRIC_QUEUES="2")
    capsys.readouterr()
    app.lambda_handler(load_event("drain_schedule.json"), LambdaContext())
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if line.startswith("{")]
    queues = [(r["queue"], r["QueueBacklog"], round(r["QueueOldestDueAge"], -1))
              for r in lines if "_aws" in r and "queue" in r]
    assert queues == [("reports", 1, 300), ("emails", 1, 60)]
    [emf] = [r for r in lines if "_aws" in r and "queue" not in r]
    assert (emf["Backlog"], emf["PausedBacklog"]) == ([0.0], [3.0])


def test_a_local_invocation_starts_no_drain_in_aws(load_function, conn, monkeypatch, capsys):
    # As sam local invoke and pgdrain invoke run it: a function name that only looks real,
    # AWS_SAM_LOCAL set. POST /drain drains in the request instead of invoking, continuation
    # and fan-out start nothing, and boto3 is never imported for it; the log says so once.
    import sys

    from pgdrain.aws import local

    monkeypatch.setattr(local, "_said", set())
    monkeypatch.delitem(sys.modules, "boto3", raising=False)
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}] * 3)
    app = load_function("drain", AWS_LAMBDA_FUNCTION_NAME="DrainFunction",
                        AWS_SAM_LOCAL="true", PGDRAIN_MAX_JOBS="1")
    summary = app.lambda_handler({}, LambdaContext())
    answer = app.lambda_handler(load_event("drain_api.json"), LambdaContext())
    assert (summary["done"], summary["stopped"], summary["continued"]) == (1, "max_jobs", 0)
    assert answer["statusCode"] == 200 and json.loads(answer["body"])["done"] == 1
    assert "boto3" not in sys.modules
    said = [line for line in capsys.readouterr().out.splitlines()
            if "local invocation (AWS_SAM_LOCAL): the drain" in line]
    assert len(said) == 1


def test_a_failures_line_carries_its_traceback_once_and_no_lambda_context(load_function, conn,
                                                                          capsys):
    # What an operator searches for stays (job id, type, attempt, outcome, error, request
    # id); the traceback comes once, as text; a deliberate Discard has none; the function's
    # name, ARN and memory (the log group's own) are not repeated on every line.
    ids = {r.id: t for r, t in zip(pgdrain.enqueue_many(conn, [{"job_type": "test-boom"},
                                                                {"job_type": "test-discard"}]),
                                    ("test-boom", "test-discard"), strict=True)}
    app = load_function("drain")
    capsys.readouterr()
    app.lambda_handler({}, LambdaContext(request_id="req-9"))
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    jobs = {r["job_id"]: r for r in lines if r.get("job_id")}
    assert set(jobs) == set(ids)
    for line in jobs.values():
        assert {"job_id", "job_type", "attempt", "outcome", "error",
                "correlation_id"} <= set(line)
        assert line["correlation_id"] == "req-9"
        assert not {"stack_trace", "function_arn", "function_name", "function_memory_size",
                    "function_request_id", "cold_start"} & set(line), line.keys()
    boom = next(line for line in jobs.values() if line["job_type"] == "test-boom")
    assert boom["outcome"] == "retried" and boom["exception"].count("Traceback") == 1
    # The message twice: as error, and as the traceback's last line; not a third time.
    assert json.dumps(boom).count("boom on attempt 1") == 2
    discard = next(line for line in jobs.values() if line["job_type"] == "test-discard")
    assert discard["outcome"] == "failed" and "exception" not in discard
    assert "the customer no longer exists" in discard["error"]
    assert all("function_arn" not in line for line in lines)
