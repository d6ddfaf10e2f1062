"""pgdrain.testing against PostgreSQL: drain_all, run_job, advance and the enqueue
assertions, as a user's test suite calls them."""

from __future__ import annotations

from datetime import timedelta

import pg8000.dbapi
import psycopg
import pytest

import pgdrain
import pgdrain.testing as pgt
from pgdrain import Backoff, Registry
from pgdrain.db import parse_database_url

STEADY = Backoff(base_seconds=60, cap_seconds=3600, jitter=0)
"""A retry after 60 s, then 120 s: what advance() must reach, exactly."""


def test_drain_all_runs_every_due_job_and_the_jobs_they_enqueue(conn, database_url):
    registry = Registry()

    # transactional: the welcome e-mail commits with the signup's done
    @pgdrain.job("signup", registry=registry, transactional=True)
    def signup(job, conn):
        pgdrain.enqueue(conn, "welcome", {"to": job.payload["email"]})
        return {"user": job.payload["email"]}

    @pgdrain.job("welcome", registry=registry)
    def welcome(job):
        return "sent"

    first = pgdrain.enqueue(conn, "signup", {"email": "sarah@example.com"}).id

    drained = pgt.drain_all(database_url, registry=registry)

    assert [(r.job_type, r.outcome) for r in drained] == [("signup", "done"),
                                                          ("welcome", "done")]
    assert drained.job(first).result == {"user": "sarah@example.com"}
    assert drained.of_type("welcome")[0].result == "sent"
    assert drained.counts == {"done": 2} and drained.done == 2
    assert pgt.drain_all(database_url, registry=registry).jobs == []


def test_a_retry_waits_its_backoff_until_the_clock_is_advanced(conn, database_url):
    registry = Registry()
    calls = []

    @pgdrain.job("flaky", registry=registry, max_attempts=3, backoff=STEADY)
    def flaky(job):
        calls.append(job.attempts)
        if job.attempts < 3:
            raise ConnectionError(f"attempt {job.attempts} refused")
        return "third time"

    pgdrain.enqueue(conn, "flaky", {})

    first = pgt.drain_all(database_url, registry=registry)
    [run] = first.jobs
    assert (run.outcome, run.attempt, run.status) == ("retried", 1, "pending")
    assert run.error == "ConnectionError: attempt 1 refused"
    assert isinstance(run.exception, ConnectionError)

    pgt.advance(conn, 59)
    assert pgt.drain_all(database_url, registry=registry).jobs == []  # 1 s early
    pgt.advance(conn, 2)
    assert [r.outcome for r in pgt.drain_all(database_url, registry=registry)] == ["retried"]
    pgt.advance(conn, 121)
    last = pgt.drain_all(database_url, registry=registry)
    assert [(r.outcome, r.result) for r in last] == [("done", "third time")]
    assert calls == [1, 2, 3]


def test_a_job_out_of_attempts_is_reported_failed_with_its_error(conn, database_url):
    registry = Registry()

    @pgdrain.job("doomed", registry=registry, max_attempts=1)
    def doomed(job):
        raise pgdrain.Discard("no such customer")

    job_id = pgdrain.enqueue(conn, "doomed", {"customer": 7}).id
    [run] = pgt.drain_all(database_url, registry=registry)
    assert (run.id, run.outcome, run.status) == (job_id, "failed", "failed")
    assert run.error == "Discard: no such customer"
    assert run.payload == {"customer": 7}


def test_snoozed_and_continued_runs_are_named(conn, database_url):
    registry = Registry()
    runs = []

    @pgdrain.job("later", registry=registry)
    def later(job):
        raise pgdrain.Snooze(300)

    @pgdrain.job("pages", registry=registry)
    def pages(job):
        runs.append(job.id)
        if len(runs) == 1:
            raise pgdrain.Continue()  # back at once, no attempt spent: the same drain_all
        return "last page"

    pgdrain.enqueue(conn, "later", {})
    drained = pgt.drain_all(database_url, registry=registry)
    assert [(r.job_type, r.outcome, r.status) for r in drained] == [
        ("later", "snoozed", "pending")]
    pgt.advance(conn, 301)
    assert [r.outcome for r in pgt.drain_all(database_url, registry=registry)] == ["snoozed"]

    pages_id = pgdrain.enqueue(conn, "pages", {}).id
    pgdrain.enqueue(conn, "later", {}, delay_seconds=3600)  # not due: stays
    drained = pgt.drain_all(database_url, registry=registry)
    assert [(r.id, r.outcome, r.attempt) for r in drained] == [(pages_id, "continued", 1),
                                                               (pages_id, "done", 1)]


