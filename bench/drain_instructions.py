"""Instructions a drain process executes a job, counted by valgrind (deterministic, where
timings on a shared machine are not): a run of ``--jobs`` no-op jobs minus a run of
``--base``, divided by the difference.

    DATABASE_URL=postgresql://... .venv/bin/python bench/drain_instructions.py [--jobs 12000]
        [--base 2000] [--concurrency 1]

Each run is one process under ``valgrind --tool=callgrind`` that fills the jobs (plain SQL, on
a scratch database of DATABASE_URL's server) and calls the drain function's
``lambda_handler`` until a call claims nothing. ``--concurrency 1`` keeps every job on the
drain's thread (under valgrind's slowdown a no-op handler no longer looks quick enough to
run inline beside worker threads, which would measure another path). Needs valgrind.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run() -> None:
    """The measured process: fill, then drain until empty."""
    sys.path[:0] = [str(ROOT / "functions" / "drain"), str(ROOT), str(ROOT / "layers" / "pgdrain")]
    from pgdrain.db import connect
    from pgdrain.migrate import migrate

    conn = connect(os.environ["DATABASE_URL"])
    migrate(conn)
    conn.run("TRUNCATE jobs")
    conn.run("INSERT INTO jobs (job_type) SELECT 'noop' FROM generate_series(1, :n)",
             n=int(os.environ["BENCH_JOBS"]))
    conn.run("VACUUM ANALYZE jobs")
    import app

    from pgdrain_dev.context import LambdaContext

    while app.lambda_handler({}, LambdaContext("bench", 900))["claimed"]:
        pass


def instructions(url: str, jobs: int, concurrency: int) -> int:
    env = {**os.environ, "DATABASE_URL": url, "BENCH_JOBS": str(jobs),
           "PGDRAIN_JOBS": "bench.jobs", "PGDRAIN_CONCURRENCY": str(concurrency),
           "POWERTOOLS_LOG_LEVEL": "WARNING"}
    run = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          sys.executable, __file__, "--one-run"], env=env,
                         capture_output=True, text=True, check=True)
    return int(re.search(r"Collected : (\d+)", run.stderr)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=12000)
    parser.add_argument("--base", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--one-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_run:
        return one_run()
    if not shutil.which("valgrind"):
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    sys.path.insert(0, str(ROOT / "dev"))
    from pgdrain_dev.embedded import scratch_database

    with scratch_database("pgdrain_instructions") as url:
        many = instructions(url, args.jobs, args.concurrency)
        few = instructions(url, args.base, args.concurrency)
    print(f"{(many - few) / (args.jobs - args.base):,.0f} instructions a job "
          f"({args.jobs:,} jobs: {many:,}; {args.base:,}: {few:,})")


if __name__ == "__main__":
    main()
