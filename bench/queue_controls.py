"""What queue controls cost the claim: jobs/s of a bare claim-and-complete loop (batches of
100) over one queue, with nothing set; with another queue paused holding a backlog of due jobs
ahead of this one's in the claim's index; and with this queue capped (its jobs then come
through claim_capped: a transaction that locks the queue's row and counts its running jobs),
at a cap that never binds (10,000) and at one that does (100).

    .venv/bin/python bench/queue_controls.py [--jobs 20000] [--paused 10000 100000] [--rounds 3]

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
from pgdrain.store import claim_capped
from pgdrain_dev.embedded import scratch_database


def one_round(conn, jobs: int, paused: int, cap: int | None = None) -> float:
    conn.run("TRUNCATE jobs")
    conn.run("DELETE FROM pgdrain_queues")
    if paused:
        # Older and so first in the claim's index: every claim of the open queue skips them.
        conn.run("INSERT INTO jobs (job_type, queue, run_at) SELECT 'noop', 'paused', "
                 "now() - interval '1 hour' FROM generate_series(1, :n)", n=paused)
        pgdrain.pause(conn, "paused")
    conn.run("INSERT INTO jobs (job_type, queue) SELECT 'noop', 'open' "
             "FROM generate_series(1, :n)", n=jobs)
    if cap is not None:
        pgdrain.set_queue(conn, "open", max_running=cap)
    conn.run("VACUUM ANALYZE jobs")
    claim = pgdrain.claim if cap is None else claim_capped
    start, done = time.perf_counter(), 0
    while done < jobs:
        claimed = claim(conn, batch_size=100, lease_seconds=60)
        if not claimed:
            break
        pgdrain.complete(conn, claimed)
        done += len(claimed)
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--paused", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cases = {"nothing set": (0, None),
             **{f"another queue paused, {n:,} due jobs ahead": (n, None) for n in args.paused},
             "capped at 10,000 (never binds)": (0, 10_000), "capped at 100": (0, 100)}
    with scratch_database("controls") as url:
        conn = connect(url)
        try:
            migrate(conn)
            rates: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.rounds):  # interleaved: the machine's noise hits every case
                for name, (paused, cap) in cases.items():
                    rates[name].append(one_round(conn, args.jobs, paused, cap))
        finally:
            conn.close()
    base = statistics.median(rates["nothing set"])
    print("| case | jobs/s (median) | vs nothing set |\n|---|---:|---:|")
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"| {name} | {median:,.0f} | {median / base:.2f} |")


if __name__ == "__main__":
    main()
