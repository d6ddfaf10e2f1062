"""Batch handlers: no-op jobs per second through one drain, one job a call (the plain no-op
handler) against a batch handler at 1, 10 and 100 jobs a call, and at 100 returning a result
for each item; the same run, rounds interleaved (each round runs every configuration once, in
a rotated order), medians.

    .venv/bin/python bench/batches.py [--jobs 5000] [--rounds 3] [--only "100 a call"]
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test .venv/bin/python bench/batches.py

One drain (``pgdrain.drain.drain``, as the function calls it) in this process, on the
embedded PostgreSQL or DATABASE_URL's server (a scratch database, dropped after); the jobs
are inserted by one plain INSERT before the clock starts, and the time is the drain's, from
its call until it returns with the queue empty. Done rows are not kept (the shipped default).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import pgdrain
from pgdrain import Settings
from pgdrain.db import Connector, connect
from pgdrain.drain import drain
from pgdrain.migrate import migrate
from pgdrain.registry import Registry
from pgdrain_dev.embedded import scratch_database

FILL = ("INSERT INTO jobs (job_type, payload) "
        "SELECT :job_type, jsonb_build_object('n', i) FROM generate_series(1, :n) AS i")


def registries() -> dict[str, tuple[str, Registry]]:
    """Each configuration's label: its job type and registry."""
    found: dict[str, tuple[str, Registry]] = {}
    plain = Registry()

    @pgdrain.job("noop", timeout=5, registry=plain)
    def noop(job: pgdrain.Job) -> None:
        pass

    found["one job a call (plain handler)"] = ("noop", plain)
    for size in (1, 10, 100):
        registry = Registry()
        pgdrain.job("noop-batch", batch_size=size, timeout=5, registry=registry)(_nothing)
        found[f"batch handler, {size} a call"] = ("noop-batch", registry)
    results = Registry()
    pgdrain.job("noop-batch", batch_size=100, timeout=5, registry=results)(_each_result)
    found["batch handler, 100 a call, a result each"] = ("noop-batch", results)
    return found


def _nothing(jobs: list[pgdrain.Job]) -> None:
    return None


def _each_result(jobs: list[pgdrain.Job]) -> dict[int, Any]:
    return {job.id: job.payload["n"] for job in jobs}


def one_round(url: str, job_type: str, registry: Registry, jobs: int,
              concurrency: int) -> float:
    conn = connect(url)
    try:
        conn.run(FILL, job_type=job_type, n=jobs)
    finally:
        conn.close()
    connector = Connector(lambda timeout=None: connect(url, timeout=timeout))
    clock: Callable[[], float] = time.perf_counter
    try:
        began = clock()
        summary = drain(connector, registry,
                        Settings(concurrency=concurrency, retention_seconds=0,
                                 max_jobs=jobs * 2),
                        time_left=lambda: 600.0)
        took = clock() - began
    finally:
        connector.discard()
    assert summary.done == jobs, summary
    return jobs / took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=1,
                        help="PGDRAIN_CONCURRENCY of the drain (1: every call on its thread)")
    parser.add_argument("--only", action="append", default=[],
                        help="run only the configurations whose label has this text (the "
                             "first configuration, the ratios' base, always runs)")
    args = parser.parse_args()
    configs = registries()
    labels = [label for i, label in enumerate(configs)
              if i == 0 or not args.only or any(o in label for o in args.only)]
    rates: dict[str, list[float]] = {label: [] for label in labels}
    with scratch_database("pgdrain_batches") as url:
        conn = connect(url)
        migrate(conn)
        conn.close()
        for r in range(args.rounds):
            order = labels[r % len(labels):] + labels[:r % len(labels)]
            for label in order:
                job_type, registry = configs[label]
                rates[label].append(one_round(url, job_type, registry, args.jobs,
                                              args.concurrency))
    base = statistics.median(rates[labels[0]])
    print(f"{args.jobs} no-op jobs a round, one drain, PGDRAIN_CONCURRENCY="
          f"{args.concurrency}, medians of {args.rounds} rounds")
    print("| configuration | jobs/s | ratio to one a call | rounds |")
    print("|---|---|---|---|")
    for label in labels:
        median = statistics.median(rates[label])
        shown = ", ".join(f"{x:,.0f}" for x in rates[label])
        print(f"| {label} | {median:,.0f} | {median / base:.2f} | {shown} |")


if __name__ == "__main__":
    main()
