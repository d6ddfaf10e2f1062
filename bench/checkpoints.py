"""What a checkpoint costs a resumable job: the time ``job.checkpoint(state)`` takes to return
(saved, guarded by the claim), on the drain's own thread (PGDRAIN_CONCURRENCY=1: it writes at
once) and on a worker (the loop saves it at its next tick), p50 and p99; and a long job's
overhead: STEPS steps of STEP_MS of work, a checkpoint after each, against the same work
without checkpoints, in one drain. A 40-minute job of 1-minute steps makes 40 checkpoints: its
overhead is 40 times the p50 here.

    .venv/bin/python bench/checkpoints.py
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test .venv/bin/python bench/checkpoints.py
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


def _busy(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def one_job(url: str, *, steps: int, step_ms: float, concurrency: int, save: bool
            ) -> tuple[float, list[float]]:
    """Run one resumable job of ``steps`` steps in one drain: (seconds it took from its start
    to its end, each checkpoint's seconds)."""
    took: list[float] = []
    span: list[float] = []
    registry = Registry()

    @pgdrain.job("steps", resumable=True, timeout=600, registry=registry)
    def steps_job(job: pgdrain.Job) -> None:
        began = time.perf_counter()
        for step in range(steps):
            _busy(step_ms / 1000)
            if save:
                at = time.perf_counter()
                job.checkpoint({"step": step + 1, "cursor": f"page-{step + 1:06d}"})
                took.append(time.perf_counter() - at)
        span.append(time.perf_counter() - began)

    conn = connect(url)
    try:
        pgdrain.enqueue(conn, "steps", {})
    finally:
        conn.close()
    connector = Connector(lambda timeout=None: connect(url, timeout=timeout))
    try:
        summary = drain(connector, registry, Settings(concurrency=concurrency),
                        time_left=lambda: 600.0)
    finally:
        connector.discard()
    assert summary.done == 1, summary
    return span[0], took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with scratch_database("pgdrain_checkpoints") as url:
        conn = connect(url)
        migrate(conn)
        conn.close()
        print(f"{args.steps} steps of {args.step_ms:g} ms, medians of {args.rounds} rounds")
        print("| where the handler runs | checkpoint p50 | p99 | job with checkpoints "
              "| without | overhead a checkpoint |")
        print("|---|---|---|---|---|---|")
        for label, concurrency in (("drain's thread (CONCURRENCY=1)", 1), ("worker", 4)):
            rounds = []
            for _ in range(args.rounds):
                plain, _ = one_job(url, steps=args.steps, step_ms=args.step_ms,
                                   concurrency=concurrency, save=False)
                saved, took = one_job(url, steps=args.steps, step_ms=args.step_ms,
                                      concurrency=concurrency, save=True)
                took.sort()
                rounds.append((took[len(took) // 2], took[int(len(took) * 0.99)], saved,
                               plain))
            p50, p99, saved, plain = (statistics.median(r[i] for r in rounds) for i in range(4))
            print(f"| {label} | {p50 * 1000:.2f} ms | {p99 * 1000:.2f} ms | {saved:.2f} s "
                  f"| {plain:.2f} s | {(saved - plain) / args.steps * 1000:.2f} ms |")


if __name__ == "__main__":
    main()
