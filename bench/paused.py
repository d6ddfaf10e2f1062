"""What a paused queue costs the claims of the others: jobs/s of a bare claim-and-complete loop
(batches of 100) over an open queue, with no paused queue, and with a paused queue holding a
backlog of due jobs ahead of the open queue's in the claim's index.

    .venv/bin/python bench/paused.py [--jobs 20000] [--paused 0 10000 100000] [--rounds 3]

On a scratch database (the embedded PostgreSQL, or DATABASE_URL's server). Prints the median
of the rounds per case.
"""

from __future__ import annotations

import argparse
import statistics
import time

import pgdrain
from pgdrain.db import connect
from pgdrain.migrate import migrate
from pgdrain_dev.embedded import scratch_database


def one_round(conn, jobs: int, paused: int) -> float:
    conn.run("TRUNCATE jobs")
    conn.run("DELETE FROM pgdrain_queues")
    if paused:
        # Older and so first in the claim's index: every claim of the open queue skips them.
        conn.run("INSERT INTO jobs (job_type, queue, run_at) SELECT 'noop', 'paused', "
                 "now() - interval '1 hour' FROM generate_series(1, :n)", n=paused)
        pgdrain.pause(conn, "paused")
    conn.run("INSERT INTO jobs (job_type, queue) SELECT 'noop', 'open' "
             "FROM generate_series(1, :n)", n=jobs)
    conn.run("VACUUM ANALYZE jobs")
    start, done = time.perf_counter(), 0
    while done < jobs:
        claimed = pgdrain.claim(conn, batch_size=100, lease_seconds=60)
        if not claimed:
            break
        pgdrain.complete(conn, claimed)
        done += len(claimed)
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--paused", type=int, nargs="+", default=[0, 10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with scratch_database("paused") as url:
        conn = connect(url)
        try:
            migrate(conn)
            rates: dict[int, list[float]] = {n: [] for n in args.paused}
            for _ in range(args.rounds):  # interleaved: the machine's noise hits every case
                for paused in args.paused:
                    rates[paused].append(one_round(conn, args.jobs, paused))
        finally:
            conn.close()
    base = statistics.median(rates[args.paused[0]])
    print("| paused backlog | jobs/s (median) | vs first |\n|---:|---:|---:|")
    for paused, values in rates.items():
        median = statistics.median(values)
        print(f"| {paused:,} | {median:,.0f} | {median / base:.2f} |")


if __name__ == "__main__":
    main()
