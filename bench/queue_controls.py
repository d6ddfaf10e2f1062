"""What queue controls cost the claim: jobs/s of a bare claim-and-complete loop (batches of
100) over one queue, with nothing set; with another queue paused holding a backlog of due jobs
ahead of this one's in the claim's index; with this queue capped or rate-limited (its jobs then
come through claim_controlled: a transaction that locks the queue's row, reads its room and
writes its rate window), at limits that never bind and at ones that do; with the jobs spread
over 1,000 ordering keys; with the jobs naming 10 tenants (the fair claim); and with them all
naming one tenant behind 1,000 others that each hold one job scheduled an hour ahead. Then the wait
of a small tenant's job behind a flood of 100,000 from another: how many claims of 100 go by
before it is claimed, and the first fair claim's time.

    .venv/bin/python bench/queue_controls.py [--jobs 20000] [--paused 10000 100000] [--rounds 3]
                                             [--unprepared] [--only SUBSTRING]

On a scratch database (the embedded PostgreSQL, or DATABASE_URL's server). Prints the median
of the rounds per case. Claims and completions go through prepared statements, as on a drain's
connection by default; --unprepared runs them as unnamed statements, as pgdrain.claim on an
application's connection.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import time
from dataclasses import dataclass

import pgdrain
from pgdrain.db import Session, connect
from pgdrain.migrate import migrate
from pgdrain_dev.embedded import scratch_database

try:
    from pgdrain.claiming import claim_controlled
except ImportError:  # a revision before the planner left the store (bench/ab_controls.sh)
    from pgdrain.store import claim_controlled

# Beside a paused queue the drain claims queue by queue (the janitor saw a queue so set):
# so does this loop, where the revision has that claim (bench/ab_controls.sh runs older ones).
BY_QUEUE = "by_queue" in inspect.signature(pgdrain.claim).parameters


@dataclass(frozen=True)
class Case:
    paused: int = 0
    cap: int | None = None
    rate: str | None = None
    keys: int = 0
    """Jobs spread over this many ordering keys, enqueued round-robin (key i, job n)."""
    tenants: int = 0
    later_tenants: int = 0
    """Tenants that each hold one job an hour ahead (none due), besides the jobs timed."""


def one_round(conn, jobs: int, case: Case, via=None) -> float:
    """``via``: what the claims and completions run on (the connection, or a prepared
    Session as a drain's); the set-up runs on ``conn``."""
    via = conn if via is None else via
    conn.run("TRUNCATE jobs")
    conn.run("DELETE FROM pgdrain_queues")
    if case.paused:
        # Older and so first in the claim's index: every claim of the open queue skips them.
        conn.run("INSERT INTO jobs (job_type, queue, run_at) SELECT 'noop', 'paused', "
                 "now() - interval '1 hour' FROM generate_series(1, :n)", n=case.paused)
        pgdrain.pause(conn, "paused")
    conn.run("INSERT INTO jobs (job_type, queue, ordering_key, tenant) "
             "SELECT 'noop', 'open', CASE WHEN :keys > 0 THEN 'key-' || (i % :keys) END, "
             "CASE WHEN :tenants > 0 THEN 'tenant-' || (i % :tenants) END "
             "FROM generate_series(1, :n) AS i", n=jobs, keys=case.keys, tenants=case.tenants)
    if case.later_tenants:
        conn.run("INSERT INTO jobs (job_type, queue, tenant, run_at) SELECT 'noop', 'open', "
                 "'later-' || i, now() + interval '1 hour' FROM generate_series(1, :n) AS i",
                 n=case.later_tenants)
    if case.cap is not None or case.rate is not None:
        pgdrain.set_queue(conn, "open", max_running=case.cap, rate=case.rate)
    conn.run("VACUUM ANALYZE jobs")
    controlled = case.cap is not None or case.rate is not None
    start, done = time.perf_counter(), 0
    while done < jobs and time.perf_counter() - start < 60:
        if controlled:
            claimed = claim_controlled(via, batch_size=100, lease_seconds=60).jobs
        else:
            by_queue = {"by_queue": True} if BY_QUEUE and case.paused else {}
            claimed = pgdrain.claim(via, batch_size=100, lease_seconds=60,
                                    fair=bool(case.tenants), **by_queue)
        if not claimed:
            break
        pgdrain.complete(via, claimed)
        done += len(claimed)
    return done / (time.perf_counter() - start)


def small_tenant_wait(conn, flood: int) -> tuple[int, float]:
    """A flood of ``flood`` due jobs from one tenant, then one job from another: the claims
    of 100 that go by before the small tenant's job is claimed, and the first claim's ms."""
    conn.run("TRUNCATE jobs")
    conn.run("DELETE FROM pgdrain_queues")
    conn.run("INSERT INTO jobs (job_type, tenant, run_at) SELECT 'noop', 'flood', "
             "now() - interval '1 minute' FROM generate_series(1, :n)", n=flood)
    small = pgdrain.enqueue(conn, "noop", tenant="small").id
    conn.run("VACUUM ANALYZE jobs")
    claims, first_ms = 0, 0.0
    while True:
        started = time.perf_counter()
        claimed = pgdrain.claim(conn, batch_size=100, lease_seconds=60, fair=True)
        first_ms = first_ms or (time.perf_counter() - started) * 1000
        claims += 1
        if not claimed or small in {j.id for j in claimed}:
            return claims, first_ms
        pgdrain.complete(conn, claimed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--paused", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--flood", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--unprepared", action="store_true",
                        help="claim and complete through unnamed statements, as pgdrain.claim "
                        "on an application's connection (default: prepared statements, as a "
                        "drain's connection at PGDRAIN_PREPARED_STATEMENTS' default)")
    parser.add_argument("--only", help="run only the cases whose name holds this (and the "
                        "flood's wait if it is part of 'flood')")
    args = parser.parse_args()
    cases = {"nothing set": Case(),
             **{f"another queue paused, {n:,} due jobs ahead": Case(paused=n)
                for n in args.paused},
             "capped at 10,000 (never binds)": Case(cap=10_000),
             "capped at 100": Case(cap=100),
             "rate 10,000/s (binds only above it)": Case(rate="10000/s"),
             "cap 10,000 and rate 10,000/s": Case(cap=10_000, rate="10000/s"),
             "1,000 ordering keys": Case(keys=1000),
             "10 tenants (fair claim)": Case(tenants=10),
             "1,000 tenants (fair claim)": Case(tenants=1000),
             "1 tenant behind 1,000 with only later jobs (fair claim)":
                 Case(tenants=1, later_tenants=1000)}
    if args.only:
        cases = {"nothing set": Case(),
                 **{n: c for n, c in cases.items() if args.only in n}}
    with scratch_database("controls") as url:
        conn = connect(url)
        # As on every connection pgdrain opens (connection_bound): the drain's claims are
        # never JIT-compiled, whatever the server's jit settings.
        conn.run("SET jit = off")
        try:
            migrate(conn)
            rates: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.rounds):  # interleaved: the machine's noise hits every case
                for name, case in cases.items():
                    via = conn if args.unprepared else Session(conn, prepare=True)
                    rates[name].append(one_round(conn, args.jobs, case, via))
            waits = [] if args.only and args.only not in "flood" else [
                small_tenant_wait(conn, args.flood) for _ in range(args.rounds)]
        finally:
            conn.close()
    base = statistics.median(rates["nothing set"])
    print("| case | jobs/s (median) | vs nothing set |\n|---|---:|---:|")
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"| {name} | {median:,.0f} | {median / base:.2f} |")
    if not waits:
        return
    print(f"\nsmall tenant behind a flood of {args.flood:,}: claimed in claim "
          f"{max(c for c, _ in waits)} (worst of {len(waits)}); first fair claim "
          f"{statistics.median(ms for _, ms in waits):.1f} ms (median)")


if __name__ == "__main__":
    main()
