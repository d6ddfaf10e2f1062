"""How far one PostgreSQL goes: a small model of drains, handler slots and connections.

    .venv/bin/python bench/capacity.py [--job-ms 200] [--db-us-per-job 218]
    .venv/bin/python bench/capacity.py --from-sustained sustained.csv

Jobs per second are the least of two limits:

- the handlers: drains x PGDRAIN_CONCURRENCY / job duration;
- the database: its vCPUs x 1,000,000 / the database CPU each job costs in all: its enqueue
  (here 20 a transaction, a tenth one by one), its share of a batch claim and of a batch
  finish, the janitor, the vacuums and the WAL. The default is what it was measured at under
  sustained load on this repository's 2-vCPU machine (PostgreSQL 15, the server's CPU from
  /proc over the whole of bench/sustained.py's published run: docs/benchmarks.md);
  ``--from-sustained`` reads it from a run of your own (its CSV's median of
  server_cpu_us_per_job). A drain alone, on a queue filled beforehand, costs the server a
  third of that (bench/throughput.py).

Connections: each running drain holds one, plus up to PGDRAIN_POOL_SIZE for transactional
handlers, and its slot's advisory lock pins that one to a database session behind RDS Proxy,
so the proxy cannot share it. max_connections below are RDS's and Aurora's defaults
(LEAST(DBInstanceClassMemory / 9531392, 5000), less what the engine reserves), rounded.
"""

from __future__ import annotations

import argparse
import csv
import statistics

INSTANCES = [  # (name, vCPUs, default max_connections)
    ("db.t4g.micro (1 GiB)", 2, 80),
    ("db.t4g.medium (4 GiB)", 2, 400),
    ("db.r6g.large (16 GiB)", 2, 1_700),
    ("db.r6g.2xlarge (64 GiB)", 8, 5_000),
    ("Aurora db.r6g.4xlarge (128 GiB)", 16, 5_000),
]
SCENARIOS = [  # (drains, concurrency, transactional share of the pool in use)
    (4, 10, 0), (16, 10, 0), (100, 10, 0), (100, 50, 0), (1_000, 10, 0), (1_000, 10, 4),
]


MEASURED_DB_US_PER_JOB = 218
"""Server CPU a job costs under sustained load, whole life: the median of the hour at 5,000
jobs/s in docs/benchmarks.md ("Issue 24, third day"), enqueue included."""


def sustained_us_per_job(path: str) -> float:
    """The median server CPU a job cost over a bench/sustained.py run (its --csv)."""
    with open(path, newline="") as f:
        values = [float(r["server_cpu_us_per_job"]) for r in csv.DictReader(f)
                  if r["server_cpu_us_per_job"] not in ("", "None")]
    if not values:
        raise SystemExit(f"{path}: no server CPU samples (was the server on this machine?)")
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job-ms", type=float, default=200)
    parser.add_argument("--db-us-per-job", type=float, default=MEASURED_DB_US_PER_JOB)
    parser.add_argument("--from-sustained", metavar="CSV",
                        help="take the database CPU a job costs from a bench/sustained.py run")
    args = parser.parse_args()
    if args.from_sustained:
        args.db_us_per_job = sustained_us_per_job(args.from_sustained)
    print(f"\nJobs of {args.job_ms:g} ms; {args.db_us_per_job:g} µs of database CPU per job\n")
    print("| drains x concurrency (pool in use) | handler limit (jobs/s) | connections "
          "| " + " | ".join(name for name, *_ in INSTANCES) + " |")
    print("|---|---:|---:|" + "---|" * len(INSTANCES))
    for drains, concurrency, pool in SCENARIOS:
        handlers = drains * concurrency * 1000 / args.job_ms
        connections = drains * (1 + pool)
        cells = []
        for _, vcpus, max_connections in INSTANCES:
            database = vcpus * 1_000_000 / args.db_us_per_job
            rate = min(handlers, database)
            if connections > max_connections * 0.9:
                cells.append("too many connections")
            else:
                limit = "handlers" if handlers <= database else "database CPU"
                cells.append(f"{rate:,.0f}/s ({limit})")
        print(f"| {drains:,} x {concurrency} ({pool}) | {handlers:,.0f} | {connections:,} | "
              + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
