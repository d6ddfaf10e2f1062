"""Jobs longer than an invocation, against PostgreSQL: a resumable job saves its state with
``job.checkpoint``, reads it back as ``job.state``, continues across drains (``pgdrain.Continue``
or running out of time after a checkpoint) without spending attempts, and resumes from its last
checkpoint after a killed run. Scaled down: 40 steps of 0.1 s across drains of 2 s stand for
40 one-minute steps across a 120 s function."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest

import pgdrain
from pgdrain.db import connect
from pgdrain.registry import Registry
from tests.support.drains import run_drain

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
LONG_JOB_EXAMPLE = re.search(r"<!-- long-job-example -->\n```python\n(.*?)```", README,
                             re.DOTALL)[1]
STEPS = 40
STEP_SECONDS = 0.1
DRAIN_SECONDS = 2.0


def _long_export(ran: list[int], registry: Registry) -> None:
    @pgdrain.job("long-export", resumable=True, timeout=3600, registry=registry)
    def long_export(job: pgdrain.Job) -> dict:
        step = (job.state or {}).get("step", 0)
        while step < STEPS:
            time.sleep(STEP_SECONDS)  # a page of the export
            ran.append(step)
            step += 1
            job.checkpoint({"step": step})
        return {"steps": step}


@pytest.mark.parametrize("concurrency", [1, 4], ids=["on the drain's thread", "on workers"])
def test_a_forty_step_job_runs_to_completion_across_short_drains(database_url, conn, sql,
                                                                  concurrency):
    ran: list[int] = []
    registry = Registry()
    _long_export(ran, registry)
    job = pgdrain.enqueue(conn, "long-export", {})
    drains = []
    # Bounded by the job's progress, not by a count of drains: on a loaded machine a drain
    # may get through only a few steps, and that is still the behaviour under test. It stops
    # once three drains in a row move the checkpoint no further (or after a generous wall
    # bound), so a job that never progresses still fails the test.
    last_step, idle, started = -1, 0, time.monotonic()
    while idle < 3 and time.monotonic() - started < 180:
        drains.append(run_drain(database_url, registry, seconds=DRAIN_SECONDS,
                                concurrency=concurrency))
        row = sql("SELECT status, state FROM jobs WHERE id = :id", id=job.id)[0]
        if row["status"] == "done":
            break
        step = (row["state"] or {}).get("step", 0)
        idle = idle + 1 if step <= last_step else 0
        last_step = max(last_step, step)
    row = sql("SELECT status, attempts, result, state FROM jobs WHERE id = :id", id=job.id)[0]
    assert row["status"] == "done" and row["result"] == {"steps": STEPS}
    assert row["state"] == {"step": STEPS}
    # Longer than any one drain: it took several, and continuing spent no attempt.
    assert len(drains) >= 3
    assert row["attempts"] == 1
    # Each drain before the last continued it (or, on a machine so loaded that the drain had
    # under a second left for it, handed it back unstarted and uncharged).
    assert all(d.snoozed + d.released == 1 for d in drains[:-1]), drains
    # Every step ran; a step cut off before its checkpoint ran again, at most once a drain.
    assert sorted(set(ran)) == list(range(STEPS))
    assert len(ran) - STEPS <= len(drains) - 1


def test_continue_puts_the_job_straight_back_without_spending_an_attempt(database_url, conn,
                                                                         sql):
    runs: list[object] = []
    registry = Registry()

    @pgdrain.job("paged", resumable=True, max_attempts=1, registry=registry)
    def paged(job: pgdrain.Job) -> str:
        runs.append(job.state)
        page = (job.state or {"page": 0})["page"]
        if page < 3:
            job.checkpoint({"page": page + 1})
            raise pgdrain.Continue()
        return "all pages"

    job = pgdrain.enqueue(conn, "paged", {})
    summary = run_drain(database_url, registry)
    assert runs == [None, {"page": 1}, {"page": 2}, {"page": 3}]
    assert (summary.snoozed, summary.done) == (3, 1)
    row = sql("SELECT status, attempts, result FROM jobs WHERE id = :id", id=job.id)[0]
    assert row == {"status": "done", "attempts": 1, "result": "all pages"}


def test_a_killed_run_resumes_from_its_last_checkpoint(database_url, conn, sql):
    # A run that saved step 7, then its invocation was killed: no outcome written, its
    # lease left to expire.
    job = pgdrain.enqueue(conn, "resume-me", {})
    claimed = pgdrain.claim(conn, batch_size=1, lease_seconds=60)[0]
    assert pgdrain.store.save_checkpoints(conn, [claimed], [json.dumps({"step": 7})]) == {job.id}
    sql("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = :id",
        id=job.id)
    seen: list[object] = []
    registry = Registry()
    pgdrain.job("resume-me", resumable=True, registry=registry)(
        lambda job: seen.append(job.state))
    summary = run_drain(database_url, registry)
    assert summary.reclaimed == 1 and summary.done == 1
    assert seen == [{"step": 7}]


def test_a_time_limit_that_runs_out_while_a_checkpoint_is_saved_waits_for_its_answer(
        database_url, conn, sql, connect_to):
    # The checkpoint's write waits on a row lock held elsewhere; the handler's 1 s limit runs
    # out meanwhile. Raised inside the drain's read of the answer, HandlerTimeout left the
    # answer unread on the drain's connection: the drain's next statement read it as its own
    # and the drain failed. Now the limit waits for the answer: the checkpoint is saved, the
    # run stops there, and the job continues from it.
    wanted, locked = threading.Event(), threading.Event()
    registry = Registry()

    @pgdrain.job("held-checkpoint", resumable=True, timeout=1, registry=registry)
    def held_checkpoint(job: pgdrain.Job) -> str:
        if job.state:
            return f"resumed at {job.state['step']}"
        wanted.set()
        assert locked.wait(10)
        job.checkpoint({"step": 1})
        time.sleep(10)  # the limit stops it here
        return "not reached"

    job = pgdrain.enqueue(conn, "held-checkpoint", {})
    other = connect_to()

    def hold_the_row() -> None:
        assert wanted.wait(10)
        other.run("BEGIN")
        other.run("SELECT id FROM jobs WHERE id = :id FOR UPDATE", id=job.id)
        locked.set()
        time.sleep(1.5)  # past the handler's limit
        other.run("ROLLBACK")

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    try:
        summary = run_drain(database_url, registry, concurrency=1)
    finally:
        holder.join(15)
    assert summary.stopped == "empty" and summary.error is None, summary
    assert summary.snoozed == 1 and summary.done == 1, summary
    row = sql("SELECT status, attempts, result, state FROM jobs WHERE id = :id", id=job.id)[0]
    assert row == {"status": "done", "attempts": 1, "result": "resumed at 1",
                   "state": {"step": 1}}


def test_a_run_that_saved_nothing_and_ran_out_of_time_spends_its_attempt(database_url, conn,
                                                                          sql):
    registry = Registry()

    @pgdrain.job("stuck", resumable=True, timeout=0.3, max_attempts=1, registry=registry)
    def stuck(job: pgdrain.Job) -> None:
        while True:  # busy, and never saves where it is
            time.sleep(0.01)

    job = pgdrain.enqueue(conn, "stuck", {}, max_attempts=1)
    summary = run_drain(database_url, registry)
    assert (summary.snoozed, summary.failed) == (0, 1)
    row = sql("SELECT status, attempts, last_error FROM jobs WHERE id = :id", id=job.id)[0]
    assert (row["status"], row["attempts"]) == ("failed", 1)
    assert "timed out" in row["last_error"]


@pytest.mark.parametrize("concurrency", [1, 4], ids=["on the drain's thread", "on workers"])
def test_a_run_whose_job_was_taken_from_it_saves_nothing(database_url, conn, sql, concurrency):
    told: list[str] = []
    registry = Registry()

    @pgdrain.job("taken", resumable=True, max_attempts=1, registry=registry)
    def taken(job: pgdrain.Job) -> None:
        job.checkpoint({"mine": True})
        other = connect(database_url)
        try:  # as the janitor does when it reclaims an expired lease: a new claim's token
            other.run("UPDATE jobs SET lease_token = gen_random_uuid() WHERE id = :id",
                      id=job.id)
        finally:
            other.close()
        try:
            job.checkpoint({"mine": False})
        except pgdrain.CheckpointNotSaved as exc:
            told.append(str(exc))
            raise

    job = pgdrain.enqueue(conn, "taken", {})
    summary = run_drain(database_url, registry, concurrency=concurrency)
    assert len(told) == 1 and "no longer this run's" in told[0]
    assert summary.stale == 1
    assert sql("SELECT state FROM jobs WHERE id = :id", id=job.id) == [{"state": {"mine": True}}]


def test_checkpoints_need_a_resumable_type_and_json_state(database_url, conn, sql):
    errors: list[BaseException] = []
    registry = Registry()

    @pgdrain.job("plain", max_attempts=1, registry=registry)
    def plain(job: pgdrain.Job) -> None:
        try:
            job.checkpoint({"step": 1})
        except TypeError as exc:
            errors.append(exc)
            raise

    @pgdrain.job("odd-state", resumable=True, max_attempts=1, registry=registry)
    def odd_state(job: pgdrain.Job) -> None:
        try:
            job.checkpoint({"when": threading.Event()})
        except ValueError as exc:
            errors.append(exc)
            raise

    pgdrain.enqueue(conn, "plain", {})
    pgdrain.enqueue(conn, "odd-state", {})
    run_drain(database_url, registry)
    assert [type(e) for e in errors] == [TypeError, ValueError]
    assert "resumable=True" in str(errors[0])
    assert "checkpoint not saved: it is not JSON" in str(errors[1])
    assert sql("SELECT count(*) AS n FROM jobs WHERE state IS NOT NULL") == [{"n": 0}]


def test_outside_a_drain_a_checkpoint_is_kept_in_memory():
    job = pgdrain.Job(id=1, job_type="t", payload={}, attempts=1, max_attempts=3,
                      queue="default", priority=0, run_at="now", created_at="now",
                      claimed_at=None, lease_expires_at=None, lease_token="x")  # type: ignore[arg-type]
    assert job.state is None
    job.checkpoint({"step": 2})
    assert job.state == {"step": 2}


def test_the_readmes_long_job_runs_as_written(database_url, conn, sql, monkeypatch):
    registry = Registry()
    written: list[int] = []

    def write_page(export_id: str, page: int) -> None:
        time.sleep(STEP_SECONDS)
        written.append(page)

    # As written, but registered in a registry of the test's own (the one change).
    monkeypatch.setattr(pgdrain, "job", lambda *a, **k: pgdrain.registry.job(
        *a, **k, registry=registry))
    exec(LONG_JOB_EXAMPLE, {"write_page": write_page})
    job = pgdrain.enqueue(conn, "export-pages", {"export_id": "e-1", "pages": 30})
    for _ in range(10):
        run_drain(database_url, registry, seconds=DRAIN_SECONDS)
        if sql("SELECT status FROM jobs WHERE id = :id", id=job.id)[0]["status"] == "done":
            break
    row = sql("SELECT status, attempts, result FROM jobs WHERE id = :id", id=job.id)[0]
    assert row == {"status": "done", "attempts": 1, "result": {"pages": 30}}
    assert sorted(set(written)) == list(range(30))


def test_a_continuing_job_keeps_its_ordering_key_and_its_queues_cap(database_url, conn, sql):
    """Between its runs a resumable job is pending with its id: the job after it on the same
    ordering key waits until it is done, and each run takes the capped queue's one slot."""
    order: list[tuple[str, int]] = []
    registry = Registry()

    @pgdrain.job("keyed-pages", resumable=True, registry=registry)
    def keyed_pages(job: pgdrain.Job) -> None:
        page = (job.state or {}).get("page", 0) + 1
        order.append((job.payload["name"], page))
        job.checkpoint({"page": page})
        if page < 3:
            raise pgdrain.Continue()

    first = pgdrain.enqueue(conn, "keyed-pages", {"name": "first"}, queue="partner",
                            ordering_key="account-7").id
    pgdrain.enqueue(conn, "keyed-pages", {"name": "second"}, queue="partner",
                    ordering_key="account-7")
    pgdrain.set_queue(conn, "partner", max_running=1)
    for _ in range(6):
        run_drain(database_url, registry, concurrency=4)
        if sql("SELECT count(*) AS n FROM jobs WHERE status <> 'done'")[0]["n"] == 0:
            break
    assert order == [("first", 1), ("first", 2), ("first", 3),
                     ("second", 1), ("second", 2), ("second", 3)]
    assert sql("SELECT attempts FROM jobs WHERE id = :id", id=first) == [{"attempts": 1}]
