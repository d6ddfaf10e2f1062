"""The concurrent drain (PGDRAIN_CONCURRENCY > 1) against the in-memory store: handlers on
worker threads and on one event loop, each under its own time limit; the drain's rules
(release before the deadline, the claim guard, snooze and discard) hold for many at once.
Transactional handlers need PostgreSQL: tests/integration/test_drain_concurrency.py."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable

import pytest

import pgdrain
from pgdrain.drain import drain
from pgdrain.errors import HandlerTimeout
from pgdrain.policy import Backoff
from pgdrain.registry import Registry
from tests.support.drains import KEEP_HISTORY_SECONDS
from tests.support.fake_store import FakeStore

SETTINGS = pgdrain.Settings(safety_margin_seconds=0.5, backoff=Backoff(2, 60, jitter=0),
                            retention_seconds=KEEP_HISTORY_SECONDS, concurrency=10)


def clock(seconds: float) -> Callable[[], float]:
    deadline = time.monotonic() + seconds
    return lambda: deadline - time.monotonic()


def run(store: FakeStore, registry: Registry, seconds: float = 60, launcher=None, **changes):
    settings = dataclasses.replace(SETTINGS, **changes)
    return drain(store, registry, settings, time_left=clock(seconds), launcher=launcher)


class HighWater:
    """How many handlers ran at once, at most."""

    def __init__(self) -> None:
        self.now = self.most = 0
        self.lock = threading.Lock()

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


def test_handlers_run_at_once_up_to_the_concurrency():
    registry, water = Registry(), HighWater()

    @pgdrain.job("wait", registry=registry)
    def wait(job):
        with water:
            time.sleep(0.1)

    store = FakeStore()
    ids = [store.add("wait") for _ in range(30)]
    summary = run(store, registry)
    assert (summary.claimed, summary.done, summary.stopped) == (30, 30, "empty")
    assert water.most == 10
    assert [store.status(i) for i in ids] == [("done", 1)] * 30


def test_a_type_limit_caps_its_own_jobs_only():
    registry, capped, free = Registry(), HighWater(), HighWater()

    @pgdrain.job("capped", concurrency=2, registry=registry)
    def capped_job(job):
        with capped:
            time.sleep(0.05)

    @pgdrain.job("free", registry=registry)
    def free_job(job):
        with free:
            time.sleep(0.05)

    store = FakeStore()
    for _ in range(10):
        store.add("capped")
        store.add("free")
    summary = run(store, registry)
    assert summary.done == 20
    assert capped.most == 2 and free.most >= 5


def test_async_handlers_share_one_event_loop():
    registry, water, loops = Registry(), HighWater(), set()

    @pgdrain.job("io", registry=registry)
    async def io(job):
        loops.add(id(asyncio.get_running_loop()))
        with water:
            await asyncio.sleep(0.1)
        return job.id

    store = FakeStore()
    ids = [store.add("io") for _ in range(20)]
    summary = run(store, registry)
    assert summary.done == 20 and water.most == 10 and len(loops) == 1
    assert [store.status(i) for i in ids] == [("done", 1)] * 20


def test_an_async_handler_over_its_limit_is_cancelled_and_retried():
    registry = Registry()

    @pgdrain.job("slow-io", timeout=0.2, registry=registry)
    async def slow_io(job):
        await asyncio.sleep(30)

    store = FakeStore()
    ident = store.add("slow-io")
    summary = run(store, registry)
    assert (summary.retried, summary.abandoned) == (1, 0)
    assert store.status(ident) == ("pending", 1)
    assert store.jobs[ident]["last_error"].startswith("HandlerTimeout")


def test_a_thread_over_its_limit_is_interrupted_and_retried():
    registry, after = Registry(), []

    @pgdrain.job("loop", timeout=0.2, registry=registry)
    def loop(job):
        for _ in range(1000):  # Python code between short waits: interruptible
            time.sleep(0.01)
        after.append(job.id)

    store = FakeStore()
    ident = store.add("loop")
    summary = run(store, registry)
    assert (summary.retried, summary.abandoned, after) == (1, 0, [])
    assert store.status(ident) == ("pending", 1)
    assert "HandlerTimeout" in store.jobs[ident]["last_error"]


def test_a_runaway_is_recorded_timed_out_abandoned_and_never_written():
    registry, released = Registry(), threading.Event()

    @pgdrain.job("stubborn", timeout=0.2, registry=registry)
    def stubborn(job):
        while not released.is_set():
            # The fault under test: it swallows every interrupt.
            with contextlib.suppress(HandlerTimeout):
                time.sleep(0.01)

    @pgdrain.job("ok", registry=registry)
    def ok(job):
        pass

    store = FakeStore()
    stuck = store.add("stubborn")
    others = [store.add("ok") for _ in range(5)]
    summary = run(store, registry, seconds=5)
    try:
        assert (summary.retried, summary.abandoned, summary.done) == (1, 1, 5)
        assert store.status(stuck) == ("pending", 1)
        assert [store.status(i) for i in others] == [("done", 1)] * 5
        writes = store.calls.count("finish_many")
    finally:
        released.set()
    time.sleep(0.1)  # the runaway ends now: nothing more is written for it
    assert store.calls.count("finish_many") == writes and store.status(stuck) == ("pending", 1)


def test_jobs_that_cannot_start_before_the_deadline_are_released_uncharged():
    registry = Registry()

    @pgdrain.job("second", timeout=1.0, registry=registry)
    def second(job):
        for _ in range(12):
            time.sleep(0.05)

    store = FakeStore()
    ids = [store.add("second") for _ in range(10)]
    # 3 s with a 0.5 s margin, two 0.6 s jobs at a time with 1 s budgets: rounds start at
    # about 0, 0.6 and 1.2 s; the next would have less than its budget left.
    left = clock(3.0)
    summary = run(store, registry, seconds=3.0, concurrency=2)
    assert left() > 0
    assert summary.stopped == "deadline" and 2 <= summary.done < 10
    statuses = [store.status(i) for i in ids]
    done = statuses.count(("done", 1))
    assert done == summary.done and statuses.count(("pending", 0)) == 10 - done
    assert summary.released == summary.claimed - done


def test_snooze_discard_and_a_lost_claim_with_many_running():
    registry = Registry()
    store = FakeStore()

    @pgdrain.job("snooze", registry=registry)
    def snooze(job):
        raise pgdrain.Snooze(30)

    @pgdrain.job("discard", registry=registry)
    def discard(job):
        raise pgdrain.Discard("not wanted")

    @pgdrain.job("lost", registry=registry)
    def lost(job):
        store.jobs[job.id]["lease_token"] = "someone-else"  # the janitor took it meanwhile

    @pgdrain.job("exit", registry=registry)
    def exit_(job):
        raise SystemExit(3)  # on a worker thread: this job's failure, not the drain's end

    ids = {t: store.add(t) for t in ("snooze", "discard", "lost", "exit")}
    summary = run(store, registry)
    assert (summary.snoozed, summary.failed, summary.stale, summary.retried) == (1, 1, 1, 1)
    assert store.status(ids["snooze"]) == ("pending", 0)
    assert store.status(ids["discard"]) == ("failed", 1)
    assert store.status(ids["exit"]) == ("pending", 1)


class Launcher:
    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    def launch(self, count: int, reason: str) -> int:
        self.calls.append((count, reason))
        return count


def test_a_backlog_fans_out_and_a_drain_stopped_with_work_left_continues(registry_ok):
    store, launcher = FakeStore(), Launcher()
    for _ in range(35):
        store.add("ok")
    summary = run(store, registry_ok, launcher=launcher, max_jobs=5, max_drains=3)
    # 35 due, 10 per drain: up to 2 more besides this one (the cap is 3); then it stopped at
    # max_jobs with work left and started one more for it.
    assert launcher.calls == [(2, "fan-out"), (1, "continue")]
    assert (summary.stopped, summary.continued) == ("max_jobs", 3)


def test_fan_out_counts_the_drains_already_running(registry_ok):
    store, launcher = FakeStore(slots_taken={1, 2}), Launcher()
    for _ in range(35):
        store.add("ok")
    run(store, registry_ok, launcher=launcher, max_drains=3)
    assert launcher.calls == []  # three running, this one included; and it emptied the queue


def test_fan_out_counts_the_drains_launched_and_not_yet_started(registry_ok):
    # A drain of a burst: another drain launched two more a moment ago, one of them this one.
    store, launcher = FakeStore(), Launcher()
    assert store.launches.reserve(2, 4, len(store.slots_taken) + 1) == 2
    store.slots_taken.add(3)                    # the drain that launched them, still running
    for _ in range(35):
        store.add("ok")
    run(store, registry_ok, launcher=launcher, max_drains=4)
    # Four drains want to run (35 due, 10 each): the launcher, this one, the sibling still
    # on its way; one more fits under the cap, not three.
    assert launcher.calls[0] == (1, "fan-out")


class FailingLauncher(Launcher):
    def launch(self, count: int, reason: str) -> int:
        self.calls.append((count, reason))
        return 0  # throttled, or the endpoint unreachable


def test_launches_that_failed_give_their_room_back(registry_ok):
    store, launcher = FakeStore(), FailingLauncher()
    for _ in range(35):
        store.add("ok")
    summary = run(store, registry_ok, launcher=launcher, max_jobs=5, max_drains=3)
    # Nothing on its way: the continuation had the room the failed fan-out gave back.
    assert launcher.calls == [(2, "fan-out"), (1, "continue")]
    assert summary.continued == 0 and store.launches.on_their_way() == 0


def test_an_empty_queue_starts_nothing(registry_ok):
    store, launcher = FakeStore(), Launcher()
    summary = run(store, registry_ok, launcher=launcher)
    assert (launcher.calls, summary.continued, summary.stopped) == ([], 0, "empty")


@pytest.fixture
def registry_ok() -> Registry:
    registry = Registry()

    @pgdrain.job("ok", registry=registry)
    def ok(job):
        pass

    return registry


def test_a_job_whose_claim_was_lost_runs_alone():
    registry, water, alone = Registry(), HighWater(), []

    @pgdrain.job("wait", registry=registry)
    def wait(job):
        with water:
            if job.lost_claims:
                alone.append(water.now)  # how many ran beside it, itself included
            time.sleep(0.05)

    store = FakeStore()
    others = [store.add("wait") for _ in range(20)]
    suspect = store.add("wait", lost_claims=1)
    summary = run(store, registry)
    assert summary.done == 21 and alone == [1]
    assert store.status(suspect) == ("done", 1)
    assert [store.status(i) for i in others] == [("done", 1)] * 20
