"""Rate limits against PostgreSQL, per queue (`pgdrain queue set Q --rate`) and per job type
(`@pgdrain.job(..., rate=)`): at most that many starts in any window, across every drain at
once; the excess stays pending and uncharged; a drain that meets only rate-limited work waits
for the window when it can still run a job, and stops early when it cannot."""

from __future__ import annotations

import threading
import time

import pytest

import pgdrain
from pgdrain.claiming import claim_controlled, declare_type_rates
from pgdrain.errors import ConfigError
from pgdrain.flow import parse_rate, start_slack
from pgdrain.registry import Registry
from tests.support.drains import run_all, run_drain


def claim_rated(conn, batch_size=10, type_rates=None):
    return claim_controlled(conn, batch_size=batch_size, lease_seconds=60,
                            type_rates=type_rates)


def age_windows(sql, seconds: float) -> None:
    """The database's clock, faked: every recorded start moves ``seconds`` into the past."""
    for table in ("pgdrain_queues", "pgdrain_type_rates"):
        sql(f"UPDATE {table} SET rate_starts = ARRAY("   # [at, count, at, count, ...]
            "SELECT CASE WHEN i % 2 = 1 THEN s - :seconds ELSE s END "
            "FROM unnest(rate_starts) WITH ORDINALITY AS u(s, i) ORDER BY i)", seconds=seconds)


def test_a_rate_limited_queue_starts_at_most_its_rate_per_window(conn, sql):
    ids = [pgdrain.enqueue(conn, "call-api", queue="partner").id for _ in range(10)]
    other = pgdrain.enqueue(conn, "send-email").id
    state = pgdrain.set_queue(conn, "partner", rate="3/min")
    assert (state["rate"], state["max_running"]) == ("3/min", None)
    # The plain claim leaves the rate-limited queue alone.
    assert [j.id for j in pgdrain.claim(conn, batch_size=20, lease_seconds=60)] == [other]
    first = claim_rated(conn)
    assert [j.id for j in first.jobs] == ids[:3] and first.rate_free_in is None
    held = claim_rated(conn)
    assert held.jobs == []
    # The window counts each claim's starts for the period plus the start slack (flow).
    assert 59.0 < held.rate_free_in <= 60.0 + start_slack(parse_rate("3/min"))
    # Finishing does not give room back: a rate counts starts, not running jobs.
    pgdrain.complete(conn, first.jobs)
    assert claim_rated(conn).jobs == []
    assert sql("SELECT count(*) AS n, max(attempts) AS tries FROM jobs WHERE status = 'pending'"
               ) == [{"n": 7, "tries": 0}]
    age_windows(sql, 30)
    assert claim_rated(conn).jobs == []          # 30 s later the window is still full
    age_windows(sql, 30 + start_slack(parse_rate("3/min")))
    assert [j.id for j in claim_rated(conn).jobs] == ids[3:6]   # 60 s later: three more


def test_a_job_types_rate_holds_in_every_queue(conn, sql):
    rates = {"sync": parse_rate("4/min")}
    for queue in ("a", "b", "c"):
        for _ in range(3):
            pgdrain.enqueue(conn, "sync", queue=queue)
    free = pgdrain.enqueue(conn, "send-email", queue="a").id
    declare_type_rates(conn, rates)
    plain = pgdrain.claim(conn, batch_size=20, lease_seconds=60, limited_types=["sync"])
    assert [j.id for j in plain] == [free]
    assert len(claim_rated(conn, type_rates=rates).jobs) == 4
    assert claim_rated(conn, type_rates=rates).jobs == []
    assert sql("SELECT count(*) AS n FROM jobs WHERE job_type = 'sync' AND status = 'pending' "
               "AND attempts = 0") == [{"n": 5}]


def test_a_cap_and_a_rate_together_take_the_smaller_room(conn):
    for _ in range(10):
        pgdrain.enqueue(conn, "call-api", queue="partner")
    pgdrain.set_queue(conn, "partner", max_running=2, rate="5/min")
    first = claim_rated(conn).jobs
    assert len(first) == 2                       # the cap binds
    pgdrain.complete(conn, first)
    assert len(claim_rated(conn).jobs) == 2
    pgdrain.complete(conn, pgdrain.claim(conn, batch_size=1, lease_seconds=60) or [])
    assert len(claim_rated(conn).jobs) == 0      # cap full (2 running)
    pgdrain.set_queue(conn, "partner", max_running=None)
    assert len(claim_rated(conn).jobs) == 1      # then the rate binds: 5 per minute


