"""Drain throughput: no-op jobs per second, drain function vs bare loop vs the seed's worker.

    .venv/bin/python bench/throughput.py [--jobs 20000] [--rounds 3]

Each round runs every configuration once, in a rotated order (interleaved, so a noisy moment
hits each configuration alike), on the same database: the embedded PostgreSQL, or
DATABASE_URL's server (a scratch database is created there and dropped). Workers import and
connect before the clock starts; the time is from "go" until the last worker has drained the
queue. Prints a Markdown table of medians and each configuration's ratio to the seed's worker,
then what each job cost (medians per job): WAL written while draining (the server's
pg_current_wal_lsn before and after; the fill is plain SQL and not counted), the table and
its indexes after the drain (pg_total_relation_size, before any vacuum of ours), the workers'
CPU while they drained (user + system, as each worker reports it: imports and connecting are
left out) and, when the server runs on this machine, its
CPU (user + system of every postgres process, from /proc).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "pgdrain"))

from pgdrain.db import connect  # noqa: E402
from pgdrain.migrate import migrate  # noqa: E402
from pgdrain_dev.embedded import scratch_database  # noqa: E402

SEED_DDL = """
CREATE TABLE IF NOT EXISTS seed_jobs (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_type     text NOT NULL,
  payload      jsonb NOT NULL DEFAULT '{}',
  status       text NOT NULL DEFAULT 'pending',
  attempts     int NOT NULL DEFAULT 0,
  max_attempts int NOT NULL DEFAULT 3,
  run_at       timestamptz NOT NULL DEFAULT now(),
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS seed_jobs_pending_idx ON seed_jobs (run_at) WHERE status = 'pending';
"""

QUIET = {"POWERTOOLS_LOG_LEVEL": "WARNING"}  # no "jobs done" lines, failures only
# (label, worker mode, processes, batch size or None for the default, extra environment)
CONFIGS = [
    ("seed worker (1 process)", "seed", 1, 1, {}),
    ("seed worker (4 processes)", "seed", 4, 1, {}),
    ("drain function, 1 process, defaults", "drain", 1, None, {}),
    ("drain function, 4 processes, defaults", "drain", 4, None, {}),
    ("drain function, 4 processes, defaults, logs off", "drain", 4, None, QUIET),
    ("drain function, 4 processes, done rows kept 7 days (history)", "drain", 4, None,
     {"PGDRAIN_RETENTION_SECONDS": "604800"}),
    ("drain function, 4 processes, concurrency 1", "drain", 4, None,
     {"PGDRAIN_CONCURRENCY": "1"}),
    ("drain function, 4 processes, concurrency 50", "drain", 4, None,
     {"PGDRAIN_CONCURRENCY": "50"}),
    ("drain function, 4 processes, batch 500", "drain", 4, 500, {}),
    ("drain function, 8 processes, defaults", "drain", 8, None, {}),
    ("bare claim loop, 1 process, batch 100", "bare", 1, 100, {}),
    ("bare claim loop, 4 processes, batch 100", "bare", 4, 100, {}),
    # Peers (with PEERS_PYTHON, see bench/peer_worker.py), at their defaults and tuned.
    ("PgQueuer, 4 processes, defaults (batch 10)", "pgqueuer", 4, None, {"PEER": "default"}),
    ("PgQueuer, 4 processes, batch 100", "pgqueuer", 4, None, {"PEER": "tuned"}),
    ("procrastinate, 4 processes, defaults (concurrency 1)", "procrastinate", 4, None,
     {"PEER": "default"}),
    ("procrastinate, 4 processes, concurrency 10", "procrastinate", 4, None,
     {"PEER": "tuned"}),
]
PEERS = ("pgqueuer", "procrastinate")
PEERS_PYTHON = os.environ.get("PEERS_PYTHON")
PEER_WORKER = str(ROOT / "bench" / "peer_worker.py")
PEER_LEFT = {"pgqueuer": "SELECT count(*) FROM pgqueuer",
             "procrastinate": "SELECT count(*) FROM procrastinate_jobs "
                              "WHERE status <> 'succeeded'"}


def fill(conn, mode: str, jobs: int, url: str = "") -> None:
    if mode in PEERS:
        subprocess.run([PEERS_PYTHON, PEER_WORKER, "fill", mode, url, str(jobs)], check=True)
        conn.run("VACUUM ANALYZE")
        return
    table = "seed_jobs" if mode == "seed" else "jobs"
    conn.run(f"TRUNCATE {table}")
    conn.run(f"INSERT INTO {table} (job_type) SELECT 'noop' FROM generate_series(1, {jobs})")
    conn.run(f"VACUUM ANALYZE {table}")


@dataclass
class Cost:
    """What one round's drain cost, per job."""
    wal_bytes: float
    size_bytes: float
    worker_us: float | None
    server_us: float | None


TABLES = {"seed": "seed_jobs", "pgqueuer": "pgqueuer", "procrastinate": "procrastinate_jobs"}


def server_cpu_seconds() -> float | None:
    """User + system CPU of every postgres process on this machine (the server's backends,
    its autovacuum and background writers), or None if there is none to read. A backend that
    exited was reaped by the postmaster: its CPU is in the postmaster's children's times."""
    tick, total, seen = os.sysconf("SC_CLK_TCK"), 0, False
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)
                if not fields[0].split("(", 1)[1].startswith("postgres"):
                    continue
                values = fields[1].split()
        except (OSError, IndexError):
            continue
        seen = True
        total += sum(int(v) for v in values[11:15])  # utime, stime, cutime, cstime
    return total / tick if seen else None


