"""Sustained load: producers and drains together, for long enough that bloat, autovacuum and
index churn show (the seed's named limit: "at sustained thousands of jobs per second, vacuum
pressure on the jobs table becomes its own operational problem").

    .venv/bin/python bench/sustained.py --rate 5000 --minutes 30 [--producers 2] [--batch 20]
        [--singles 0.1] [--drains 4] [--retention-seconds N] [--sample-seconds 10]
        [--csv FILE] [--system pgdrain|seed|pgqueuer]
    .venv/bin/python bench/sustained.py --find-rate 3000,6000,9000,12000,15000 --minutes 5

On a scratch database (the embedded PostgreSQL, or DATABASE_URL's server; created and
dropped). ``--producers`` processes enqueue no-op jobs through the library
(``pgdrain.enqueue_many``, ``--batch`` jobs per transaction) and more enqueue single jobs
(``pgdrain.enqueue``, a transaction each; one process per 200 a second) carrying
``--singles`` of the rate: ``--rate`` jobs/s in all, on a fixed schedule. ``--drains``
processes call the drain function's real ``lambda_handler`` in a loop at its defaults (the
janitor, its purge with ``PGDRAIN_RETENTION_SECONDS`` as shipped unless
``--retention-seconds``, its vacuum), pausing 20 ms when a call claimed nothing. Every job
records when it waited (bench/sustained_jobs.py), and each drain how long its claim
statements took.

``--system seed`` runs the seed article's design instead, on its own table: plain-SQL
enqueues (one statement a batch) and the seed's worker loop (a job a claim, its done write
after; done rows kept, as the seed's own purge would keep a week of them). ``--system
pgqueuer`` runs PgQueuer 1.6 at its defaults (its producer's batch enqueue, its worker's
continuous mode, batch_size 10) in the peers' environment (PEERS_PYTHON, ``make
bench-peers``; bench/sustained_peers.py); its three tables (queue, log, statistics) are
measured together.

Every ``--sample-seconds`` the main process records the server's side: the tables' heap and
index sizes, live and dead tuples, vacuums (auto and the drain's own), WAL written and, when
the server runs on this machine, its CPU. At the end it prints, per sample: jobs/s in and out,
enqueue -> start and enqueue -> claim p50/p99, the claim statement's p99, and those figures;
then the verdict: whether the rate was offered, whether the drains kept up (out within 2 % of
in, backlog at the end under 2 s of the rate), whether latency stayed flat (p99 of the last
10 minutes within 1.5x of the first 10; thirds of the run when it is shorter than 30
minutes) and whether the size plateaued (the last third grew the tables and their indexes by
under 5 %, or by under 10 bytes a job done meanwhile: a row version kept a job is hundreds).

``--find-rate R1,R2,...`` runs each rate in turn (``--minutes`` each, a fresh database each)
and ends with the highest that held all four: the rate this machine sustains.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "pgdrain"), str(ROOT / "functions" / "drain"), str(ROOT)]

from bench.sustained_bins import BUCKET_SECONDS, from_bin  # noqa: E402
from bench.throughput import SEED_DDL, server_cpu_seconds, wal_lsn  # noqa: E402

IDLE_PAUSE = 0.02
PLATEAU_BYTES_PER_JOB = 10
# --system seed: the seed article's design, its one-row claim and done write (bench/worker.py),
# on its own table; the claim returns how long the job waited, by the database's clock.
SEED_CLAIM = """
UPDATE seed_jobs
SET status = 'running', attempts = attempts + 1
WHERE id = (
  SELECT id FROM seed_jobs
  WHERE status = 'pending' AND run_at <= now()
  ORDER BY run_at
  FOR UPDATE SKIP LOCKED
  LIMIT 1
)
RETURNING id, EXTRACT(EPOCH FROM clock_timestamp() - created_at)::float8 * 1000
"""
SEED_COMPLETE = "UPDATE seed_jobs SET status = 'done' WHERE id = :id"
SEED_ENQUEUE = "INSERT INTO seed_jobs (job_type) SELECT 'timed' FROM generate_series(1, :n)"
# Each system's tables (measured together) and its backlog: jobs not yet finished.
TABLES = {"pgdrain": ("jobs",), "seed": ("seed_jobs",),
          "pgqueuer": ("pgqueuer", "pgqueuer_log", "pgqueuer_statistics")}
BACKLOG = {"pgdrain": "SELECT count(*) FROM jobs WHERE status IN ('pending', 'running')",
           "seed": "SELECT count(*) FROM seed_jobs WHERE status IN ('pending', 'running')",
           "pgqueuer": "SELECT count(*) FROM pgqueuer"}
PEERS_PYTHON = os.environ.get("PEERS_PYTHON")
PEERS_SCRIPT = str(ROOT / "bench" / "sustained_peers.py")


# --- the processes ------------------------------------------------------------------------


def produce(url: str, rate: float, batch: int, begin: float, end: float, out: str,
            system: str = "pgdrain") -> None:
    """Enqueue ``batch`` jobs a transaction at ``rate`` jobs/s until ``end``; write how many
    went in per bucket, and how far behind the schedule it fell at worst. ``system`` seed:
    plain SQL into the seed's table, one statement a batch."""
    import pgdrain
    from pgdrain.db import connect

    conn = connect(url)
    interval, due = batch / rate, max(begin, time.time())
    enqueued, worst_lag = Counter(), 0.0
    jobs = [{"job_type": "timed"} for _ in range(batch)]
    single = batch == 1 and system != "seed"
    # Until the end of the run by the clock: producers that fell behind the schedule stop
    # there too (what they did not offer is their lag, reported), instead of enqueueing past
    # the drains' end.
    while due < end and time.time() < end:
        pause = due - time.time()
        if pause > 0:
            time.sleep(pause)
        else:
            worst_lag = max(worst_lag, -pause)
        if system == "seed":
            conn.run(SEED_ENQUEUE, n=batch)
        elif single:  # autocommit: the insert is its own transaction
            pgdrain.enqueue(conn, "timed")
        else:
            conn.run("BEGIN")
            pgdrain.enqueue_many(conn, jobs)
            conn.run("COMMIT")
        enqueued[int(time.time() // BUCKET_SECONDS)] += batch
        due += interval
    conn.close()
    Path(out).write_text(json.dumps({"enqueued": enqueued, "worst_lag": worst_lag}))


def drain(end: float, out: str, system: str = "pgdrain", url: str = "") -> None:
    """Call the drain function until ``end``; write the jobs' waits per bucket. ``system``
    seed: the seed's worker loop instead, a job a claim."""
    from bench import sustained_jobs

    calls = idle = 0
    if system == "seed":
        from pgdrain.db import connect

        conn = connect(url)
        while time.time() < end:
            began = time.perf_counter()
            rows = conn.run(SEED_CLAIM)
            calls += 1
            if not rows:
                idle += 1
                time.sleep(IDLE_PAUSE)
                continue
            conn.run(SEED_COMPLETE, id=rows[0][0])
            sustained_jobs.record_wait(rows[0][1])
            sustained_jobs.record_claim_call((time.perf_counter() - began) * 1000)
        conn.close()
        Path(out).write_text(json.dumps({"start": sustained_jobs.start_waits,
                                         "claim": sustained_jobs.claim_waits,
                                         "claim_calls": sustained_jobs.claim_calls,
                                         "calls": calls, "idle": idle}))
        return
    import app

    from pgdrain.drain.postgres import PostgresStore
    from pgdrain_dev.context import LambdaContext

    claim = PostgresStore.claim

    def timed_claim(self, **kwargs):  # the store's own call, timed where the drain makes it
        began = time.perf_counter()
        try:
            return claim(self, **kwargs)
        finally:
            sustained_jobs.record_claim_call((time.perf_counter() - began) * 1000)

    PostgresStore.claim = timed_claim
    while time.time() < end:
        summary = app.lambda_handler({}, LambdaContext("sustained", 60))
        calls += 1
        if not summary["claimed"]:
            idle += 1
            time.sleep(IDLE_PAUSE)
    Path(out).write_text(json.dumps({"start": sustained_jobs.start_waits,
                                     "claim": sustained_jobs.claim_waits,
                                     "claim_calls": sustained_jobs.claim_calls,
                                     "calls": calls, "idle": idle}))


# --- the samples --------------------------------------------------------------------------


@dataclass
class Sample:
    at: float
    heap_mb: float
    indexes_mb: float
    live: int
    dead: int
    vacuums: int
    wal_mb: float
    server_cpu_s: float | None
    backlog: int


def sample(conn, system: str = "pgdrain") -> Sample:
    tables = TABLES[system]
    row = conn.run("""
        SELECT sum(pg_relation_size(relid)), sum(pg_indexes_size(relid)),
               sum(n_live_tup), sum(n_dead_tup), sum(autovacuum_count + vacuum_count)
        FROM pg_stat_user_tables WHERE relname = ANY (:tables)""", tables=list(tables))[0]
    backlog = conn.run(BACKLOG[system])[0][0]
    return Sample(at=time.time(), heap_mb=int(row[0]) / 2**20, indexes_mb=int(row[1]) / 2**20,
                  live=int(row[2]), dead=int(row[3]), vacuums=int(row[4]),
                  wal_mb=wal_lsn(conn) / 2**20, server_cpu_s=server_cpu_seconds(),
                  backlog=backlog)


def percentile(histogram: Counter, share: float) -> float | None:
    total = sum(histogram.values())
    if not total:
        return None
    seen = 0
    for index in sorted(histogram):
        seen += histogram[index]
        if seen >= share * total:
            return from_bin(index)
    return None


def merged(reports: list[dict], key: str) -> dict[int, Counter]:
    out: dict[int, Counter] = {}
    for report in reports:
        for bucket, bins in report.get(key, {}).items():
            out.setdefault(int(bucket), Counter()).update({int(b): n for b, n in bins.items()})
    return out


def window(histograms: dict[int, Counter], first: int, last: int) -> Counter:
    total: Counter = Counter()
    for bucket in range(first, last + 1):
        total.update(histograms.get(bucket, Counter()))
    return total


# --- the run ------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, help="jobs/s offered, in all")
    parser.add_argument("--find-rate", metavar="R1,R2,...",
                        help="run each rate in turn; report the highest that held")
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=20, help="jobs per enqueue transaction")
    parser.add_argument("--singles", type=float, default=0.1,
                        help="share of the rate enqueued a job a transaction (default 0.1)")
    parser.add_argument("--drains", type=int, default=4)
    parser.add_argument("--retention-seconds", type=int,
                        help="PGDRAIN_RETENTION_SECONDS for the drains (default: as shipped)")
    parser.add_argument("--sample-seconds", type=float, default=10)
    parser.add_argument("--csv", help="write the samples here too")
    parser.add_argument("--system", choices=sorted(TABLES), default="pgdrain",
                        help="seed: the seed article's design (its table, its one-row claim, "
                             "plain-SQL enqueues); pgqueuer: PgQueuer at its defaults "
                             "(PEERS_PYTHON)")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--begin", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--end", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "produce":
        return produce(args.url, args.rate, args.batch, args.begin, args.end, args.out,
                       args.system)
    if args.role == "drain":
        return drain(args.end, args.out, args.system, args.url)
    if (args.rate is None) == (args.find_rate is None):
        parser.error("give --rate or --find-rate")
    if not 0 <= args.singles < 1:
        parser.error("--singles is a share of the rate: from 0 to under 1")
    if args.system == "pgqueuer" and not PEERS_PYTHON:
        parser.error("--system pgqueuer needs PEERS_PYTHON (make bench-peers)")
    rates = ([args.rate] if args.find_rate is None
             else [float(r) for r in args.find_rate.split(",")])
    held = []
    for rate in rates:
        summary = run_at(argparse.Namespace(**{**vars(args), "rate": rate}))
        if all(summary[k] for k in ("offered", "kept_up", "flat", "plateau")):
            held.append(rate)
    if args.find_rate is not None:
        print(f"\nheld (offered, kept up, flat, plateaued): "
              f"{', '.join(f'{r:,.0f}' for r in held) or 'none'} jobs/s; the highest: "
              f"{max(held):,.0f}" if held else "\nno rate tried held")


def run_at(args: argparse.Namespace) -> dict:
    """One run at ``args.rate`` on a fresh scratch database; its verdict."""
    from pgdrain.db import connect
    from pgdrain.migrate import migrate
    from pgdrain_dev.embedded import scratch_database

    with scratch_database("sustained") as url, tempfile.TemporaryDirectory() as scratch:
        conn = connect(url)
        migrate(conn)
        conn.run(SEED_DDL)
        if args.system == "pgqueuer":
            subprocess.run([PEERS_PYTHON, PEERS_SCRIPT, "install", url], check=True)
        version = conn.run("SHOW server_version")[0][0]
        try:
            return run(conn, url, args, Path(scratch), version)
        finally:
            conn.close()


SINGLES_PER_PRODUCER = 200
"""Single enqueues one producer offers a second at most: each is a transaction that waits for
its commit's WAL flush (a few ms here), so more of them run side by side, as an application's
requests would, and share flushes (group commit)."""


def _producers(args: argparse.Namespace) -> list[tuple[float, int]]:
    """Each producer's (rate, batch): ``--producers`` batch producers sharing what the single
    enqueues (``--singles`` of the rate, SINGLES_PER_PRODUCER a process) leave."""
    singles = args.rate * args.singles if args.batch > 1 else 0.0
    batched = (args.rate - singles) / args.producers
    single_producers = math.ceil(singles / SINGLES_PER_PRODUCER)
    return ([(batched, args.batch)] * args.producers
            + [(singles / single_producers, 1)] * single_producers)


def run(conn, url: str, args: argparse.Namespace, scratch: Path, version: str) -> dict:
    start = time.time() + 3  # every process imports and connects first
    end = start + args.minutes * 60
    env = {**os.environ, "DATABASE_URL": url, "PGDRAIN_JOBS": "bench.sustained_jobs",
           "POWERTOOLS_LOG_LEVEL": "WARNING", "PYTHONPATH": os.pathsep.join(sys.path[:3])}
    if args.retention_seconds is not None:
        env["PGDRAIN_RETENTION_SECONDS"] = str(args.retention_seconds)
    me = [sys.executable, str(Path(__file__).resolve())]
    producers, processes = _producers(args), []
    for i, (rate, batch) in enumerate(producers):
        out = str(scratch / f"p{i}")
        command = ([PEERS_PYTHON, PEERS_SCRIPT, "produce", url, str(rate), str(batch),
                    str(start), str(end), out] if args.system == "pgqueuer" else
                   [*me, "--role", "produce", "--url", url, "--rate", str(rate), "--batch",
                    str(batch), "--begin", str(start), "--end", str(end), "--out", out,
                    "--system", args.system])
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL))
    for i in range(args.drains):
        out = str(scratch / f"d{i}")
        command = ([PEERS_PYTHON, PEERS_SCRIPT, "consume", url, str(end), out]
                   if args.system == "pgqueuer" else
                   [*me, "--role", "drain", "--rate", "0", "--end", str(end), "--url", url,
                    "--out", out, "--system", args.system])
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL))
    time.sleep(max(0.0, start - time.time()))
    samples = [sample(conn, args.system)]
    while time.time() < end:
        time.sleep(max(0.0, min(args.sample_seconds, end - time.time())))
        samples.append(sample(conn, args.system))
    for process in processes:
        try:  # a drain call lasts at most its 60 s context; a producer its last batch
            code = process.wait(timeout=max(0.0, end - time.time()) + 120)
        except subprocess.TimeoutExpired:
            code = None
        if code != 0:
            for other in processes:
                other.kill()
            raise SystemExit(f"a benchmark process failed (exit {code}, None: hung)")
    produced = [json.loads((scratch / f"p{i}").read_text()) for i in range(len(producers))]
    drained = [json.loads((scratch / f"d{i}").read_text()) for i in range(args.drains)]
    return report(args, version, samples, produced, drained)


