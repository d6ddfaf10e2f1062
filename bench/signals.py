"""What signals cost when used: JOBS jobs each wait for a signal of their own
(``pgdrain.WaitFor``); the app sends each one in its own transaction (``pgdrain.signal`` and
the commit: the send's cost), then a drain starts at once, as the doorbell's invocation of the
drain function would (a warm container; the Lambda invoke's own latency is not in it), and the
time from the commit to the handler's resumed start is the signal -> resume latency, p50 and
p99. Also what entering the wait costs a drain: JOBS jobs that raise WaitFor against as many
that raise Snooze, drained at default settings.

    .venv/bin/python bench/signals.py
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test .venv/bin/python bench/signals.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import pgdrain
from pgdrain import Settings
from pgdrain.db import Connector, connect
from pgdrain.drain import drain
from pgdrain.migrate import migrate
from pgdrain.registry import Registry
from pgdrain_dev.embedded import scratch_database


def _registry(started: dict[int, float]) -> Registry:
    registry = Registry()

    @pgdrain.job("waiter", registry=registry)
    def waiter(job: pgdrain.Job) -> None:
        if job.signal is None:
            raise pgdrain.WaitFor(f"s:{job.id}", timeout=3600)
        started[job.id] = time.perf_counter()

    @pgdrain.job("snoozer", registry=registry)
    def snoozer(job: pgdrain.Job) -> None:
        raise pgdrain.Snooze(3600)

    return registry


def _drain(url: str, registry: Registry) -> int:
    """One drain invocation, as a warm container runs it: a connection kept open."""
    connector = Connector(lambda timeout=None: connect(url, timeout=timeout))
    try:
        claimed = 0
        while True:
            done = drain(connector, registry, Settings(), time_left=lambda: 600.0).claimed
            claimed += done
            if not done:
                return claimed
    finally:
        connector.discard()


def enter(url: str, job_type: str, jobs: int) -> float:
    """Seconds for drains to run ``jobs`` jobs of ``job_type`` into their wait or snooze."""
    registry = _registry({})
    conn = connect(url)
    try:
        conn.run("TRUNCATE jobs, pgdrain_signals RESTART IDENTITY")
        pgdrain.enqueue_many(conn, [{"job_type": job_type} for _ in range(jobs)])
        at = time.perf_counter()
        assert _drain(url, registry) == jobs
        return time.perf_counter() - at
    finally:
        conn.close()


def resume(url: str, jobs: int) -> tuple[list[float], list[float]]:
    """(send + commit seconds, commit -> handler start seconds) for each of ``jobs``."""
    started: dict[int, float] = {}
    registry = _registry(started)
    conn = connect(url)
    connector = Connector(lambda timeout=None: connect(url, timeout=timeout))
    sends, latencies = [], []
    try:
        conn.run("TRUNCATE jobs, pgdrain_signals RESTART IDENTITY")
        ids = [r.id for r in pgdrain.enqueue_many(conn, [{"job_type": "waiter"}] * jobs)]
        _drain(url, registry)
        for ident in ids:
            at = time.perf_counter()
            conn.run("BEGIN")
            pgdrain.signal(conn, f"s:{ident}", {"ok": True})
            conn.run("COMMIT")
            committed = time.perf_counter()
            drain(connector, registry, Settings(), time_left=lambda: 600.0)
            sends.append(committed - at)
            latencies.append(started[ident] - committed)
    finally:
        connector.discard()
        conn.close()
    return sends, latencies


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with scratch_database("pgdrain_signals") as url:
        conn = connect(url)
        migrate(conn)
        conn.close()
        sends: list[float] = []
        latencies: list[float] = []
        for _ in range(args.rounds):
            s, lat = resume(url, args.jobs)
            sends += s
            latencies += lat
        ms = [x * 1000 for x in latencies]
        print(f"signal -> resume, {len(ms):,} signals (a drain started at each commit):")
        print(f"  commit -> handler started: p50 {_p(ms, 0.5):.1f} ms, p99 {_p(ms, 0.99):.1f} "
              f"ms, max {max(ms):.1f} ms")
        send_ms = [x * 1000 for x in sends]
        print(f"  pgdrain.signal + commit: p50 {_p(send_ms, 0.5):.2f} ms, p99 "
              f"{_p(send_ms, 0.99):.2f} ms")
        pairs = [(enter(url, "waiter", args.jobs), enter(url, "snoozer", args.jobs))
                 for _ in range(args.rounds)]
        wait = statistics.median(p[0] for p in pairs)
        snooze = statistics.median(p[1] for p in pairs)
        print(f"entering the wait: {args.jobs:,} jobs raising WaitFor drained in "
              f"{wait * 1000:.0f} ms, raising Snooze {snooze * 1000:.0f} ms (median of "
              f"{args.rounds}; ratio {wait / snooze:.2f})")


if __name__ == "__main__":
    main()
