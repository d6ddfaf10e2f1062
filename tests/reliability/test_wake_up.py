"""No lost wake-up: a job enqueued at a random moment around a drain's exit, and rung for with
``pgdrain.aws.ring(conn)`` after its commit, starts without waiting for the schedule.

Lambda is played in-process: an asynchronous invoke (the doorbell's, a drain's continuation)
starts a drain on a thread, with a warm connection when one is idle, as a warm container
would. The database is real; the schedule is off. Each trial starts a drain for one job
that runs 0-20 ms, then enqueues a second job 0-40 ms later, so the second commit lands
before, during and after the first drain's last claim, slot release and final look."""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Callable

import pgdrain
from pgdrain.aws.doorbell import Doorbell
from pgdrain.db import Connector, connect
from pgdrain.drain import drain
from pgdrain.registry import Registry

TRIALS = 1000
WAIT_SECONDS = 10.0  # the schedule's minute is what a lost wake-up would cost


class LocalLambda:
    """Asynchronous invokes of the drain, run on threads (at most one per invoke)."""

    def __init__(self, database_url: str, registry: Registry, settings: pgdrain.Settings):
        self.url = database_url
        self.registry = registry
        self.settings = settings
        self.idle: list[Connector] = []
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.summaries: list[pgdrain.DrainSummary] = []
        self.invokes = 0

    # boto3's Lambda client, as the doorbell calls it
    def invoke(self, **_: object) -> dict[str, int]:
        self._start()
        return {"StatusCode": 202}

    # the drain's launcher
    def prepare(self) -> None:
        pass

    def launch(self, count: int, reason: str) -> int:
        for _ in range(count):
            self._start()
        return count

    def _start(self) -> None:
        thread = threading.Thread(target=self._run)
        with self.lock:
            self.invokes += 1
            self.threads.append(thread)
        thread.start()

    def _run(self) -> None:
        with self.lock:
            connector = self.idle.pop() if self.idle else Connector(
                lambda timeout=None: connect(self.url, timeout=timeout))
        deadline = time.monotonic() + 30
        summary = drain(connector, self.registry, self.settings,
                        time_left=lambda: deadline - time.monotonic(), launcher=self)
        with self.lock:
            self.summaries.append(summary)
            self.idle.append(connector)

    def settle(self) -> None:
        while True:
            with self.lock:
                running = [t for t in self.threads if t.is_alive()]
                self.threads = running
            if not running:
                return
            for thread in running:
                thread.join(timeout=WAIT_SECONDS)

    def close(self) -> None:
        self.settle()
        for connector in self.idle:
            connector.discard()


def test_a_job_enqueued_around_a_drains_exit_never_waits_for_the_schedule(
        database_url, scaled, figures):
    registry, started = Registry(), {}
    rng = random.Random(12)

    @pgdrain.job("first", registry=registry)
    def first(job):
        time.sleep(job.payload["ms"] / 1000)

    @pgdrain.job("second", registry=registry)
    def second(job):
        started[job.id] = time.monotonic()

    settings = pgdrain.Settings(max_drains=2, safety_margin_seconds=0.5)
    local = LocalLambda(database_url, registry, settings)
    doorbell = Doorbell("pgdrain-drain", client_factory=lambda: local)
    conn = connect(database_url)
    waits: list[float] = []
    outcomes: dict[str, int] = {}
    trials = scaled(TRIALS, "WAKE_UP_TRIALS")
    try:
        for _ in range(trials):
            pgdrain.enqueue(conn, "first", {"ms": rng.uniform(0, 20)})
            doorbell.ring(conn)
            time.sleep(rng.uniform(0, 0.04))
            job = pgdrain.enqueue(conn, "second", {})
            committed = time.monotonic()
            outcome = doorbell.ring(conn)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            _wait_for(lambda ident=job.id: ident in started, WAIT_SECONDS)
            waits.append(started[job.id] - committed)
        local.settle()
        left = conn.run("SELECT count(*) FROM jobs WHERE status <> 'done'")[0][0]
    finally:
        local.close()
        conn.close()
    assert len(waits) == trials and left == 0
    assert "rung" in outcomes and "skipped" in outcomes  # both paths were exercised
    waits.sort()
    figures("wake-up", trials=trials, invokes=local.invokes,
             p50_ms=round(statistics.median(waits) * 1000, 1),
             p99_ms=round(waits[int(len(waits) * 0.99) - 1] * 1000, 1),
             max_ms=round(waits[-1] * 1000, 1), **outcomes)


def _wait_for(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"a job waited more than {seconds} s: its wake-up was lost")
        time.sleep(0.001)