def wal_lsn(conn) -> int:
    return int(conn.run("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")[0][0])


def run_once(url: str, mode: str, processes: int, batch: int | None,
             extra: dict[str, str]) -> tuple[float, float | None]:
    # The drain's settings as shipped (done rows not kept, PGDRAIN_MAX_JOBS 1000 a drain:
    # the worker invokes lambda_handler again until a drain claims nothing) unless a
    # configuration says otherwise.
    env = {**os.environ, "DATABASE_URL": url, "PGDRAIN_JOBS": "bench.jobs",
           "BATCH": str(batch or 1), **extra}
    if batch is not None:
        env["PGDRAIN_BATCH_SIZE"] = str(batch)
    # The functions' logs go to /dev/null, as in Lambda they leave the process for the platform:
    # no reader here competes with the workers for the two CPUs. Markers come on stderr.
    command = ([PEERS_PYTHON, PEER_WORKER, "run", mode, url, extra["PEER"]] if mode in PEERS
               else [sys.executable, str(ROOT / "bench" / "worker.py"), mode])
    workers = [subprocess.Popen(command,
                                env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
               for _ in range(processes)]
    for worker in workers:
        if worker.stderr.readline().strip() != "READY":
            raise SystemExit(f"a {mode} worker failed to start")
    started = time.perf_counter()
    for worker in workers:
        worker.stdin.write("go\n")
        worker.stdin.flush()
    cpu: float | None = 0.0
    for worker in workers:
        for line in worker.stderr:
            done, *spent = line.split()
            if done == "DONE":
                # Workers that report it: the run's own CPU (bench/worker.py); peers' workers
                # do not, and their CPU is left out rather than counted with their imports.
                cpu = cpu + float(spent[0]) if spent and cpu is not None else None
                break
    elapsed = time.perf_counter() - started
    for worker in workers:
        worker.stdin.close()
        worker.stderr.read()
        if worker.wait() != 0:
            raise SystemExit(f"a {mode} worker failed")
        worker.stderr.close()
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", action="append", metavar="TEXT",
                        help="run only the configurations whose label contains TEXT "
                             "(repeatable); the seed worker (1 process) always runs")
    args = parser.parse_args()

    with scratch_database("pgdrain_bench") as url:
        conn = connect(url)
        try:
            run(conn, url, args)
        finally:
            conn.close()


