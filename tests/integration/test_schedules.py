"""Periodic jobs against PostgreSQL: each tick enqueued exactly once however many drains race
on it, one catch-up run after an outage, a new entry that does not run old ticks, and entries
that stop when renamed or removed."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

import pgdrain
import pgdrain.testing as pgt
from pgdrain import Settings
from pgdrain.db import Connector, connect
from pgdrain.drain import drain
from pgdrain.registry import Registry
from pgdrain.scheduler import dedupe_key, enqueue_due
from tests.support.drains import KEEP_HISTORY_SECONDS, clock, run_all


def registry_with(*entries) -> Registry:
    registry = Registry()
    pgdrain.job("report", registry=registry)(lambda job: None)
    for cron, name in entries:
        pgdrain.schedule(cron, "report", {"kind": name}, name=name, registry=registry)
    return registry


def db_now(sql):
    return sql("SELECT now() AS t")[0]["t"]


def minute_floor(moment):
    return moment.replace(second=0, microsecond=0)


def test_a_new_entry_runs_its_current_tick_once(conn, sql):
    registry = registry_with(("* * * * *", "every-minute"))
    assert enqueue_due(conn, registry) == 1
    assert enqueue_due(conn, registry) == 0
    [job] = sql("SELECT job_type, payload, run_at, dedupe_key FROM jobs")
    tick = job["run_at"]
    assert (job["job_type"], job["payload"]) == ("report", {"kind": "every-minute"})
    assert tick == minute_floor(tick) and db_now(sql) - tick < timedelta(seconds=61)
    assert job["dedupe_key"] == dedupe_key("every-minute", tick)
    [row] = sql("SELECT name, last_tick, last_job_id FROM pgdrain_schedules")
    assert row["last_tick"] == tick and row["last_job_id"] is not None


def test_a_new_entry_does_not_run_a_tick_long_past(conn, sql):
    # Deployed at 10:30, an hourly entry does not run for 10:00: it waits for 11:00.
    hour = db_now(sql).hour
    cron = f"0 {(hour - 2) % 24} * * *"
    registry = registry_with((cron, "daily"))
    assert enqueue_due(conn, registry) == 0
    assert sql("SELECT count(*) AS n FROM jobs") == [{"n": 0}]
    assert len(sql("SELECT last_tick FROM pgdrain_schedules")) == 1


def test_after_an_outage_one_catch_up_run_not_a_burst(conn, sql):
    registry = registry_with(("* * * * *", "every-minute"))
    sql("INSERT INTO pgdrain_schedules (name, last_tick) "
        "VALUES ('every-minute', date_trunc('minute', now()) - interval '5 hours')")
    assert enqueue_due(conn, registry) == 1
    assert enqueue_due(conn, registry) == 0
    assert sql("SELECT count(*) AS n FROM jobs") == [{"n": 1}]


def test_a_renamed_or_removed_entry_stops(conn, sql):
    sql("INSERT INTO pgdrain_schedules (name, last_tick) "
        "VALUES ('old-name', now() - interval '1 day')")
    registry = registry_with(("* * * * *", "new-name"))
    assert enqueue_due(conn, registry) == 1
    [job] = sql("SELECT payload FROM jobs")
    assert job["payload"] == {"kind": "new-name"}
    assert enqueue_due(conn, Registry()) == 0


def test_a_tick_already_taken_is_not_enqueued_even_after_its_job_finished(conn, sql):
    registry = registry_with(("* * * * *", "every-minute"))
    enqueue_due(conn, registry)
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    pgdrain.complete(conn, [job])
    assert enqueue_due(conn, registry) == 0  # the dedupe key alone would allow it now


def test_the_drain_enqueues_and_runs_a_due_tick(database_url, sql):
    ran = []
    registry = Registry()
    pgdrain.job("report", registry=registry, cron="* * * * *")(lambda job: ran.append(job.id))
    drained = pgt.drain_all(database_url, registry=registry)
    [summary, *_] = drained.summaries
    assert (summary.scheduled, summary.done, len(ran)) == (1, 1, 1)
    assert [(r.id, r.job_type, r.outcome) for r in drained] == [(ran[0], "report", "done")]
    assert sql("SELECT name FROM pgdrain_schedules") == [{"name": "report"}]
    # The drain declared its entry, for `pgdrain schedules` to read without the job modules.
    assert sql("SELECT name, cron, tz, job_type, queue FROM pgdrain_schedule_declarations") == [
        {"name": "report", "cron": "* * * * *", "tz": "UTC", "job_type": "report",
         "queue": "default"}]


@pytest.mark.parametrize("round_", range(5))
def test_eight_drains_racing_on_a_tick_enqueue_it_exactly_once(database_url, sql, round_):
    registry = registry_with(("* * * * *", "every-minute"), ("*/1 * * * *", "also"))
    if round_:
        # An entry seen before, due again: the catch-up path races too.
        sql("INSERT INTO pgdrain_schedules (name, last_tick) VALUES "
            "('every-minute', now() - interval '3 minutes'), "
            "('also', now() - interval '3 minutes')")
    start = threading.Barrier(8)
    summaries = []

    def one() -> None:
        connector = Connector(lambda timeout=None: connect(database_url, timeout=timeout))
        try:
            start.wait()
            summaries.append(drain(connector, registry, Settings(max_drains=16,
                                                            retention_seconds=KEEP_HISTORY_SECONDS),
                                   time_left=clock(30)))
        finally:
            connector.discard()

    run_all([threading.Thread(target=one) for _ in range(8)])
    jobs = sql("SELECT payload->>'kind' AS kind, run_at, count(*) AS n FROM jobs "
               "GROUP BY 1, 2 ORDER BY 1, 2")
    # One job per entry and tick (two ticks if the race straddled a minute).
    assert all(j["n"] == 1 for j in jobs), jobs
    assert {j["kind"] for j in jobs} == {"every-minute", "also"}
    assert sum(s.scheduled for s in summaries) == len(jobs) <= 4
    assert all(s.stopped == "empty" for s in summaries)
