"""How far one PostgreSQL goes: a small model of drains, handler slots and connections.

    .venv/bin/python bench/capacity.py [--job-ms 200] [--db-us-per-job 45]

Jobs per second are the least of two limits:

- the handlers: drains x PGDRAIN_CONCURRENCY / job duration;
- the database: its vCPUs x 1,000,000 / the database CPU each job costs (its share of a batch
  claim and of a batch done write, with their WAL and index upkeep). 45 µs is what this
  repository's bare claim loop implies on the benchmark VM (22,915 jobs/s on two vCPUs that
  also ran four Python workers; about half of that CPU is PostgreSQL's): measure your own with
  bench/throughput.py and pass it.

Connections: each running drain holds one, plus up to PGDRAIN_POOL_SIZE for transactional
handlers, and its slot's advisory lock pins that one to a database session behind RDS Proxy,
so the proxy cannot share it. max_connections below are RDS's and Aurora's defaults
(LEAST(DBInstanceClassMemory / 9531392, 5000), less what the engine reserves), rounded.
"""

from __future__ import annotations

import argparse

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job-ms", type=float, default=200)
    parser.add_argument("--db-us-per-job", type=float, default=45)
    args = parser.parse_args()
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