def run(conn, url: str, args: argparse.Namespace) -> None:
    """All rounds on the database at ``url``; prints the Markdown table."""
    migrate(conn)
    conn.run(SEED_DDL)
    version = conn.run("SHOW server_version")[0][0]
    configs = [c for c in CONFIGS if c is CONFIGS[0] or not args.only
               or any(text in c[0] for text in args.only)]
    if not PEERS_PYTHON:
        configs = [c for c in configs if c[1] not in PEERS]
        print("PEERS_PYTHON is not set: PgQueuer and procrastinate are left out "
              "(make bench-peers)", file=sys.stderr)
    for peer in {c[1] for c in configs} & set(PEERS):
        subprocess.run([PEERS_PYTHON, PEER_WORKER, "install", peer, url], check=True)
    rates: dict[str, list[float]] = {label: [] for label, *_ in configs}
    costs: dict[str, list[Cost]] = {label: [] for label, *_ in configs}
    for round_no in range(args.rounds):
        order = configs[round_no % len(configs):] + configs[:round_no % len(configs)]
        for label, mode, processes, batch, extra in order:
            fill(conn, mode, args.jobs, url)
            wal, server = wal_lsn(conn), server_cpu_seconds()
            seconds, worker_cpu = run_once(url, mode, processes, batch, extra)
            server_after = server_cpu_seconds()
            costs[label].append(Cost(
                wal_bytes=(wal_lsn(conn) - wal) / args.jobs,
                size_bytes=conn.run("SELECT pg_total_relation_size(:t)",
                                    t=TABLES.get(mode, "jobs"))[0][0] / args.jobs,
                worker_us=None if worker_cpu is None else worker_cpu * 1e6 / args.jobs,
                server_us=None if server is None or server_after is None
                else (server_after - server) * 1e6 / args.jobs))
            if mode in PEERS:
                left = conn.run(PEER_LEFT[mode])[0][0]
            elif mode == "seed":
                left = conn.run("SELECT count(*) FROM seed_jobs WHERE status <> 'done'")[0][0]
            else:
                left = conn.run("SELECT count(*) FROM jobs WHERE status <> 'done'")[0][0]
            if left:
                raise SystemExit(f"{label}: {left} jobs were not done")
            rates[label].append(args.jobs / seconds)
            print(f"round {round_no + 1}: {label}: {args.jobs / seconds:,.0f} jobs/s",
                  file=sys.stderr, flush=True)
    medians = {label: statistics.median(rates[label]) for label in rates}

    def same_count(mode: str, processes: int) -> float | None:
        found = [medians[label] for label, m, p, *_ in configs if m == mode and p == processes]
        return found[0] if found else None

    print(f"\n{args.jobs:,} no-op jobs, PostgreSQL {version}, median of {args.rounds} "
          f"interleaved rounds, {os.cpu_count()} CPUs. Ratios compare equal process counts.\n")
    print("| configuration | jobs/s (median) | runs | vs the seed worker, same processes "
          "| vs the bare claim loop, same processes |")
    print("|---|---:|---|---:|---:|")
    for label, mode, processes, *_ in configs:
        median = medians[label]
        runs = ", ".join(f"{r:,.0f}" for r in rates[label])
        seed, bare = same_count("seed", processes), same_count("bare", processes)
        vs_seed = f"{median / seed:.1f}x" if seed and mode != "seed" else "-"
        vs_bare = f"{median / bare:.0%}" if bare and mode == "drain" else "-"
        print(f"| {label} | {median:,.0f} | {runs} | {vs_seed} | {vs_bare} |")
    print("\nPer job, medians: WAL written while draining; table + indexes after the drain; "
          "worker CPU; server CPU (postgres processes on this machine).\n")
    print("| configuration | WAL bytes | size bytes | worker CPU µs | server CPU µs |")
    print("|---|---:|---:|---:|---:|")
    for label, *_ in configs:
        figures = [_median(costs[label], field) for field in
                   ("wal_bytes", "size_bytes", "worker_us", "server_us")]
        print(f"| {label}, per job | {' | '.join(figures)} |")


def _median(costs: list[Cost], field: str) -> str:
    values = [getattr(c, field) for c in costs if getattr(c, field) is not None]
    return f"{statistics.median(values):,.0f}" if values else "-"


if __name__ == "__main__":
    main()
