"""Growth: table and index sizes, dead tuples and the claim's cost as the queue's history grows.

    .venv/bin/python bench/growth.py [--jobs 1000000] [--workers 4] [--retention-seconds 60]

Two parts, on a scratch database (the embedded PostgreSQL, or DATABASE_URL's server; created
and dropped):

1. Processing. The main process enqueues ``--jobs`` no-op jobs in chunks (``INSERT ...
   generate_series``), keeping at most ``--backlog`` of them waiting, while ``--workers``
   processes drain them with the bare loop (``pgdrain.claim`` + ``pgdrain.complete``, prepared
   statements, ``--batch`` per claim) and the main process runs ``pgdrain.run_janitor`` every
   ``--janitor-interval`` seconds with ``--retention-seconds``, so finished jobs are purged as
   they would be in production. Every ``--jobs / --samples`` finished jobs it records: jobs/s
   in the interval, the janitor's time per pass, the table's and each index's size, the
   statistics collector's live and dead tuples and autovacuum runs, and one claim (EXPLAIN
   ANALYZE, BUFFERS, in a transaction that is rolled back) at that moment.
2. Claim probes. The claim statement, rolled back each time so nothing is claimed, on a table
   holding ``--probe-rows`` pending jobs; ``--probe-rows`` done jobs (inserted as done, recent,
   so not purged) beside ``--probe-pending`` pending ones; the same history made the way a
   queue makes it (pending rows updated to done) before autovacuum has visited the table; and
   after a VACUUM. For each: the plan (index used, buffers) and the median time of
   ``--probe-runs`` claims with the drain's prepared statement.

``--table-option fillfactor=80`` (repeatable) sets a storage parameter on the scratch database's
jobs table first, to measure a candidate change against the shipped schema. Prints Markdown.
"""

from __future__ import annotations

import argparse
import os
import re
import select
import selectors
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "pgdrain"))

import pgdrain  # noqa: E402
from pgdrain.db import Session, connect  # noqa: E402
from pgdrain.migrate import migrate  # noqa: E402
from pgdrain.sql import QUERIES  # noqa: E402
from pgdrain_dev.embedded import scratch_database  # noqa: E402

LEASE_SECONDS = 960
# pgdrain.sql's `:name` parameter pattern (not the `::type` casts beside them).
PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
OPTION = re.compile(r"^[a-z_]+=[A-Za-z0-9_.]+$")
# A payload about the size of a real one ({"to": "user-123456@example.com"}).
INSERT_CHUNK = """
INSERT INTO jobs (job_type, payload)
SELECT 'noop', jsonb_build_object('to', 'user-' || g || '@example.com')
FROM generate_series(1, {n}) AS g
"""


# --- the worker process ---------------------------------------------------------------------

def worker(url: str, batch: int) -> None:
    """Claim and complete until told to stop and the queue is empty; report progress on stdout.

    Prints READY, waits for a line on stdin, then one line per completed batch (its size) and
    ``DONE <empty claims>`` at the end. A ``stop`` line on stdin means no more jobs will come.
    """
    session = Session(connect(url), prepare=True)
    out = sys.stdout.buffer
    out.write(b"READY\n")
    out.flush()
    _read_line(0)
    stopping = False
    empty = 0
    while True:
        jobs = pgdrain.claim(session, batch_size=batch, lease_seconds=LEASE_SECONDS)
        if jobs:
            pgdrain.complete(session, jobs)
            out.write(b"%d\n" % len(jobs))
            out.flush()
            continue
        if stopping:  # told to stop before this claim, and it found nothing: all done
            break
        empty += 1
        if select.select([0], [], [], 0.005)[0]:
            _read_line(0)
            stopping = True
    out.write(b"DONE %d\n" % empty)
    out.flush()
    session.close()


def _read_line(fd: int) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    return line


# --- helpers --------------------------------------------------------------------------------

def claim_sql(batch: int) -> str:
    """The catalogue's claim statement with literal values, for EXPLAIN."""
    values = {"queues": "NULL", "limited_types": "NULL", "batch_size": str(batch),
              "lease_seconds": str(LEASE_SECONDS)}
    return PARAM.sub(lambda m: values[m[1]], QUERIES["job_claim_batch"])