def test_jobs_that_keep_coming_end_in_a_clear_error(conn, database_url):
    registry = Registry()

    @pgdrain.job("again", registry=registry, transactional=True)
    def again(job, conn):
        pgdrain.enqueue(conn, "again", {"n": job.payload["n"] + 1})

    pgdrain.enqueue(conn, "again", {"n": 0})
    with pytest.raises(pgt.NotSettled, match=r"more than limit=20 attempts.*again \(21\)"):
        pgt.drain_all(database_url, registry=registry, limit=20)


def test_a_connection_is_followed_to_its_database_unless_a_transaction_is_open(
        conn, database_url, sql):
    registry = Registry()
    pgdrain.job("count", registry=registry)(lambda job: job.payload["n"])
    params = parse_database_url(database_url)
    dbapi = pg8000.dbapi.connect(user=params.user, password=params.password,
                                 host=params.host or "localhost", port=params.port,
                                 database=params.database, unix_sock=params.unix_sock)
    libpq = psycopg.connect(user=params.user, password=params.password, port=params.port,
                            host=params.host or params.unix_sock.rsplit("/", 1)[0],
                            dbname=params.database)
    try:
        # Each driver's connection, as the application has it: no URL given, none remembered.
        for n, app in enumerate((conn, dbapi, libpq)):
            pgdrain.enqueue(app, "count", {"n": n})
            if app is not conn:
                pgdrain.enqueue(app, "invisible", {})  # in app's transaction, uncommitted
                pgt.assert_enqueued(app, "invisible")  # the assertions see it on app
                with pytest.raises(pgt.OpenTransaction, match="commit"):
                    pgt.drain_all(app, registry=registry)
                app.rollback()
                pgdrain.enqueue(app, "count", {"n": n})
                app.commit()
            [run] = pgt.drain_all(app, registry=registry)
            assert (run.outcome, run.result) == ("done", n)
        assert sql("SELECT count(*) AS n FROM jobs WHERE job_type = 'invisible'") == [{"n": 0}]
    finally:
        dbapi.close()
        libpq.close()

    with pytest.raises(pgt.NoDatabaseUrl, match="pass the URL"):
        pgt.drain_all(object(), registry=registry)
    pgt.remember(conn, "postgresql://nobody@127.0.0.1:9/nowhere?connect_timeout=1")
    with pytest.raises(pgt.DrainFailed, match="database error"):  # the URL remembered wins
        pgt.drain_all(conn, registry=registry)


def test_pgdrain_testing_connect_is_accepted_in_place_of_the_url(database_url):
    conn = pgt.connect(database_url)
    try:
        pgdrain.enqueue(conn, "nobody-handles-this", {})
        [run] = pgt.drain_all(conn, registry=Registry())
        assert run.outcome == "failed" and "nobody-handles-this" in (run.error or "")
    finally:
        conn.close()


# --- run_job ---------------------------------------------------------------------------------

def test_run_job_runs_that_one_job_only(conn, database_url, sql):
    registry = Registry()
    ran = []

    @pgdrain.job("mail", registry=registry, transactional=True)
    def mail(job, conn):
        ran.append(job.payload["to"])
        pgdrain.enqueue(conn, "mail", {"to": "follow-up"})
        return job.payload["to"].upper()

    ids = [pgdrain.enqueue(conn, "mail", {"to": who}).id for who in ("a", "b", "c")]
    run = pgt.run_job(database_url, ids[1], registry=registry)
    assert (run.id, run.outcome, run.result) == (ids[1], "done", "B")
    assert ran == ["b"]
    statuses = {r["id"]: r["status"] for r in sql("SELECT id, status FROM jobs")}
    assert [statuses[i] for i in ids] == ["pending", "done", "pending"]
    assert len(statuses) == 4  # the follow-up it enqueued waits for drain_all


def test_run_job_runs_its_job_through_middleware_and_ticks_no_stored_schedule(conn,
                                                                            database_url,
                                                                            sql):
    registry = Registry()
    wrapped = []
    pgdrain.middleware(lambda job, call_next: wrapped.append(job.job_type) or call_next(),
                       registry=registry)
    pgdrain.job("report", registry=registry)(lambda job: "report")
    pgdrain.job("signup", registry=registry)(lambda job: "signed up")
    pgdrain.schedule(conn, "* * * * *", "report", {}, name="every-minute")  # due at once
    run = pgt.run_job(database_url, "signup", {}, registry=registry)
    assert (run.job_type, run.outcome, run.result) == ("signup", "done", "signed up")
    assert wrapped == ["signup"]
    assert sql("SELECT job_type FROM jobs") == [{"job_type": "signup"}]


