"""Where a job's WAL goes: the records one enqueue and one drain write, by kind, per job.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/wal_breakdown.py [--jobs 20000] [--drains 4] [--batch 20]
        [--retention-seconds N] [--table-option fillfactor=100 ...]

Needs PostgreSQL 15 or newer with pg_walinspect (contrib; created in the scratch database)
and a superuser (pg_walinspect reads the server's WAL). On a scratch database: enqueues
``--jobs`` no-op jobs through the library (``pgdrain.enqueue_many``, ``--batch`` a
transaction), then drains them with ``--drains`` processes calling the drain function's real
``lambda_handler`` (bench/worker.py), and prints, for each phase, the WAL per job by record
type (``pg_get_wal_stats``): heap inserts and updates, the lock a claim takes, each index
entry, page images after a checkpoint. ``--table-option`` sets a storage parameter on the
jobs table first, to measure a candidate against the shipped schema.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "pgdrain"), str(ROOT)]

import pgdrain  # noqa: E402
from bench.throughput import run_once  # noqa: E402
from pgdrain.db import connect  # noqa: E402
from pgdrain.migrate import migrate  # noqa: E402
from pgdrain_dev.embedded import scratch_database  # noqa: E402


def lsn(conn) -> str:
    return conn.run("SELECT pg_current_wal_lsn()::text")[0][0]


def breakdown(conn, start: str, end: str, jobs: int, title: str) -> None:
    total = conn.run("SELECT :e::pg_lsn - :s::pg_lsn", s=start, e=end)[0][0]
    print(f"\n{title}: {int(total) / jobs:,.0f} bytes of WAL a job\n")
    print("| record | per job | bytes a job | of which page images |\n|---|---:|---:|---:|")
    for kind, count, size, images in conn.run(
            'SELECT "resource_manager/record_type", count, combined_size, fpi_size '
            "FROM pg_get_wal_stats(:s::pg_lsn, :e::pg_lsn, true) "
            "WHERE count > 0 ORDER BY combined_size DESC LIMIT 12", s=start, e=end):
        print(f"| {kind} | {count / jobs:.2f} | {size / jobs:,.0f} | {images / jobs:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--drains", type=int, default=4)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--retention-seconds", type=int,
                        help="PGDRAIN_RETENTION_SECONDS for the drains (default: as shipped)")
    parser.add_argument("--table-option", action="append", default=[])
    args = parser.parse_args()
    with scratch_database("wal_breakdown") as url:
        conn = connect(url)
        migrate(conn)
        for option in args.table_option:
            conn.run(f"ALTER TABLE jobs SET ({option})")  # a bench's own scratch database
        conn.run("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        conn.run("CHECKPOINT")  # page images counted from a known point
        start = lsn(conn)
        batch = [{"job_type": "noop"}] * args.batch
        for _ in range(args.jobs // args.batch):
            conn.run("BEGIN")
            pgdrain.enqueue_many(conn, batch)
            conn.run("COMMIT")
        enqueued = lsn(conn)
        run_once(url, "drain", args.drains, None,
                 {} if args.retention_seconds is None
                 else {"PGDRAIN_RETENTION_SECONDS": str(args.retention_seconds)})
        drained = lsn(conn)
        jobs = args.jobs // args.batch * args.batch
        breakdown(conn, start, enqueued, jobs, f"enqueue ({args.batch} a transaction)")
        retention = ("as shipped" if args.retention_seconds is None
                     else f"{args.retention_seconds} s")
        breakdown(conn, enqueued, drained, jobs,
                  f"drain ({args.drains} drains, retention {retention})")
        print("\n| relation | bytes a job |\n|---|---:|")
        for name, size in conn.run(
                "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c "
                "WHERE c.relname = 'jobs' OR c.oid IN (SELECT indexrelid FROM pg_index "
                "WHERE indrelid = 'jobs'::regclass) ORDER BY 2 DESC"):
            if size > 8192:
                print(f"| {name} | {size / jobs:,.0f} |")
        conn.close()


if __name__ == "__main__":
    main()
