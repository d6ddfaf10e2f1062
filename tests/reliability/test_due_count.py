"""The count that decides continuation and fan-out counts exactly what a claim could take
(issue: faults in the seams, item 3).

It used to count every due pending job outside capped and rate-limited queues: 30 jobs of an
ordering key waiting behind a retrying one looked due to it and to no claim, so every drain
that found nothing started another (1,867-2,649 invocations in 20 s, one job claimed); and it
left out capped and rate-limited work altogether, so a capped backlog never got a continuation
and waited for the schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pgdrain
from pgdrain import Settings
from pgdrain.db import Connector
from pgdrain.drain import PostgresStore, drain
from pgdrain.flow import parse_rate
from pgdrain.registry import Registry
from tests.support.drains import clock, connector_to


class CountingLauncher:
    """Counts the drains a drain asks for (none is started)."""

    def __init__(self) -> None:
        self.launched: list[tuple[int, str]] = []

    def prepare(self) -> None:
        pass

    def launch(self, count: int, reason: str) -> int:
        self.launched.append((count, reason))
        return count


def noop_registry(**rated: str) -> Registry:
    registry = Registry()
    for job_type in ("noop", "other", *rated):
        pgdrain.job(job_type, registry=registry, rate=rated.get(job_type))(lambda job: None)
    return registry


def due(database_url: str, registry: Registry, limit: int = 100) -> int:
    connector = connector_to(database_url)
    try:
        store = PostgresStore(connector, 0, (), registry.type_rates())
        connector.open(None)
        count = store.due(limit=limit, queues=None)
        # Read queue by queue (a drain beside a paused or controlled queue counts so), the
        # same count.
        assert store.due(limit=limit, queues=None, by_queue=True) == count
        return count
    finally:
        connector.discard()


def run(database_url: str, registry: Registry, **settings: Any
        ) -> tuple[Any, CountingLauncher]:
    launcher = CountingLauncher()
    connector: Connector = connector_to(database_url)
    try:
        summary = drain(connector, registry, Settings(**{"max_drains": 4, **settings}),
                        time_left=clock(10), launcher=launcher)
    finally:
        connector.discard()
    return summary, launcher


def keyed_backlog_behind_a_retry(conn: Any, sql: Callable[..., Any]) -> None:
    """One keyed job backing off for a minute, and 30 later jobs of its key (all due)."""
    first = pgdrain.enqueue(conn, "noop", ordering_key="customer-1").id
    for _ in range(30):
        pgdrain.enqueue(conn, "noop", ordering_key="customer-1")
    sql("UPDATE jobs SET attempts = 1, run_at = now() + interval '60 seconds' WHERE id = :id",
        id=first)


def test_jobs_of_a_key_behind_a_retrying_one_are_not_counted(database_url, conn, sql):
    keyed_backlog_behind_a_retry(conn, sql)
    registry = noop_registry()
    assert due(database_url, registry) == 0
    summary, launcher = run(database_url, registry)
    assert (summary.claimed, summary.stopped, summary.continued) == (0, "empty", 0)
    assert launcher.launched == []           # no fan-out, no continuation: no storm
    # A key's head is counted (and claimed), its later jobs not while it runs or waits.
    pgdrain.enqueue(conn, "noop", ordering_key="customer-2")
    pgdrain.enqueue(conn, "noop", ordering_key="customer-2")
    assert due(database_url, registry) == 1


def test_capped_work_is_counted_within_its_room_and_continued(database_url, conn, sql):
    for _ in range(22):
        pgdrain.enqueue(conn, "noop", queue="capped")
    pgdrain.set_queue(conn, "capped", max_running=5)
    registry = noop_registry()
    assert due(database_url, registry) == 5          # the cap's room, not 22 nor 0
    sql("UPDATE jobs SET status = 'running', attempts = 1, lease_expires_at = now() + "
        "interval '1 hour', lease_token = gen_random_uuid() WHERE id IN "
        "(SELECT id FROM jobs ORDER BY id LIMIT 3)")
    assert due(database_url, registry) == 2          # 3 run elsewhere
    sql("UPDATE jobs SET status = 'pending', attempts = 0, lease_expires_at = NULL, "
        "lease_token = NULL WHERE status = 'running'")
    # A drain that stops with capped work left (its job limit) starts a drain for it, as
    # for any backlog, instead of leaving it to the schedule.
    summary, launcher = run(database_url, registry, max_jobs=5)
    assert (summary.claimed, summary.done, summary.stopped) == (5, 5, "max_jobs")
    assert ("continue" in {reason for _, reason in launcher.launched}), launcher.launched
    # Paused, it is not counted at all.
    pgdrain.pause(conn, "capped")
    assert due(database_url, registry) == 0


def test_rate_limited_work_is_counted_within_the_window(database_url, conn, sql):
    for _ in range(10):
        pgdrain.enqueue(conn, "noop", queue="partner")
    for _ in range(10):
        pgdrain.enqueue(conn, "sync")
    pgdrain.set_queue(conn, "partner", rate="3/min")
    registry = noop_registry(sync="4/min")
    assert due(database_url, registry) == 3 + 4
    summary, launcher = run(database_url, registry)
    assert (summary.done, summary.stopped) == (7, "rate_limited")
    assert due(database_url, registry) == 0          # both windows full: nothing to take
    assert [reason for _, reason in launcher.launched if reason == "continue"] == []


def test_fan_out_counts_controlled_work_a_drain_could_take(database_url, conn, sql):
    for _ in range(40):
        pgdrain.enqueue(conn, "noop", queue="wide")
    pgdrain.set_queue(conn, "wide", max_running=1000, rate=str(parse_rate("1000/s")))
    _, launcher = run(database_url, noop_registry(), concurrency=10, max_jobs=1)
    # 40 claimable jobs at 10 a drain: three more drains (the cap of 4 in all).
    assert ("fan-out" in {reason for _, reason in launcher.launched}), launcher.launched
    assert sum(n for n, reason in launcher.launched if reason == "fan-out") == 3