@pytest.mark.parametrize("limit", ["a rated type", "a queue cap"])
def test_a_controlled_claim_returns_its_jobs_in_claim_order_whatever_their_run_at(conn, sql,
                                                                                 limit):
    # The statements order the batch: pg8000 returns a run_at of -infinity or of a BC date as
    # text, and the batch sorted in Python raised after its claim had committed.
    ids = {name: sql("INSERT INTO jobs (job_type, priority, run_at) "
                     "VALUES ('sync', :p, CAST(:at AS timestamptz)) RETURNING id",
                     p=priority, at=at)[0]["id"]
           for name, priority, at in [("late", 1, "now"), ("bc", 1, "0044-03-15 BC"),
                                      ("urgent", 0, "now"), ("ancient", 1, "-infinity"),
                                      ("year-1", 1, "0001-01-01 00:00:00+00")]}
    rates = {"sync": parse_rate("100/s")} if limit == "a rated type" else None
    if rates:
        declare_type_rates(conn, rates)
    else:
        pgdrain.set_queue(conn, "default", max_running=10)
    claimed = claim_rated(conn, type_rates=rates).jobs
    assert [j.id for j in claimed] == [ids[n] for n in ("urgent", "ancient", "bc", "year-1",
                                                        "late")]
    assert [j.run_at for j in claimed[1:3]] == ["-infinity", "0044-03-15 00:00:00+00 BC"]


def test_eight_drains_racing_start_exactly_the_rate(database_url, conn, sql):
    registry = Registry()
    pgdrain.job("call-api", registry=registry)(lambda job: None)
    pgdrain.job("sync", registry=registry, rate="4/min")(lambda job: None)
    for _ in range(40):
        pgdrain.enqueue(conn, "call-api", queue="partner")
        pgdrain.enqueue(conn, "sync")
    pgdrain.set_queue(conn, "partner", rate="5/min")
    summaries = []

    def one() -> None:
        summaries.append(run_drain(database_url, registry, 5.0, concurrency=4, max_drains=16))

    started = time.monotonic()
    run_all([threading.Thread(target=one) for _ in range(8)], timeout=60)
    assert time.monotonic() - started < 5.0      # nobody waited out its invocation
    rows = sql("SELECT job_type, status, count(*) AS n, max(attempts) AS tries FROM jobs "
               "GROUP BY 1, 2 ORDER BY 1, 2")
    assert rows == [{"job_type": "call-api", "status": "done", "n": 5, "tries": 1},
                    {"job_type": "call-api", "status": "pending", "n": 35, "tries": 0},
                    {"job_type": "sync", "status": "done", "n": 4, "tries": 1},
                    {"job_type": "sync", "status": "pending", "n": 36, "tries": 0}]
    assert {s.stopped for s in summaries} <= {"rate_limited", "busy", "empty"}
    assert "rate_limited" in {s.stopped for s in summaries}


def test_a_drain_meeting_only_rate_limited_work_stops_early(database_url, conn, sql):
    registry = Registry()
    pgdrain.job("call-api", registry=registry)(lambda job: None)
    for _ in range(3):
        pgdrain.enqueue(conn, "call-api", queue="partner")
    pgdrain.set_queue(conn, "partner", rate="1/min")
    for concurrency in (1, 4):
        started = time.monotonic()
        summary = run_drain(database_url, registry, 20.0, concurrency=concurrency)
        assert summary.stopped == "rate_limited"
        assert time.monotonic() - started < 10.0  # it did not claim in a loop until its end
    assert sql("SELECT status, count(*) AS n FROM jobs GROUP BY 1 ORDER BY 1") == [
        {"status": "done", "n": 1}, {"status": "pending", "n": 2}]


@pytest.mark.parametrize("concurrency", [1, 4])
def test_in_real_time_a_drain_waits_for_the_window_and_keeps_the_rate(database_url, conn,
                                                                      concurrency):
    """12 jobs at 4/s: a drain with time to spare waits for each window (no empty claims in a
    loop) and starts no fifth job within a second of the first of four."""
    registry, starts = Registry(), []
    pgdrain.job("ping", registry=registry)(lambda job: starts.append(time.monotonic()))
    for _ in range(12):
        pgdrain.enqueue(conn, "ping", queue="partner")
    pgdrain.set_queue(conn, "partner", rate="4/s")
    summary = run_drain(database_url, registry, 20.0, concurrency=concurrency)
    assert (summary.done, summary.stopped) == (12, "empty")
    # A job that could not start within its window's slack (flow.start_slack: 50 ms at 4/s,
    # missed on a loaded machine) is handed back uncharged and claimed again: so every claim
    # is a start or a hand-back, and hand-backs stay rare.
    assert summary.claimed == summary.done + summary.released
    assert summary.released <= 4, summary
    starts.sort()
    gaps = [starts[i + 4] - starts[i] for i in range(len(starts) - 4)]
    # Starts, not only claims, keep the rate: no fifth start within the second.
    assert min(gaps) > 0.999, gaps
    assert starts[-1] - starts[0] < 4.0         # and it kept going, not one window a drain


@pytest.mark.parametrize("bad", ["0/min", "-1/s", "ten/s", "5/fortnight", 5, "20000/s"])
def test_a_bad_rate_is_refused_and_changes_nothing(conn, sql, bad):
    pgdrain.enqueue(conn, "call-api", queue="partner")
    with pytest.raises(pgdrain.InvalidJobError, match="rate: "):
        pgdrain.set_queue(conn, "partner", rate=bad)
    assert sql("SELECT count(*) AS n FROM pgdrain_queues") == [{"n": 0}]
    with pytest.raises(ConfigError, match="sync: rate "):
        pgdrain.job("sync", rate=bad, registry=Registry())(lambda job: None)
