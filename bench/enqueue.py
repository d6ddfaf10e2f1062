"""Enqueue: single requests through the handler, batches, and library inserts in a transaction.

    .venv/bin/python bench/enqueue.py [--jobs 20000] [--single 5000] [--rounds 3]

Requests/s and jobs/s of:

- the enqueue function's ``lambda_handler`` (functions/enqueue/app.py, loaded as Lambda would,
  called in-process with API Gateway proxy events shaped like events/enqueue_*.json): one job
  per request, and batches of 10, 100 and 500 (``{"jobs": [...]}``), each request on the
  function's own connection (autocommit, unprepared, as deployed; the doorbell is off);
- the library inside the caller's transaction on a pg8000 native connection, as the README's
  signup does (BEGIN, INSERT the user, ``pgdrain.enqueue``, COMMIT): one signup per
  transaction; 100 signups per transaction (100 user INSERTs and 100 ``enqueue`` calls); and
  100 users in one INSERT with their 100 jobs in one ``enqueue_many``.

By default every job carries a unique dedupe key (the handler gets an ``Idempotency-Key``
header, a batch's items ``<key>:<i>``; the library passes ``dedupe_key``), as the README
recommends; ``--no-dedupe-keys`` leaves them out. One-job configurations run ``--single``
requests or transactions per round, the others ``--jobs`` jobs. Each round runs every
configuration once, in a rotated order, on emptied tables; the table shows medians and each
configuration's jobs/s as a ratio to single requests through the handler. The embedded
PostgreSQL, or DATABASE_URL's server (a scratch database is created there and dropped).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import sys
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "pgdrain"), str(ROOT)]

import pgdrain  # noqa: E402
from pgdrain.db import connect  # noqa: E402
from pgdrain.migrate import migrate  # noqa: E402
from pgdrain_dev.context import LambdaContext  # noqa: E402
from pgdrain_dev.embedded import scratch_database  # noqa: E402

USERS_DDL = """
CREATE TABLE IF NOT EXISTS users (
  id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  email text UNIQUE NOT NULL
)
"""
EVENT = json.loads((ROOT / "events" / "enqueue_single.json").read_text())
JOB_TYPE = "send-email"  # registered by the function's default job modules


def load_handler(url: str, metrics: bool) -> Any:
    """functions/enqueue/app.py imported fresh, as a cold start would, pointed at ``url``."""
    os.environ.update({"DATABASE_URL": url, "POWERTOOLS_LOG_LEVEL": "WARNING",
                       "POWERTOOLS_METRICS_DISABLED": "false" if metrics else "true",
                       "POWERTOOLS_SERVICE_NAME": "pgdrain-bench"})
    os.environ.pop("DRAIN_FUNCTION_NAME", None)  # no doorbell: there is no drain to invoke
    spec = importlib.util.spec_from_file_location("pgdrain_bench_enqueue",
                                                  ROOT / "functions" / "enqueue" / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Counter:
    """Unique e-mail addresses and keys across every configuration and round."""

    def __init__(self) -> None:
        self.n = 0
        self.run = uuid.uuid4().hex[:6]

    def next(self) -> str:
        self.n += 1
        return f"user-{self.run}-{self.n}@example.com"


def event_for(body: dict[str, Any], key: str | None) -> dict[str, Any]:
    headers = {**EVENT["headers"]}
    multi = {**EVENT["multiValueHeaders"]}
    if key is not None:
        headers["Idempotency-Key"] = key
        multi["Idempotency-Key"] = [key]
    return {**EVENT, "headers": headers, "multiValueHeaders": multi, "body": json.dumps(body)}


def handler_requests(app: Any, counter: Counter, batch: int, requests: int,
                     dedupe: bool) -> Callable[[], None]:
    """Build the events first (outside the clock); return the timed part."""
    events = []
    for _ in range(requests):
        emails = [counter.next() for _ in range(batch)]
        jobs = [{"job_type": JOB_TYPE, "payload": {"to": e}} for e in emails]
        body = jobs[0] if batch == 1 else {"jobs": jobs}
        events.append(event_for(body, f"welcome-{emails[0]}" if dedupe else None))

    def run() -> None:
        # EMF metrics are printed to stdout (with --metrics, one line per request as in
        # Lambda; without, Powertools still prints a metric's values every 100 of them).
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            for event in events:
                response = app.lambda_handler(event, LambdaContext("pgdrain-enqueue", 30))
                if response["statusCode"] != 201:
                    raise SystemExit(f"the handler answered {response['statusCode']}: "
                                     f"{response['body']}")
    return run


def signups(conn: Any, counter: Counter, per_transaction: int, transactions: int,
            dedupe: bool) -> Callable[[], None]:
    """The README's signup: each user's INSERT and its job's ``enqueue``, in one transaction."""
    batches = [[counter.next() for _ in range(per_transaction)] for _ in range(transactions)]

    def run() -> None:
        for emails in batches:
            conn.run("BEGIN")
            for email in emails:
                conn.run("INSERT INTO users (email) VALUES (:email)", email=email)
                pgdrain.enqueue(conn, JOB_TYPE, {"to": email},
                                dedupe_key=f"welcome-{email}" if dedupe else None)
            conn.run("COMMIT")
    return run


