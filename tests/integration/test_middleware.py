"""Middleware and lifecycle hooks, against PostgreSQL through the real drain: the order they
run in, what a middleware's raise does to the attempt, that a middleware swallowing the time
limit cannot hold the drain (on its thread and on workers), transactional and async handlers
through them, and finish hooks that see the outcome but cannot change it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import pgdrain
from pgdrain.errors import ConfigError, HandlerTimeout
from pgdrain.registry import Registry
from tests.support.drains import run_drain


def _row(sql: Any, job_id: int) -> dict[str, Any]:
    return sql("SELECT status, attempts, result, last_error FROM jobs WHERE id = :id",
               id=job_id)[0]


def test_middleware_and_hooks_run_in_registration_order_around_the_handler(database_url,
                                                                          conn, sql):
    seen: list[str] = []
    registry = Registry()

    @pgdrain.on_start(registry=registry)
    def started(job: pgdrain.Job) -> None:
        seen.append(f"start {job.job_type}")

    @pgdrain.middleware(registry=registry)
    def outer(job: pgdrain.Job, call_next: Any) -> Any:
        seen.append("outer in")
        value = call_next()
        seen.append("outer out")
        return value

    @pgdrain.middleware(registry=registry)
    def inner(job: pgdrain.Job, call_next: Any) -> Any:
        seen.append("inner in")
        return {"wrapped": call_next()}

    @pgdrain.on_finish(registry=registry)
    def finished(job: pgdrain.Job, result: Any, error: BaseException | None) -> None:
        seen.append(f"finish {result} {error}")

    @pgdrain.job("greet", registry=registry)
    def greet(job: pgdrain.Job) -> str:
        seen.append("handler")
        return f"hello {job.payload['name']}"

    job = pgdrain.enqueue(conn, "greet", {"name": "Zoë"})
    summary = run_drain(database_url, registry)
    assert summary.done == 1
    assert seen == ["start greet", "outer in", "inner in", "handler",
                    "finish hello Zoë None", "outer out"]
    # What the middleware returned is the job's result.
    assert _row(sql, job.id)["result"] == {"wrapped": "hello Zoë"}


@pytest.mark.parametrize("concurrency", [1, 4], ids=["on the drain's thread", "on workers"])
def test_a_middleware_that_raises_fails_that_attempt_like_its_handler_would(
        database_url, conn, sql, concurrency):
    ran: list[int] = []
    registry = Registry()

    @pgdrain.middleware(registry=registry)
    def flagged(job: pgdrain.Job, call_next: Any) -> Any:
        if job.payload.get("flag") == "off":
            raise RuntimeError("feature flag off for this tenant")
        return call_next()

    @pgdrain.job("flagged", max_attempts=2, registry=registry)
    def handler(job: pgdrain.Job) -> None:
        ran.append(job.id)

    off = pgdrain.enqueue(conn, "flagged", {"flag": "off"})
    on = pgdrain.enqueue(conn, "flagged", {"flag": "on"})
    summary = run_drain(database_url, registry, concurrency=concurrency)
    assert (summary.done, summary.retried) == (1, 1)
    assert ran == [on.id]
    row = _row(sql, off.id)
    assert row["status"] == "pending" and row["attempts"] == 1
    assert "feature flag off for this tenant" in row["last_error"]
    assert _row(sql, on.id)["status"] == "done"


def test_snooze_and_discard_from_a_middleware_mean_what_they_mean_from_a_handler(
        database_url, conn, sql):
    registry = Registry()

    @pgdrain.middleware(registry=registry)
    def gate(job: pgdrain.Job, call_next: Any) -> Any:
        if job.payload["gate"] == "later":
            raise pgdrain.Snooze(3600)
        if job.payload["gate"] == "never":
            raise pgdrain.Discard("tenant deleted")
        return call_next()

    pgdrain.job("gated", registry=registry)(lambda job: None)
    later = pgdrain.enqueue(conn, "gated", {"gate": "later"})
    never = pgdrain.enqueue(conn, "gated", {"gate": "never"})
    run_drain(database_url, registry)
    later_row = sql("SELECT status, attempts, run_at > now() + interval '50 minutes' AS later"
                    " FROM jobs WHERE id = :id", id=later.id)[0]
    assert later_row == {"status": "pending", "attempts": 0, "later": True}
    never_row = _row(sql, never.id)
    assert never_row["status"] == "failed" and "tenant deleted" in never_row["last_error"]


@pytest.mark.parametrize("concurrency", [1, 2], ids=["on the drain's thread", "on workers"])
def test_a_middleware_that_swallows_the_time_limit_cannot_hold_the_drain(
        database_url, conn, sql, concurrency):
    registry = Registry()

    @pgdrain.middleware(registry=registry)
    def swallowing(job: pgdrain.Job, call_next: Any) -> Any:
        try:
            return call_next()
        except HandlerTimeout:
            return "swallowed"  # the fault under test

    @pgdrain.job("slow", timeout=0.5, max_attempts=3, registry=registry)
    def slow(job: pgdrain.Job) -> None:
        time.sleep(3)

    ran: list[int] = []
    pgdrain.job("quick", registry=registry)(lambda job: ran.append(job.id))
    slow_job = pgdrain.enqueue(conn, "slow", {})
    quick_job = pgdrain.enqueue(conn, "quick", {})
    summary = run_drain(database_url, registry, seconds=20, concurrency=concurrency)
    row = _row(sql, slow_job.id)
    # Recorded as timed out (retried), not done with the middleware's "swallowed".
    assert row["status"] == "pending" and row["attempts"] == 1, row
    assert "timed out" in row["last_error"] or "time limit" in row["last_error"], row
    assert row["result"] is None
    assert ran == [quick_job.id] and summary.done == 1


def test_a_transactional_handler_runs_through_middleware_and_its_writes_commit(
        database_url, conn, sql):
    sql("CREATE TABLE audit (note text)")
    seen: list[int] = []
    registry = Registry()

    @pgdrain.middleware(registry=registry)
    def note(job: pgdrain.Job, call_next: Any) -> Any:
        seen.append(job.id)
        return call_next()

    @pgdrain.job("audited", transactional=True, registry=registry)
    def audited(job: pgdrain.Job, tx: Any) -> None:
        tx.run("INSERT INTO audit (note) VALUES (:n)", n=job.payload["note"])

    job = pgdrain.enqueue(conn, "audited", {"note": "written once"})
    assert run_drain(database_url, registry).done == 1
    assert seen == [job.id]
    assert sql("SELECT note FROM audit") == [{"note": "written once"}]


def test_async_middleware_wraps_async_handlers_and_plain_middleware_plain_ones(
        database_url, conn, sql):
    seen: list[str] = []
    registry = Registry()

    @pgdrain.middleware(registry=registry)
    def plain(job: pgdrain.Job, call_next: Any) -> Any:
        seen.append(f"plain {job.job_type}")
        return call_next()

    @pgdrain.middleware(registry=registry)
    async def awaiting(job: pgdrain.Job, call_next: Any) -> Any:
        seen.append(f"async {job.job_type}")
        return {"awaited": await call_next()}

    @pgdrain.on_start(registry=registry)
    def started(job: pgdrain.Job) -> None:
        seen.append(f"start {job.job_type}")

    @pgdrain.job("fetch", registry=registry)
    async def fetch(job: pgdrain.Job) -> int:
        await asyncio.sleep(0)
        return 7

    pgdrain.job("sync", registry=registry)(lambda job: 8)
    fetched = pgdrain.enqueue(conn, "fetch", {})
    synced = pgdrain.enqueue(conn, "sync", {})
    assert run_drain(database_url, registry, concurrency=2).done == 2
    assert sorted(seen) == ["async fetch", "plain sync", "start fetch", "start sync"]
    assert _row(sql, fetched.id)["result"] == {"awaited": 7}
    assert _row(sql, synced.id)["result"] == 8


def test_a_finish_hook_sees_the_error_and_what_it_raises_changes_nothing(database_url, conn,
                                                                         sql, caplog):
    ends: list[tuple[Any, str | None]] = []
    registry = Registry()

    @pgdrain.on_finish(registry=registry)
    def record(job: pgdrain.Job, result: Any, error: BaseException | None) -> None:
        ends.append((result, None if error is None else str(error)))
        raise RuntimeError("metrics backend down")

    @pgdrain.job("maybe", max_attempts=1, registry=registry)
    def maybe(job: pgdrain.Job) -> str:
        if job.payload["fail"]:
            raise ValueError("bad row 12")
        return "ok"

    good = pgdrain.enqueue(conn, "maybe", {"fail": False})
    bad = pgdrain.enqueue(conn, "maybe", {"fail": True}, max_attempts=1)
    summary = run_drain(database_url, registry)
    assert (summary.done, summary.failed) == (1, 1)
    assert sorted(ends, key=str) == sorted([("ok", None), (None, "bad row 12")], key=str)
    assert _row(sql, good.id)["status"] == "done"
    assert "bad row 12" in _row(sql, bad.id)["last_error"]
    assert "metrics backend down" not in (_row(sql, good.id)["last_error"] or "")
    assert "on_finish hook" in caplog.text


def test_nothing_registered_leaves_the_handler_as_it_is():
    from pgdrain.middleware import applied

    registry = Registry()
    pgdrain.job("bare", registry=registry)(lambda job: None)
    handler = registry.get("bare")
    assert applied(registry, handler) is handler


def test_bad_registrations_say_what_is_wrong():
    registry = Registry()
    with pytest.raises(ConfigError, match=r"takes \(job, call_next\)"):
        pgdrain.middleware(lambda job: None, registry=registry)
    with pytest.raises(ConfigError, match="must be a function"):
        pgdrain.on_start("not a function", registry=registry)  # type: ignore[arg-type]

    async def async_hook(job: Any) -> None:
        return None

    with pytest.raises(ConfigError, match="plain function"):
        pgdrain.on_start(async_hook, registry=registry)
    assert registry.layers() == ()


def test_a_middleware_registered_after_a_drain_started_applies_from_the_next_attempt():
    from pgdrain.middleware import applied

    registry = Registry()
    pgdrain.job("late", registry=registry)(lambda job: "bare")
    handler = registry.get("late")
    assert applied(registry, handler) is handler
    pgdrain.middleware(lambda job, call_next: ("wrapped", call_next()), registry=registry)
    wrapped = applied(registry, handler)
    assert wrapped is not handler and wrapped.func(None) == ("wrapped", "bare")
    assert applied(registry, handler) is wrapped  # built once


def test_a_batch_handlers_middleware_goes_around_its_one_call_with_the_list(database_url,
                                                                            conn, sql):
    seen: list[Any] = []
    registry = Registry()

    @pgdrain.middleware(registry=registry)
    def around_batch(jobs: Any, call_next: Any) -> Any:
        # What code written for one job asks works on the batch too (the README's example).
        seen.append((jobs.job_type, jobs.queue, jobs.id, sorted(j.id for j in jobs)))
        return call_next()

    @pgdrain.job("index-docs", batch_size=10, registry=registry)
    def index(jobs: list[pgdrain.Job]) -> None:
        return None

    ids = [r.id for r in pgdrain.enqueue_many(conn, [{"job_type": "index-docs"}] * 3)]
    assert run_drain(database_url, registry).done == 3
    assert seen == [("index-docs", "default", min(ids), sorted(ids))]
    assert {r["status"] for r in sql("SELECT status FROM jobs")} == {"done"}
