"""Schedules made at run time against PostgreSQL: created, changed, paused, resumed and deleted
by name; ticked exactly once per tick however many drains race on it, once after an outage, and
not at all while paused; thousands stored cost a pass one probe."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

import pgdrain
from pgdrain import Settings
from pgdrain.drain import drain
from pgdrain.janitor import run_janitor
from pgdrain.registry import Registry
from pgdrain.scheduler import declare, dedupe_key, enqueue_due
from tests.support.drains import KEEP_HISTORY_SECONDS, clock, connector_to, run_all


def db_now(sql):
    return sql("SELECT now() AS t")[0]["t"]


def tick_stored(conn) -> int:
    """One drain pass's schedules, with the janitor's look deciding as the drain does."""
    look = run_janitor(conn, Settings(retention_seconds=KEEP_HISTORY_SECONDS), Registry())
    return enqueue_due(conn, Registry(), stored_due=look.schedules_due)


def jobs(sql):
    return sql("SELECT job_type, payload, queue, run_at, dedupe_key FROM jobs ORDER BY id")


def test_a_stored_entry_runs_its_current_tick_once(conn, sql):
    made = pgdrain.schedule(conn, "* * * * *", "report", {"customer": 42},
                            name="report:customer-42", queue="reports")
    assert made["created"] is True
    assert (made["source"], made["queue"], made["paused"]) == ("stored", "reports", False)
    assert tick_stored(conn) == 1
    assert tick_stored(conn) == 0
    [job] = jobs(sql)
    assert (job["job_type"], job["payload"], job["queue"]) == (
        "report", {"customer": 42}, "reports")
    assert job["dedupe_key"] == dedupe_key("report:customer-42", job["run_at"])
    entry = pgdrain.get_schedule(conn, "report:customer-42")
    assert entry["last_tick"] == job["run_at"] and entry["last_job_id"] is not None
    assert entry["next_run"] == job["run_at"] + timedelta(minutes=1)


def test_the_connection_may_be_given_as_conn(conn, sql):
    made = pgdrain.schedule("*/5 * * * *", "report", {"k": 1}, conn=conn, name="five",
                            tz="Europe/Paris")
    assert (made["cron"], made["tz"], made["payload"]) == ("*/5 * * * *", "Europe/Paris",
                                                          {"k": 1})
    assert pgdrain.REGISTRY.schedule_names().isdisjoint({"five"})  # nothing declared


def test_a_new_entry_does_not_run_a_tick_long_past(conn, sql):
    hour = db_now(sql).hour
    made = pgdrain.schedule(conn, f"0 {(hour - 2) % 24} * * *", "report", name="daily")
    assert made["next_run"] > db_now(sql) + timedelta(hours=20)
    assert tick_stored(conn) == 0
    assert jobs(sql) == []


def test_nothing_is_due_and_nothing_read_when_none_is_stored(conn):
    look = run_janitor(conn, Settings(), Registry())
    assert look.schedules_due is False


def test_after_an_outage_one_catch_up_run_not_a_burst(conn, sql):
    pgdrain.schedule(conn, "* * * * *", "report", name="every-minute")
    sql("UPDATE pgdrain_schedules SET next_tick = date_trunc('minute', now()) - "
        "interval '5 hours'")
    assert tick_stored(conn) == 1
    assert tick_stored(conn) == 0
    [job] = jobs(sql)
    assert db_now(sql) - job["run_at"] < timedelta(seconds=61)  # the latest tick, not 5 h ago


def test_changing_the_payload_keeps_the_time_and_a_new_cron_starts_afresh(conn, sql):
    pgdrain.schedule(conn, "* * * * *", "report", {"v": 1}, name="r")
    assert tick_stored(conn) == 1
    before = pgdrain.get_schedule(conn, "r")
    changed = pgdrain.schedule(conn, "* * * * *", "report", {"v": 2}, name="r",
                               queue="other")
    assert changed["created"] is False
    assert (changed["next_run"], changed["payload"], changed["queue"]) == (
        before["next_run"], {"v": 2}, "other")
    assert changed["created_at"] == before["created_at"]
    # A new cron whose latest tick is the one just taken does not take it again.
    again = pgdrain.schedule(conn, "*/1 * * * *", "report", {"v": 2}, name="r")
    assert again["next_run"] > before["last_tick"]
    assert tick_stored(conn) == 0
    # A daily cron two hours ago: its first run is tomorrow, as a new entry's would be.
    hour = db_now(sql).hour
    daily = pgdrain.schedule(conn, f"0 {(hour - 2) % 24} * * *", "report", name="r")
    assert daily["next_run"] > db_now(sql) + timedelta(hours=20)
    assert daily["last_tick"] == before["last_tick"]
    assert len(jobs(sql)) == 1


def test_a_paused_entry_does_not_tick_and_resumes_without_a_burst(conn, sql):
    pgdrain.schedule(conn, "* * * * *", "report", name="r")
    paused = pgdrain.pause_schedule(conn, "r")
    assert paused["paused"] is True and paused["next_run"] is None
    assert pgdrain.pause_schedule(conn, "r")["paused_at"] == paused["paused_at"]
    assert tick_stored(conn) == 0
    # Changed while paused: stays paused.
    assert pgdrain.schedule(conn, "*/2 * * * *", "report", name="r")["paused"] is True
    resumed = pgdrain.resume_schedule(conn, "r")
    assert resumed["paused"] is False and resumed["next_run"] > db_now(sql)
    assert tick_stored(conn) == 0  # the ticks missed while paused are not run
    assert jobs(sql) == []
    assert pgdrain.resume_schedule(conn, "r")["next_run"] == resumed["next_run"]


def test_deleted_entries_stop_and_unknown_names_are_refused(conn, sql):
    pgdrain.schedule(conn, "* * * * *", "report", name="r")
    assert pgdrain.delete_schedule(conn, "r") == {"name": "r", "deleted": True}
    assert tick_stored(conn) == 0
    for act in (pgdrain.get_schedule, pgdrain.pause_schedule, pgdrain.resume_schedule,
                pgdrain.delete_schedule):
        with pytest.raises(pgdrain.UnknownSchedule, match="'r'"):
            act(conn, "r")
    assert sql("SELECT count(*) AS n FROM pgdrain_schedules") == [{"n": 0}]


@pytest.mark.parametrize(("call", "field"), [
    (lambda c: pgdrain.schedule(c, "* * * *", "report", name="x"), "cron"),
    (lambda c: pgdrain.schedule(c, "* * * * *", "report", tz="Mars/Olympus", name="x"), "tz"),
    (lambda c: pgdrain.schedule(c, "* * * * *", "report", name="x", colour="red"), "colour"),
    (lambda c: pgdrain.schedule(c, "* * * * *", "report", name="x", priority="high"),
     "priority"),
    (lambda c: pgdrain.schedule(c, "* * * * *", "", name="x"), "job_type"),
    (lambda c: pgdrain.schedule(c, "* * * * *", "report", [1], name="x"), "payload"),
    (lambda c: pgdrain.schedule(c, "* * * * *", "report"), "name"),
    (lambda c: pgdrain.schedule(c, "* * * * *", "report", name=" x"), "name"),
    (lambda c: pgdrain.schedule(c, "* * * * *", "report", name="a\nb"), "name"),
    (lambda c: pgdrain.schedule(c, "* * * * *", "report", name="x" * 201), "name"),
])
def test_invalid_entries_are_refused_before_anything_is_written(conn, sql, call, field):
    with pytest.raises(pgdrain.InvalidSchedule) as refused:
        call(conn)
    assert refused.value.field == field
    assert sql("SELECT count(*) AS n FROM pgdrain_schedules") == [{"n": 0}]


def test_a_stored_entry_may_not_take_a_declared_name(conn, sql):
    registry = Registry()
    pgdrain.schedule("0 * * * *", "report", name="hourly", registry=registry)
    declare(conn, registry)
    with pytest.raises(pgdrain.ScheduleConflict, match="hourly"):
        pgdrain.schedule(conn, "* * * * *", "report", name="hourly")
    assert sql("SELECT count(*) AS n FROM pgdrain_schedules WHERE source = 'stored'") == [
        {"n": 0}]


def test_a_declared_entry_never_ticks_a_stored_one_of_its_name(conn, sql):
    pgdrain.schedule(conn, "* * * * *", "report", {"from": "stored"}, name="clash")
    registry = Registry()
    pgdrain.schedule("* * * * *", "report", {"from": "code"}, name="clash", registry=registry)
    assert enqueue_due(conn, registry, stored_due=True) == 1
    assert enqueue_due(conn, registry, stored_due=True) == 0
    assert [j["payload"] for j in jobs(sql)] == [{"from": "stored"}]


def test_the_list_shows_both_kinds(conn):
    registry = Registry()
    pgdrain.schedule("0 * * * *", "report", name="hourly", registry=registry)
    declare(conn, registry)
    pgdrain.schedule(conn, "0 9 * * *", "report", {"c": 1}, name="report:c1")
    pgdrain.pause_schedule(conn, "report:c1")
    listed = {e["name"]: e for e in pgdrain.list_schedules(conn)}
    assert (listed["hourly"]["source"], listed["hourly"]["paused"]) == ("declared", False)
    assert listed["hourly"]["next_run"] is not None
    stored = listed["report:c1"]
    assert (stored["source"], stored["paused"], stored["payload"], stored["next_run"]) == (
        "stored", True, {"c": 1}, None)


def test_ten_thousand_stored_entries_with_few_due(conn, sql):
    sql("INSERT INTO pgdrain_schedules (name, source, cron, job_type, payload, options, "
        "next_tick, created_at) SELECT 'report:customer-' || i, 'stored', '0 9 * * *', "
        "'report', jsonb_build_object('customer', i), '{}', now() + interval '1 day', now() "
        "FROM generate_series(1, 10000) AS i")
    for i in (7, 70, 700):
        pgdrain.schedule(conn, "* * * * *", "report", {"customer": i},
                         name=f"report:customer-{i}")
    assert tick_stored(conn) == 3
    assert tick_stored(conn) == 0
    assert sorted(j["payload"]["customer"] for j in jobs(sql)) == [7, 70, 700]


@pytest.mark.parametrize("round_", range(3))
def test_eight_drains_racing_on_a_stored_tick_enqueue_it_exactly_once(database_url, conn, sql,
                                                                      round_):
    pgdrain.schedule(conn, "* * * * *", "report", {"c": 1}, name="report:c1")
    if round_:  # seen before, due again after an outage: the catch-up path races too
        sql("UPDATE pgdrain_schedules SET next_tick = now() - interval '3 hours'")
    registry = Registry()
    pgdrain.job("report", registry=registry)(lambda job: None)
    start = threading.Barrier(8)
    summaries = []

    def one() -> None:
        connector = connector_to(database_url)
        try:
            start.wait()
            summaries.append(drain(connector, registry, Settings(
                max_drains=16, retention_seconds=KEEP_HISTORY_SECONDS), time_left=clock(30)))
        finally:
            connector.discard()

    run_all([threading.Thread(target=one) for _ in range(8)])
    ticks = sql("SELECT run_at, count(*) AS n FROM jobs GROUP BY 1 ORDER BY 1")
    assert all(t["n"] == 1 for t in ticks), ticks
    assert sum(s.scheduled for s in summaries) == len(ticks) <= 2


def test_a_payload_its_types_model_refuses_is_refused_when_stored(conn, sql, monkeypatch):
    # The process's job modules declare the type's payload model (the enqueue function loads
    # PGDRAIN_JOBS): a stored schedule's payload is checked as an enqueue's would be.
    import sys
    from dataclasses import dataclass

    @dataclass
    class Report:
        customer: int

    registry = Registry()
    pgdrain.job("typed-report", payload=Report, registry=registry)(lambda job: None)
    monkeypatch.setattr(sys.modules["pgdrain.stored_schedules"], "REGISTRY", registry)
    with pytest.raises(pgdrain.InvalidSchedule) as refused:
        pgdrain.schedule(conn, "0 9 * * *", "typed-report", {"customer": "x"}, name="t")
    assert refused.value.field.startswith("payload")
    assert sql("SELECT count(*) AS n FROM pgdrain_schedules") == [{"n": 0}]
    made = pgdrain.schedule(conn, "0 9 * * *", "typed-report", Report(7), name="t")
    assert made["payload"] == {"customer": 7}


def test_a_tick_whose_payload_the_model_now_refuses_is_skipped_not_retried(conn, sql,
                                                                          monkeypatch, caplog):
    # Stored before the type's model changed: the tick is taken without a job and the log
    # says why; the entry waits for its next tick instead of failing every pass.
    import sys
    from dataclasses import dataclass

    pgdrain.schedule(conn, "* * * * *", "typed-report", {"customer": "x"}, name="t")

    @dataclass
    class Report:
        customer: int

    registry = Registry()
    pgdrain.job("typed-report", payload=Report, registry=registry)(lambda job: None)
    monkeypatch.setattr(sys.modules["pgdrain.enqueue"], "REGISTRY", registry)
    assert tick_stored(conn) == 0
    assert "stored schedule 't' could not enqueue" in caplog.text
    assert jobs(sql) == []
    entry = pgdrain.get_schedule(conn, "t")
    assert entry["last_tick"] is not None and entry["next_run"] > entry["last_tick"]
    assert tick_stored(conn) == 0


def test_a_stored_schedules_jobs_carry_its_tenant_tags_and_meta(conn, sql):
    # The per-customer report, tagged: bulk actions by tag reach the jobs it enqueues.
    pgdrain.schedule(conn, "* * * * *", "report", {"customer": 42}, name="report:customer-42",
                     tenant="customer-42", tags=["customer:42", "report"],
                     meta={"plan": "pro"})
    assert tick_stored(conn) == 1
    rows = sql("SELECT tenant, tags, meta FROM jobs WHERE job_type = 'report'")
    assert rows == [{"tenant": "customer-42", "tags": ["customer:42", "report"],
                     "meta": {"plan": "pro"}}]
    with pytest.raises(pgdrain.InvalidSchedule, match="tags"):
        pgdrain.schedule(conn, "* * * * *", "report", {}, name="bad", tags=["not a tag"])