def report(args, version: str, samples: list[Sample], produced: list[dict],
           drained: list[dict]) -> None:
    enqueued: Counter = Counter()
    for p in produced:
        enqueued.update({int(b): n for b, n in p["enqueued"].items()})
    starts, claims = merged(drained, "start"), merged(drained, "claim")
    claim_calls = merged(drained, "claim_calls")
    started = {b: sum(h.values()) for b, h in starts.items()}
    rows = []
    for before, after in pairwise(samples):
        first, last = int(before.at // BUCKET_SECONDS), int(after.at // BUCKET_SECONDS) - 1
        seconds = after.at - before.at
        waits, claim_waits = window(starts, first, last), window(claims, first, last)
        cpu = (None if after.server_cpu_s is None or before.server_cpu_s is None
               else after.server_cpu_s - before.server_cpu_s)
        done = sum(started.get(b, 0) for b in range(first, last + 1))
        rows.append({
            "minute": round((after.at - samples[0].at) / 60, 2),
            "in_per_s": round(sum(enqueued.get(b, 0) for b in range(first, last + 1))
                              / seconds),
            "out_per_s": round(done / seconds),
            "start_p50_ms": percentile(waits, 0.5), "start_p99_ms": percentile(waits, 0.99),
            "claim_p99_ms": percentile(claim_waits, 0.99),
            "claim_call_p99_ms": percentile(window(claim_calls, first, last), 0.99),
            "heap_mb": round(after.heap_mb, 1), "indexes_mb": round(after.indexes_mb, 1),
            "live": after.live, "dead": after.dead, "vacuums": after.vacuums,
            "backlog": after.backlog,
            "wal_bytes_per_job": round((after.wal_mb - before.wal_mb) * 2**20 / done)
            if done else None,
            "server_cpu_us_per_job": round(cpu * 1e6 / done) if cpu is not None and done
            else None})
    if args.csv:
        path = Path(args.csv)
        if args.find_rate is not None:  # a file for each rate tried
            path = path.with_name(f"{path.stem}-{args.rate:.0f}{path.suffix}")
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    columns = list(rows[0])
    print(f"\n{args.system}: {args.rate:,.0f} jobs/s offered for {args.minutes:g} min, "
          f"{args.producers} producers (batches of {args.batch}) and "
          f"{args.singles:.0%} of the rate in single enqueues, {args.drains} drains, "
          f"PostgreSQL {version}, {os.cpu_count()} CPUs\n")
    print("| " + " | ".join(columns) + " |\n|" + "---:|" * len(columns))
    for row in rows:
        print("| " + " | ".join("-" if row[c] is None else f"{row[c]:,}" if isinstance(
            row[c], int) else f"{row[c]:,.1f}" for c in columns) + " |")
    return verdict(args, samples, rows, enqueued, starts, produced, drained)


def verdict(args, samples, rows, enqueued, starts, produced, drained) -> dict:
    total_in, total_out = sum(enqueued.values()), sum(sum(h.values()) for h in starts.values())
    span = 10 if args.minutes >= 30 else args.minutes / 3
    buckets = sorted(starts)
    per_span = max(1, int(span * 60 // BUCKET_SECONDS))
    first = window(starts, buckets[0], buckets[0] + per_span - 1) if buckets else Counter()
    last = window(starts, buckets[-1] - per_span + 1, buckets[-1]) if buckets else Counter()
    p99_first, p99_last = percentile(first, 0.99), percentile(last, 0.99)
    third = samples[len(samples) * 2 // 3]
    size_then = third.heap_mb + third.indexes_mb
    size_end = samples[-1].heap_mb + samples[-1].indexes_mb
    growth = (size_end - size_then) / size_then if size_then else 0.0
    done_since = sum(sum(h.values()) for b, h in starts.items()
                     if b * BUCKET_SECONDS >= third.at)
    growth_per_job = ((size_end - size_then) * 2**20 / done_since if done_since else 0.0)
    # Plateaued: the last third grew the tables by under 5 %, or by under 10 bytes a job done
    # meanwhile. A short run's small table still settles by a few percent; a table that
    # keeps what its jobs leave grows by a row version a job (hundreds of bytes).
    plateau = growth < 0.05 or growth_per_job < PLATEAU_BYTES_PER_JOB
    kept_up = total_out >= 0.98 * total_in and samples[-1].backlog < 2 * args.rate
    offered = total_in >= 0.98 * args.rate * args.minutes * 60
    flat = p99_first is not None and p99_last is not None and p99_last <= 1.5 * p99_first
    wal = (samples[-1].wal_mb - samples[0].wal_mb) * 2**20 / total_out if total_out else 0.0
    out_rates = [r["out_per_s"] for r in rows]
    print(f"\nin {total_in:,} jobs, out {total_out:,}; backlog at the end "
          f"{samples[-1].backlog:,}; producers fell behind their schedule by at most "
          f"{max(p['worst_lag'] for p in produced):.2f} s; drain calls "
          f"{sum(d['calls'] for d in drained):,} ({sum(d['idle'] for d in drained):,} idle)")
    print(f"out jobs/s median {statistics.median(out_rates):,.0f}; enqueue -> start p99 first "
          f"{span:.3g} min {_ms(p99_first)}, last {span:.3g} min {_ms(p99_last)}; WAL {wal:,.0f} "
          f"bytes a job; table + indexes {size_then:,.1f} MB at two thirds, {size_end:,.1f} MB "
          f"at the end ({growth:+.1%}, {growth_per_job:+,.1f} bytes a job done since)")
    print(f"rate offered: {'yes' if offered else 'NO (the producers fell behind)'}; "
          f"kept up: {'yes' if kept_up else 'NO'}; latency flat: {'yes' if flat else 'NO'}; "
          f"size plateaued: {'yes' if plateau else 'NO'}")
    summary = {"system": args.system, "rate": args.rate, "minutes": args.minutes,
               "offered": offered, "kept_up": kept_up, "flat": flat,
               "plateau": plateau, "growth_bytes_per_job": round(growth_per_job, 1),
               "p99_first_ms": p99_first,
               "p99_last_ms": p99_last, "wal_bytes_per_job": round(wal),
               "size_end_mb": round(size_end, 1),
               "samples": [asdict(s) for s in samples[-1:]]}
    print(json.dumps({"summary": summary}), flush=True)
    return summary


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} ms"


if __name__ == "__main__":
    main()