def test_run_job_enqueues_a_new_job_through_its_payload_model(database_url):
    registry = Registry()

    @pgdrain.job("greet", registry=registry, max_attempts=2, backoff=STEADY)
    def greet(job):
        raise RuntimeError(f"no greeting for {job.payload['name']}")

    run = pgt.run_job(database_url, "greet", {"name": "Ada"}, registry=registry,
                      queue="people")
    assert (run.job_type, run.queue, run.outcome, run.attempt) == ("greet", "people",
                                                                   "retried", 1)
    again = pgt.run_job(database_url, run.id, registry=registry)  # backoff or not: it runs
    assert (again.outcome, again.attempt, again.status) == ("failed", 2, "failed")
    with pytest.raises(pgt.JobNotRun, match=rf"job {run.id} cannot run: it is failed"):
        pgt.run_job(database_url, run.id, registry=registry)
    with pytest.raises(pgt.JobNotRun, match="no such job"):
        pgt.run_job(database_url, 10**12, registry=registry)


def test_run_job_says_when_the_drain_could_not_claim_the_job(conn, database_url):
    registry = Registry()

    @pgdrain.job("held", registry=registry)
    def held(job):  # pragma: no cover - never claimed
        return None

    job_id = pgdrain.enqueue(conn, "held", {}, queue="paused-one").id
    pgdrain.pause(conn, "paused-one")
    with pytest.raises(pgt.JobNotRun, match=rf"job {job_id} was not run.*paused"):
        pgt.run_job(database_url, job_id, registry=registry)


# --- assertions ------------------------------------------------------------------------------

def test_assert_enqueued_finds_a_job_by_payload_subset_and_filters(conn):
    pgdrain.enqueue(conn, "send-email", {"to": "sarah@example.com", "template": "welcome",
                                         "vars": {"name": "Sarah", "plan": "pro"}},
                    queue="emails")
    found = pgt.assert_enqueued(conn, "send-email", {"vars": {"plan": "pro"}}, queue="emails")
    assert found["payload"]["to"] == "sarah@example.com" and found["status"] == "pending"
    pgt.assert_enqueued(conn, "send-email")
    pgt.refute_enqueued(conn, "send-email", {"to": "bob@example.com"})
    pgt.refute_enqueued(conn, "send-email", queue="default")
    assert [j["payload"]["template"] for j in pgt.enqueued(conn, "send-email")] == ["welcome"]
    with pytest.raises(TypeError, match="unknown filter colour"):
        pgt.enqueued(conn, "send-email", colour="red")


def test_a_failing_assert_enqueued_lists_what_is_enqueued(conn):
    for to in ("sarah@example.com", "bob@example.com"):
        pgdrain.enqueue(conn, "send-email", {"to": to})
    with pytest.raises(AssertionError) as failed:
        pgt.assert_enqueued(conn, "send-email", {"to": "sara@example.com"})
    message = str(failed.value)
    assert message.startswith("expected a 'send-email' job with a payload containing "
                              '{"to": "sara@example.com"}, pending; the \'send-email\' jobs '
                              "pending are (first 5):")
    assert 'payload {"to": "sarah@example.com"}' in message
    assert 'payload {"to": "bob@example.com"}' in message

    with pytest.raises(AssertionError, match="no 'report' job is pending at all"):
        pgt.assert_enqueued(conn, "report")
    with pytest.raises(AssertionError, match=r"expected no 'send-email' job.*bob@example"):
        pgt.refute_enqueued(conn, "send-email", {"to": "bob@example.com"})


# --- advance ---------------------------------------------------------------------------------

def test_advance_makes_delayed_and_expiring_jobs_due_as_time_would(conn, database_url):
    registry = Registry()

    @pgdrain.job("reminder", registry=registry)
    def reminder(job):
        return "reminded"

    pgdrain.enqueue(conn, "reminder", {}, delay_seconds=3600)
    pgdrain.enqueue(conn, "reminder", {"stale": True}, delay_seconds=120, ttl_seconds=180)
    assert pgt.drain_all(database_url, registry=registry).jobs == []
    moved = pgt.advance(conn, 3600, registry=registry)
    assert moved.jobs == 2
    drained = pgt.drain_all(database_url, registry=registry)
    assert [(r.payload, r.outcome) for r in drained] == [({}, "done")]
    assert drained.summaries[0].expired == 1  # its expires_at passed before it was due
    with pytest.raises(ValueError, match="finite number >= 0"):
        pgt.advance(conn, -1)


