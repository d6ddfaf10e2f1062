"""What dependencies cost when used: a fan-in of PARENTS no-op jobs into one callback
(``after="finished"``), drained by DRAINS drains at once at default settings, and the time
from the last parent's handler returning to the callback's handler starting (the done write,
which the drain batches, the callback's countdown in it, and the next claim), p50 and p99
over ROUNDS rounds; and a graph of NODES no-op jobs (each depends on
up to three earlier ones), enqueued in one call and drained to its end, against as many
independent jobs.

    .venv/bin/python bench/dependencies.py
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test .venv/bin/python bench/dependencies.py
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time

import pgdrain
from pgdrain import Settings
from pgdrain.db import Connector, connect
from pgdrain.drain import drain
from pgdrain.migrate import migrate
from pgdrain.registry import Registry
from pgdrain_dev.embedded import scratch_database


def _registry(seen: dict[str, float]) -> Registry:
    registry = Registry()

    @pgdrain.job("noop", registry=registry)
    def noop(job: pgdrain.Job) -> None:
        seen["last parent"] = max(seen.get("last parent", 0.0), time.perf_counter())

    @pgdrain.job("callback", registry=registry)
    def callback(job: pgdrain.Job) -> int:
        seen["callback"] = time.perf_counter()
        return len(job.parents)

    return registry


def _drains(url: str, registry: Registry, count: int) -> float:
    """``count`` drains at once, each until the queue is empty; the seconds they took."""
    def one() -> None:
        connector = Connector(lambda timeout=None: connect(url, timeout=timeout))
        try:
            while drain(connector, registry, Settings(), time_left=lambda: 600.0).claimed:
                pass
        finally:
            connector.discard()

    threads = [threading.Thread(target=one) for _ in range(count)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - began


def fan_in(url: str, parents: int, drains: int) -> tuple[float, float, float]:
    """One round: (enqueue seconds, drain seconds, seconds from the last parent's handler
    returning to the callback's starting)."""
    seen: dict[str, float] = {}
    registry = _registry(seen)
    conn = connect(url)
    try:
        conn.run("TRUNCATE jobs, job_edges RESTART IDENTITY")
        batch = [{"job_type": "noop"} for _ in range(parents)]
        batch.append({"job_type": "callback", "after": "finished",
                      "depends_on": [{"index": i} for i in range(parents)]})
        at = time.perf_counter()
        pgdrain.enqueue_many(conn, batch)
        enqueued = time.perf_counter() - at
        took = _drains(url, registry, drains)
    finally:
        conn.close()
    return enqueued, took, seen["callback"] - seen["last parent"]


def graph(url: str, nodes: int, drains: int, *, edges: bool) -> tuple[float, float]:
    """A graph of ``nodes`` (or, without ``edges``, as many independent jobs): (enqueue
    seconds, drain seconds)."""
    rng = random.Random(7)
    batch: list[dict] = []
    for i in range(nodes):
        job: dict = {"job_type": "noop"}
        if edges and i:
            job["depends_on"] = [{"index": p} for p in
                                 sorted(set(rng.randrange(max(0, i - 50), i)
                                            for _ in range(rng.randint(1, 3))))]
        batch.append(job)
    registry = _registry({})
    conn = connect(url)
    try:
        conn.run("TRUNCATE jobs, job_edges RESTART IDENTITY")
        at = time.perf_counter()
        pgdrain.enqueue_many(conn, batch)
        enqueued = time.perf_counter() - at
        took = _drains(url, registry, drains)
        [[left]] = conn.run("SELECT count(*) FROM jobs WHERE status NOT IN ('done')")
        assert left == 0, left
    finally:
        conn.close()
    return enqueued, took


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parents", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--drains", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with scratch_database("pgdrain_dependencies") as url:
        conn = connect(url)
        migrate(conn)
        conn.close()
        rounds = [fan_in(url, args.parents, args.drains) for _ in range(args.rounds)]
        latencies = [r[2] * 1000 for r in rounds]
        print(f"fan-in of {args.parents:,} parents into one callback, {args.drains} drains, "
              f"{args.rounds} rounds:")
        print(f"  enqueue (one call) median {statistics.median(r[0] for r in rounds):.3f} s; "
              f"drain median {statistics.median(r[1] for r in rounds):.2f} s")
        print(f"  last parent returned -> callback started: p50 {_p(latencies, 0.5):.1f} ms, "
              f"p99 {_p(latencies, 0.99):.1f} ms, max {max(latencies):.1f} ms")
        for edges in (True, False):
            runs = [graph(url, args.nodes, args.drains, edges=edges) for _ in range(5)]
            what = "a graph of" if edges else "independent:"
            print(f"{what} {args.nodes:,} jobs: enqueue median "
                  f"{statistics.median(r[0] for r in runs) * 1000:.0f} ms, drained in "
                  f"{statistics.median(r[1] for r in runs) * 1000:.0f} ms (median of 5)")


if __name__ == "__main__":
    main()
