"""What a cap or a rate costs the claim, measured in pairs: each step claims a batch of 100 from
an uncontrolled queue (the plain claim) and then a batch from a capped or rate-limited one
(the controlled claim), completing each, in one loop on one connection, so that whatever else
the machine does hits both alike (bench/queue_controls.py runs one case after another, and on a
shared machine its ratios swing by half). Prints, per case, the median time of each claim
and complete and the ratio of the plain one's to the controlled one's: the controlled claim's
jobs/s as a share of the plain claim's.

    .venv/bin/python bench/controlled_pairs.py [--jobs 10000] [--rounds 3]

On a scratch database (the embedded PostgreSQL, or DATABASE_URL's server). With PYTHONPATH at
an older tree it measures that tree (before pgdrain.claiming, store.claim_controlled).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
from typing import Any

import pgdrain
from pgdrain.db import connect
from pgdrain.migrate import migrate
from pgdrain_dev.embedded import scratch_database


def _claim_controlled() -> Any:
    try:
        return importlib.import_module("pgdrain.claiming").claim_controlled
    except ModuleNotFoundError:  # a tree before the planner
        return importlib.import_module("pgdrain.store").claim_controlled


claim_controlled = _claim_controlled()

CASES: dict[str, dict[str, Any]] = {
    "capped at 10,000 (never binds)": {"max_running": 10_000},
    "rate 10,000/s (binds only above it)": {"rate": "10000/s"},
    "cap 10,000 and rate 10,000/s": {"max_running": 10_000, "rate": "10000/s"},
    "capped at 100 (binds)": {"max_running": 100},
}


def one_round(conn: Any, jobs: int, control: dict[str, Any]) -> tuple[float, float]:
    """Median seconds of a plain and of a controlled claim-and-complete of 100."""
    conn.run("TRUNCATE jobs")
    conn.run("DELETE FROM pgdrain_queues")
    conn.run("INSERT INTO jobs (job_type, queue) SELECT 'noop', q "
             "FROM unnest(ARRAY['open', 'controlled']) AS q, generate_series(1, :n)", n=jobs)
    pgdrain.set_queue(conn, "controlled", **control)
    conn.run("VACUUM ANALYZE jobs")
    plain: list[float] = []
    controlled: list[float] = []
    while True:
        started = time.perf_counter()
        first = pgdrain.claim(conn, batch_size=100, lease_seconds=60)
        pgdrain.complete(conn, first)
        middle = time.perf_counter()
        second = claim_controlled(conn, batch_size=100, lease_seconds=60).jobs
        pgdrain.complete(conn, second)
        ended = time.perf_counter()
        if len(first) < 100 or len(second) < 100:
            return statistics.median(plain), statistics.median(controlled)
        plain.append(middle - started)
        controlled.append(ended - middle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with scratch_database("pairs") as url:
        conn = connect(url)
        try:
            migrate(conn)
            got: dict[str, list[tuple[float, float]]] = {name: [] for name in CASES}
            for _ in range(args.rounds):
                for name, control in CASES.items():
                    got[name].append(one_round(conn, args.jobs, control))
        finally:
            conn.close()
    print("| case | plain ms | controlled ms | controlled / plain jobs/s |\n|---|---:|---:|---:|")
    for name, pairs in got.items():
        p = statistics.median(a for a, _ in pairs)
        c = statistics.median(b for _, b in pairs)
        ratios = ", ".join(f"{a / b:.2f}" for a, b in pairs)
        print(f"| {name} | {p * 1000:.2f} | {c * 1000:.2f} | {p / c:.2f} ({ratios}) |")


if __name__ == "__main__":
    main()