def test_a_schedule_fires_when_the_clock_reaches_its_next_tick(conn, database_url, sql):
    now = sql("SELECT now() AS now")[0]["now"]
    minute = (now + timedelta(minutes=30)).minute  # its tick about 30 minutes ahead
    registry = Registry()

    @pgdrain.job("hourly", registry=registry, cron=f"{minute} * * * *")
    def hourly(job):
        return "ticked"

    first = pgt.drain_all(database_url, registry=registry)  # first sight: recorded, not run
    assert (first.scheduled, first.jobs) == (0, [])
    assert pgt.advance(conn, 20 * 60, registry=registry).schedules == 0
    assert pgt.drain_all(database_url, registry=registry).jobs == []
    assert pgt.advance(conn, 45 * 60, registry=registry).schedules == 1
    fired = pgt.drain_all(database_url, registry=registry)
    assert fired.scheduled == 1
    assert [(r.job_type, r.result) for r in fired] == [("hourly", "ticked")]
    assert pgt.drain_all(database_url, registry=registry).jobs == []  # once, not again


def test_a_stored_schedule_fires_when_the_clock_reaches_its_next_tick(conn, database_url,
                                                                     sql):
    now = sql("SELECT now() AS now")[0]["now"]
    minute = (now + timedelta(minutes=30)).minute  # its tick about 30 minutes ahead
    registry = Registry()
    pgdrain.job("report", registry=registry)(lambda job: job.payload["customer"])
    pgdrain.schedule(conn, f"{minute} * * * *", "report", {"customer": 42},
                     name="report:customer-42")
    assert pgt.drain_all(database_url, registry=registry).jobs == []
    pgt.advance(conn, 20 * 60)
    assert pgt.drain_all(database_url, registry=registry).jobs == []
    pgt.advance(conn, 15 * 60)
    fired = pgt.drain_all(database_url, registry=registry)
    assert [(r.job_type, r.result) for r in fired] == [("report", 42)]
    assert pgt.drain_all(database_url, registry=registry).jobs == []  # once, not again


def test_advance_past_a_lease_lets_the_janitor_take_back_a_dead_drains_job(conn, database_url):
    registry = Registry()
    pgdrain.job("export", registry=registry)(lambda job: "exported")
    job_id = pgdrain.enqueue(conn, "export", {}).id
    [claimed] = pgdrain.claim(conn, batch_size=1, lease_seconds=600)  # a drain that died
    assert claimed.id == job_id
    assert pgt.drain_all(database_url, registry=registry).jobs == []  # its lease holds it
    pgt.advance(conn, 601)
    drained = pgt.drain_all(database_url, registry=registry)
    assert drained.summaries[0].reclaimed == 1
    assert [(r.id, r.outcome, r.result) for r in drained] == [(job_id, "done", "exported")]


def test_advance_moves_a_rate_window(conn, database_url):
    registry = Registry()
    pgdrain.job("sync", registry=registry, rate="1/h")(lambda job: job.payload["n"])
    for n in (1, 2):
        pgdrain.enqueue(conn, "sync", {"n": n})
    first = pgt.drain_all(database_url, registry=registry)  # the second frees in an hour
    assert [r.result for r in first] == [1]
    pgt.advance(conn, 1800)
    assert pgt.drain_all(database_url, registry=registry).jobs == []
    pgt.advance(conn, 1801)
    assert [r.result for r in pgt.drain_all(database_url, registry=registry)] == [2]


def test_run_job_holds_the_others_without_stalling_the_runs_own_writes(conn, database_url):
    registry = Registry()

    @pgdrain.job("edit", registry=registry, transactional=True, timeout=5)
    def edit(job, tx):
        # Debounces into the pending "save" job that run_job holds back: an update of it.
        pgdrain.enqueue(tx, "save", {"v": 2}, dedupe_key="doc-1", debounce=60)
        return "edited"

    save = pgdrain.enqueue(conn, "save", {"v": 1}, dedupe_key="doc-1", debounce=60).id
    edit_id = pgdrain.enqueue(conn, "edit", {}).id
    run = pgt.run_job(database_url, edit_id, registry=registry)
    assert (run.outcome, run.result) == ("done", "edited")
    [pending] = pgt.enqueued(conn, "save")
    assert (pending["id"], pending["payload"]) == (save, {"v": 2})