def bulk_signups(conn: Any, counter: Counter, per_transaction: int, transactions: int,
                 dedupe: bool) -> Callable[[], None]:
    """Users inserted in one statement and their jobs in one ``enqueue_many``, one transaction."""
    batches = [[counter.next() for _ in range(per_transaction)] for _ in range(transactions)]

    def run() -> None:
        for emails in batches:
            conn.run("BEGIN")
            conn.run("INSERT INTO users (email) SELECT unnest(CAST(:emails AS text[]))",
                     emails=emails)
            pgdrain.enqueue_many(conn, [
                {"job_type": JOB_TYPE, "payload": {"to": e},
                 "dedupe_key": f"welcome-{e}" if dedupe else None} for e in emails])
            conn.run("COMMIT")
    return run


def configurations(args: argparse.Namespace) -> list[tuple[str, str, int, int]]:
    """(label, kind, jobs per request or transaction, requests or transactions per round)."""
    configs = [("handler, single-job requests", "handler", 1, args.single)]
    configs += [(f"handler, batches of {b}", "handler", b, max(1, args.jobs // b))
                for b in args.batches]
    configs += [
        ("library: enqueue, 1 signup per transaction", "signup", 1, args.single),
        (f"library: enqueue, {args.per_transaction} signups per transaction", "signup",
         args.per_transaction, max(1, args.jobs // args.per_transaction)),
        (f"library: enqueue_many, {args.per_transaction} per transaction (users in one "
         "INSERT)", "bulk", args.per_transaction, max(1, args.jobs // args.per_transaction)),
    ]
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000,
                        help="jobs per round for batch configurations (default 20,000)")
    parser.add_argument("--single", type=int, default=5_000,
                        help="requests or transactions per round for one-job configurations "
                             "(default 5,000)")
    parser.add_argument("--batches", type=int, nargs="+", default=[10, 100, 500],
                        metavar="N", help="handler batch sizes (default 10 100 500; the "
                                          "function accepts up to PGDRAIN_MAX_BATCH, 500)")
    parser.add_argument("--per-transaction", type=int, default=100,
                        help="jobs per transaction in the library's batch configurations "
                             "(default 100)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--metrics", action="store_true",
                        help="keep the handler's EMF metrics on (one JSON line per request, "
                             "written to /dev/null); default: POWERTOOLS_METRICS_DISABLED=true")
    parser.add_argument("--dedupe-keys", action=argparse.BooleanOptionalAction, default=True,
                        help="give every job a unique dedupe key (default: yes)")
    args = parser.parse_args()
    if min(args.jobs, args.single, args.per_transaction, args.rounds, *args.batches) < 1:
        parser.error("sizes and counts must be at least 1")
    # Without application metrics in an invocation (after Powertools' every-100 flush cleared
    # them), log_metrics warns; that is Powertools' bookkeeping, not the benchmark's concern.
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    if max(args.batches) > 500:
        os.environ["PGDRAIN_MAX_BATCH"] = str(max(args.batches))

    with scratch_database("pgdrain_bench_enqueue") as url:
        conn = connect(url)
        try:
            migrate(conn)
            conn.run(USERS_DDL)
            app = load_handler(url, args.metrics)
            try:
                run(conn, app, args)
            finally:
                app.CONNECTOR.discard()
        finally:
            conn.close()


def run(conn: Any, app: Any, args: argparse.Namespace) -> None:
    """All rounds; prints the Markdown table."""
    version = conn.run("SHOW server_version")[0][0]
    configs = configurations(args)
    counter = Counter()
    rates: dict[str, list[float]] = {label: [] for label, *_ in configs}
    for round_no in range(args.rounds):
        shift = round_no % len(configs)
        for label, kind, size, count in configs[shift:] + configs[:shift]:
            conn.run("TRUNCATE jobs, users")
            if kind == "handler":
                timed = handler_requests(app, counter, size, count, args.dedupe_keys)
            elif kind == "signup":
                timed = signups(conn, counter, size, count, args.dedupe_keys)
            else:
                timed = bulk_signups(conn, counter, size, count, args.dedupe_keys)
            started = time.perf_counter()
            timed()
            seconds = time.perf_counter() - started
            inserted = conn.run("SELECT count(*) FROM jobs")[0][0]
            if inserted != size * count:
                raise SystemExit(f"{label}: {inserted} jobs inserted, expected {size * count}")
            rates[label].append(count / seconds)
            print(f"round {round_no + 1}: {label}: {count / seconds:,.0f} requests/s, "
                  f"{size * count / seconds:,.0f} jobs/s", file=sys.stderr, flush=True)
    base = statistics.median(rates[configs[0][0]])
    print(f"\nPostgreSQL {version}, median of {args.rounds} interleaved rounds, "
          f"{os.cpu_count()} CPUs; {args.single:,} requests or transactions per round for one "
          f"job each, {args.jobs:,} jobs per round for the others; dedupe keys "
          f"{'on' if args.dedupe_keys else 'off'}; handler metrics "
          f"{'on' if args.metrics else 'off'}, job logs off\n")
    print("| configuration | requests or transactions/s (median) | jobs/s (median) | "
          "jobs/s per round | ratio to single requests (jobs/s) |")
    print("|---|---:|---:|---|---:|")
    for label, _, size, _ in configs:
        median = statistics.median(rates[label])
        runs = ", ".join(f"{r * size:,.0f}" for r in rates[label])
        print(f"| {label} | {median:,.0f} | {median * size:,.0f} | {runs} | "
              f"{median * size / base:.1f} |")


if __name__ == "__main__":
    main()