@dataclass
class Explained:
    ms: float  # planning + execution
    buffers: int  # shared hit + read, the whole statement
    find_buffers: int  # the same, finding and locking the batch (the CTE)
    scans: list[str]
    text: str = ""


def _walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", []):
        found += _walk(child)
    return found


def _buffers(node: dict[str, Any]) -> int:
    return node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)


def _rolled_back(conn: Any, sql: str) -> list[list[Any]]:
    conn.run("BEGIN")
    try:
        return conn.run(sql)
    finally:
        conn.run("ROLLBACK")


def explain_claim(conn: Any, batch: int, text: bool = False) -> Explained:
    """EXPLAIN (ANALYZE, BUFFERS) of the claim, in a transaction that is rolled back.

    With ``text``, also the plan as text, from a second claim (its own transaction: in the
    first one's, the batch it claimed would already be running).
    """
    [[[doc]]] = _rolled_back(conn, f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {claim_sql(batch)}")
    plan_text = ""
    if text:
        plan_text = "\n".join(r[0] for r in _rolled_back(
            conn, f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) {claim_sql(batch)}"))
    nodes = _walk(doc["Plan"])
    cte = next((n for n in nodes if n.get("Subplan Name") == "CTE due"), doc["Plan"])
    scans = [f"{n['Node Type']} using {n['Index Name']}" if "Index Name" in n else
             f"{n['Node Type']} on {n['Relation Name']}" for n in nodes
             if "Index Name" in n or n["Node Type"] in ("Seq Scan", "Bitmap Heap Scan")]
    return Explained(doc["Execution Time"] + doc.get("Planning Time", 0.0),
                     _buffers(doc["Plan"]), _buffers(cte), scans, plan_text)


def timed_claims(conn: Any, batch: int, runs: int) -> list[float]:
    """Milliseconds of ``runs`` claims with the drain's prepared statement, each rolled back."""
    session = Session(conn, prepare=True)
    times = []
    for _ in range(runs):
        conn.run("BEGIN")
        started = time.perf_counter()
        session.rows("job_claim_batch", batch_size=batch, lease_seconds=LEASE_SECONDS,
                     queues=None, limited_types=None)
        times.append((time.perf_counter() - started) * 1000)
        conn.run("ROLLBACK")
    return times


def size(n: int) -> str:
    if n >= 10 * 2**20:
        return f"{n / 2**20:,.0f} MB"
    if n >= 2**20:
        return f"{n / 2**20:.1f} MB"
    return f"{n / 1024:,.0f} kB"


def table_stats(conn: Any) -> dict[str, Any]:
    """Sizes and pg_stat_user_tables counters of the jobs table (the counters lag: each backend
    flushes its own at most once a second; this one flushes its own first)."""
    if conn.run("SELECT current_setting('server_version_num')::int")[0][0] >= 150000:
        conn.run("SELECT pg_stat_force_next_flush()")
    total, heap, indexes = conn.run(
        "SELECT pg_total_relation_size('jobs'), pg_relation_size('jobs'), "
        "pg_indexes_size('jobs')")[0]
    per_index = dict(conn.run(
        "SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'jobs'::regclass "
        "ORDER BY c.relname"))
    live, dead, vacuums, last_vacuum, now, updates, hot = conn.run(
        "SELECT n_live_tup, n_dead_tup, autovacuum_count + vacuum_count, "
        "greatest(last_autovacuum, last_vacuum), now(), n_tup_upd, n_tup_hot_upd "
        "FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass")[0]
    ago = f"{(now - last_vacuum).total_seconds():.0f} s ago" \
        if isinstance(last_vacuum, datetime) else "never"
    return {"total": total, "heap": heap, "indexes": indexes, "per_index": per_index,
            "live": live, "dead": dead, "vacuums": vacuums, "last_vacuum": ago,
            "updates": updates, "hot": hot}


def server_line(conn: Any) -> str:
    settings = dict(conn.run(
        "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name IN "
        "('server_version', 'autovacuum_naptime', 'autovacuum_vacuum_cost_delay', "
        "'autovacuum_vacuum_cost_limit', 'shared_buffers')"))
    options = conn.run("SELECT coalesce(array_to_string(reloptions, ', '), '') FROM pg_class "
                       "WHERE oid = 'jobs'::regclass")[0][0]
    return (f"PostgreSQL {settings['server_version']}, {os.cpu_count()} CPUs, "
            f"shared_buffers {settings['shared_buffers']} (8kB pages), "
            f"autovacuum_naptime {settings['autovacuum_naptime']}, "
            f"autovacuum_vacuum_cost_delay {settings['autovacuum_vacuum_cost_delay']}; "
            f"jobs table options: {options}")


# --- part 1: processing ---------------------------------------------------------------------

@dataclass
class Sample:
    completed: int
    elapsed: float
    rate: float
    janitor_ms: float
    janitor_passes: int
    purged: int
    kept: int
    vacuum_ms: float
    vacuum_runs: int
    stats: dict[str, Any]
    probe: Explained


@dataclass
class Progress:
    produced: int = 0
    completed: int = 0
    purged: int = 0
    janitor_seconds: float = 0.0
    janitor_passes: int = 0
    vacuum_seconds: float = 0.0
    vacuum_runs: int = 0
    empty_claims: int = 0
    samples: list[Sample] = field(default_factory=list)


def start_workers(url: str, args: argparse.Namespace) -> list[subprocess.Popen]:
    workers = [subprocess.Popen(
        [sys.executable, __file__, "--worker", "--batch", str(args.batch)],
        # The URL in the environment, not the command line, where ps would show a password.
        env={**os.environ, "DATABASE_URL": url},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(args.workers)]
    for w in workers:
        if _read_line(w.stdout.fileno()).strip() != b"READY":
            raise SystemExit("a worker failed to start")
    return workers


# C901: a benchmark's script, its phases in the order they run; split, it would read worse.
def process(conn: Any, url: str, args: argparse.Namespace) -> Progress:  # noqa: C901
    """Part 1: enqueue, drain and purge ``args.jobs`` jobs, sampling as history accumulates."""
    settings = pgdrain.Settings(retention_seconds=args.retention_seconds,
                                purge_batch_size=args.purge_batch_size,
                                purge_max_batches=args.purge_max_batches)
    janitor = Session(connect(url), prepare=True)
    explain_claim(conn, args.batch)  # warm this connection's caches before the first sample
    workers = start_workers(url, args)
    progress = Progress()
    step = max(1, args.jobs // args.samples)
    next_sample = step
    selector = selectors.DefaultSelector()
    pending_bytes: dict[int, bytes] = {}
    for w in workers:
        selector.register(w.stdout.fileno(), selectors.EVENT_READ)
        pending_bytes[w.stdout.fileno()] = b""
    running = len(workers)
    started = last_time = time.perf_counter()
    last_completed = last_purged = last_passes = 0
    last_janitor = last_vacuum = 0.0
    last_vacuums = 0
    next_janitor = started + args.janitor_interval
    next_vacuum = started + args.vacuum_every if args.vacuum_every else float("inf")
    for w in workers:
        w.stdin.write(b"go\n")
        w.stdin.flush()
    stopped = False
    while running:
        now = time.perf_counter()
        if progress.produced < args.jobs and \
                progress.produced - progress.completed < args.backlog:
            n = min(args.chunk, args.jobs - progress.produced)
            conn.run(INSERT_CHUNK.format(n=n))
            progress.produced += n
        if progress.produced == args.jobs and not stopped:
            for w in workers:
                w.stdin.write(b"stop\n")
                w.stdin.flush()
            stopped = True
        if now >= next_janitor:
            t = time.perf_counter()
            result = pgdrain.run_janitor(janitor, settings)
            progress.janitor_seconds += time.perf_counter() - t
            progress.janitor_passes += 1
            progress.purged += result.purged
            next_janitor = time.perf_counter() + args.janitor_interval
        if now >= next_vacuum:
            t = time.perf_counter()
            conn.run("VACUUM jobs")
            progress.vacuum_seconds += time.perf_counter() - t
            progress.vacuum_runs += 1
            next_vacuum = time.perf_counter() + args.vacuum_every
        timeout = 0.0 if progress.produced - progress.completed < args.backlog \
            and progress.produced < args.jobs else 0.02
        for key, _ in selector.select(timeout):
            data = os.read(key.fd, 65536)
            if not data:
                selector.unregister(key.fd)
                running -= 1
                continue
            lines = (pending_bytes[key.fd] + data).split(b"\n")
            pending_bytes[key.fd] = lines.pop()
            for line in lines:
                if line.startswith(b"DONE"):
                    progress.empty_claims += int(line.split()[1])
                elif line:
                    progress.completed += int(line)
        if progress.completed >= next_sample or (not running and progress.samples and
                                                 progress.samples[-1].completed <
                                                 progress.completed):
            now = time.perf_counter()
            passes = progress.janitor_passes - last_passes
            progress.samples.append(Sample(
                completed=progress.completed, elapsed=now - started,
                rate=(progress.completed - last_completed) / (now - last_time),
                janitor_ms=(progress.janitor_seconds - last_janitor) * 1000 / max(1, passes),
                janitor_passes=passes, purged=progress.purged - last_purged,
                kept=progress.completed - progress.purged,
                vacuum_ms=(progress.vacuum_seconds - last_vacuum) * 1000
                / max(1, progress.vacuum_runs - last_vacuums),
                vacuum_runs=progress.vacuum_runs - last_vacuums,
                stats=table_stats(conn), probe=explain_claim(conn, args.batch)))
            last_time, last_completed, last_purged = now, progress.completed, progress.purged
            last_passes, last_janitor = progress.janitor_passes, progress.janitor_seconds
            last_vacuums, last_vacuum = progress.vacuum_runs, progress.vacuum_seconds
            while next_sample <= progress.completed:
                next_sample += step
    for w in workers:
        w.stdin.close()
        if w.wait() != 0:
            raise SystemExit("a worker failed")
        w.stdout.close()
    janitor.close()
    left = conn.run("SELECT count(*) FROM jobs WHERE status <> 'done'")[0][0]
    if left or progress.completed != args.jobs:
        raise SystemExit(f"{left} jobs not done; workers reported {progress.completed:,}")
    return progress


def report_processing(conn: Any, args: argparse.Namespace, progress: Progress) -> None:
    last = progress.samples[-1]
    print(f"\n### Processing {args.jobs:,} jobs with purging on\n")
    print(f"{args.workers} worker processes (bare claim + complete loop, prepared statements, "
          f"batch {args.batch}); enqueued in chunks of {args.chunk:,} with at most "
          f"{args.backlog:,} waiting; janitor every {args.janitor_interval:g} s with retention "
          f"{args.retention_seconds} s, purge batches of {args.purge_batch_size:,} "
          f"(at most {args.purge_max_batches} per pass)"
          + (f"; `VACUUM jobs` every {args.vacuum_every:g} s" if args.vacuum_every else "")
          + f". {args.jobs / last.elapsed:,.0f} jobs/s overall; workers found the queue empty "
          f"{progress.empty_claims:,} times.\n")
    print(server_line(conn) + "\n")
    manual = " VACUUM ms/run (runs) |" if args.vacuum_every else ""
    print("| jobs done | elapsed s | jobs/s (interval) | janitor ms/pass (passes) | purged "
          f"(interval) | done rows kept |{manual} n_live_tup | n_dead_tup | vacuums | "
          "last vacuum | claim ms | claim buffers: find, all |")
    print("|---:|---:|---:|---:|---:|---:|" + ("---:|" if manual else "")
          + "---:|---:|---:|---|---:|---:|")
    for s in progress.samples:
        st = s.stats
        print(f"| {s.completed:,} | {s.elapsed:.1f} | {s.rate:,.0f} | "
              f"{s.janitor_ms:.1f} ({s.janitor_passes}) | {s.purged:,} | {s.kept:,} | "
              + (f"{s.vacuum_ms:.0f} ({s.vacuum_runs}) | " if manual else "")
              + f"{st['live']:,} | "
              f"{st['dead']:,} | {st['vacuums']} | {st['last_vacuum']} | {s.probe.ms:.2f} | "
              f"{s.probe.find_buffers:,}, {s.probe.buffers:,} |")
    names = list(last.stats["per_index"])
    print("\n| jobs done | jobs, total | heap | all indexes | "
          + " | ".join(names) + " |")
    print("|---:|---:|---:|---:|" + "---:|" * len(names))
    for s in progress.samples:
        st = s.stats
        print(f"| {s.completed:,} | {size(st['total'])} | {size(st['heap'])} | "
              f"{size(st['indexes'])} | "
              + " | ".join(size(st["per_index"].get(n, 0)) for n in names) + " |")
    hot = last.stats["hot"] / last.stats["updates"] if last.stats["updates"] else 0.0
    print(f"\nHOT updates: {hot:.1%} of {last.stats['updates']:,}. \"claim ms\" and \"claim "
          "buffers\": one claim of the next batch at that moment (EXPLAIN ANALYZE, rolled "
          "back; planning + execution; shared buffers hit + read, in finding and locking the "
          "batch and in the whole statement). \"vacuums\": autovacuum and VACUUM runs so far. "
          "Tuple counts are the statistics collector's, up to about a second behind (each "
          "backend flushes its own counters at most once a second).")


# --- part 2: claim probes -------------------------------------------------------------------

@dataclass
class Probe:
    label: str
    rows: int
    pending: int
    first: Explained
    steady: Explained
    times: list[float]
    heap: int
    pending_idx: int


def setup_pending(conn: Any, n: int) -> None:
    conn.run(INSERT_CHUNK.format(n=n))
    conn.run("ANALYZE jobs")


def setup_done(conn: Any, n: int, pending: int) -> None:
    conn.run("INSERT INTO jobs (job_type, payload, status, attempts, claimed_at, finished_at, "
             "created_at, run_at) "
             "SELECT 'noop', jsonb_build_object('to', 'user-' || g || '@example.com'), 'done', "
             "1, now() - interval '1 minute', now(), now() - interval '1 minute', "
             f"now() - interval '1 minute' FROM generate_series(1, {n}) AS g")
    conn.run(INSERT_CHUNK.format(n=pending))
    conn.run("ANALYZE jobs")


def setup_updated(conn: Any, n: int, pending: int) -> None:
    # As a queue makes history: rows inserted pending, then finished by UPDATEs. Autovacuum is
    # off for the table here so the dead index entries are still there when the claim runs.
    conn.run("ALTER TABLE jobs SET (autovacuum_enabled = false)")
    conn.run(INSERT_CHUNK.format(n=n))
    conn.run("ANALYZE jobs")
    conn.run("UPDATE jobs SET status = 'done', attempts = 1, claimed_at = now(), "
             "finished_at = now(), updated_at = now() WHERE status = 'pending'")
    conn.run(INSERT_CHUNK.format(n=pending))
    conn.run("ANALYZE jobs")


def probe(conn: Any, args: argparse.Namespace, label: str) -> Probe:
    first = explain_claim(conn, args.batch)
    times = timed_claims(conn, args.batch, args.probe_runs)
    steady = explain_claim(conn, args.batch, text=True)
    rows, pending = conn.run("SELECT count(*), count(*) FILTER (WHERE status = 'pending') "
                             "FROM jobs")[0]
    heap, idx = conn.run("SELECT pg_relation_size('jobs'), "
                         "pg_relation_size('jobs_pending_idx')")[0]
    print(f"probe: {label}: median {statistics.median(times):.2f} ms", file=sys.stderr,
          flush=True)
    return Probe(label, rows, pending, first, steady, times, heap, idx)


def probes(conn: Any, args: argparse.Namespace, options: list[str]) -> list[Probe]:
    """Part 2: the claim on each kind of table, from a truncated table each time."""
    n, p = args.probe_rows, args.probe_pending

    def reset() -> None:
        conn.run("TRUNCATE jobs")
        conn.run("ALTER TABLE jobs RESET (autovacuum_enabled)")
        for option in options:
            conn.run(f"ALTER TABLE jobs SET ({option})")

    found = []
    reset()
    setup_pending(conn, n)
    found.append(probe(conn, args, f"{n:,} pending"))
    reset()
    setup_done(conn, n, p)
    found.append(probe(conn, args, f"{n:,} done (inserted as done) + {p:,} pending"))
    reset()
    setup_updated(conn, n, p)
    found.append(probe(conn, args, f"{n:,} done by UPDATE, not yet vacuumed + {p:,} pending"))
    conn.run("VACUUM jobs")
    found.append(probe(conn, args, "the same after VACUUM jobs"))
    reset()
    return found


def report_probes(args: argparse.Namespace, found: list[Probe]) -> None:
    print(f"\n### The claim with history beside it (batch {args.batch}, rolled back)\n")
    print(f"\"first\": the first claim on the table as set up (EXPLAIN ANALYZE); \"median\": "
          f"{args.probe_runs} claims with the drain's prepared statement, client-side; "
          "\"steady\": EXPLAIN ANALYZE after them. Buffers are shared hit + read in finding and "
          "locking the batch (the CTE), then in the whole statement, which also writes the "
          f"{args.batch} new row versions and their index entries.\n")
    print("| table | rows | heap | jobs_pending_idx | first: ms; buffers find, all | median ms | "
          "steady: ms; buffers find, all | plan |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for f in found:
        print(f"| {f.label} | {f.rows:,} | {size(f.heap)} | {size(f.pending_idx)} | "
              f"{f.first.ms:.2f}; {f.first.find_buffers:,}, {f.first.buffers:,} | "
              f"{statistics.median(f.times):.2f} | "
              f"{f.steady.ms:.2f}; {f.steady.find_buffers:,}, {f.steady.buffers:,} | "
              f"{'; '.join(f.steady.scans)} |")
    for f in found:
        print(f"\n{f.label}:\n\n```\n{f.steady.text}\n```")


# --- main -----------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000,
                        help="jobs to enqueue, drain and purge in part 1 (default 1,000,000)")
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--batch", type=int, default=100, help="jobs per claim (default 100)")
    parser.add_argument("--chunk", type=int, default=10_000,
                        help="jobs per enqueue statement (default 10,000)")
    parser.add_argument("--backlog", type=int, default=20_000,
                        help="most jobs waiting or running before the next chunk "
                             "(default 20,000)")
    parser.add_argument("--samples", type=int, default=10,
                        help="measurements during part 1, one per jobs/samples done "
                             "(default 10)")
    parser.add_argument("--retention-seconds", type=int, default=60,
                        help="the janitor deletes done jobs older than this (default 60)")
    parser.add_argument("--janitor-interval", type=float, default=1.0,
                        help="seconds between janitor passes (default 1)")
    parser.add_argument("--purge-batch-size", type=int, default=1000,
                        help="done jobs deleted per purge statement (default 1,000)")
    parser.add_argument("--purge-max-batches", type=int, default=10,
                        help="purge statements per janitor pass (default 10)")
    parser.add_argument("--vacuum-every", type=float, default=0, metavar="SECONDS",
                        help="also run VACUUM jobs this often in part 1 (default 0: only "
                             "autovacuum), to measure that candidate change")
    parser.add_argument("--probe-rows", type=int, default=1_000_000,
                        help="pending, then done, rows in the part 2 probes (default 1,000,000)")
    parser.add_argument("--probe-pending", type=int, default=100,
                        help="pending rows beside the done ones (default 100)")
    parser.add_argument("--probe-runs", type=int, default=20,
                        help="timed claims per probe (default 20)")
    parser.add_argument("--table-option", action="append", default=[], metavar="NAME=VALUE",
                        help="a storage parameter for the jobs table on the scratch database, "
                             "e.g. fillfactor=80 (repeatable)")
    parser.add_argument("--skip-processing", action="store_true", help="only part 2")
    parser.add_argument("--skip-probes", action="store_true", help="only part 1")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(os.environ["DATABASE_URL"], args.batch)
        return
    for option in args.table_option:
        if not OPTION.match(option):
            parser.error(f"--table-option {option!r} is not NAME=VALUE")
    if min(args.jobs, args.workers, args.batch, args.chunk, args.backlog, args.samples,
           args.probe_rows, args.probe_pending, args.probe_runs) < 1:
        parser.error("sizes and counts must be at least 1")

    with scratch_database("pgdrain_growth") as url:
        conn = connect(url)
        try:
            migrate(conn)
            for option in args.table_option:
                conn.run(f"ALTER TABLE jobs SET ({option})")
            if not args.skip_processing:
                report_processing(conn, args, process(conn, url, args))
            if not args.skip_probes:
                if args.skip_processing:
                    print(server_line(conn))
                report_probes(args, probes(conn, args, args.table_option))
        finally:
            conn.close()


if __name__ == "__main__":
    main()
