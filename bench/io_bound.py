"""I/O-bound jobs: one drain at PGDRAIN_CONCURRENCY 1, 10 and 50 against the seed's worker.

    .venv/bin/python bench/io_bound.py [--ms 200] [--per-slot 20] [--rounds 3]

Each job is an HTTP GET to a local server (127.0.0.1) that answers after ``--ms``
milliseconds, as a webhook or an API sync waits on the network: the ``http-get`` handler
below, plain ``def`` on worker threads, and ``http-get-async`` (``async def``, the same wait on
the event loop) at the highest concurrency. The seed's worker runs the same call for each of
its jobs, one at a time, as the article's loop does. Each configuration gets ``--per-slot``
jobs per handler slot, so every run lasts about the same time; rounds are interleaved;
medians are printed with each configuration's ratio to the drain at concurrency 1.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "pgdrain"), str(ROOT / "dev"), str(ROOT)]

import pgdrain  # noqa: E402
from pgdrain.db import Connector, connect  # noqa: E402
from pgdrain.drain import drain  # noqa: E402
from pgdrain.migrate import migrate  # noqa: E402
from pgdrain.registry import Registry  # noqa: E402
from pgdrain_dev.embedded import scratch_database  # noqa: E402

REGISTRY = Registry()
URL = ""


@pgdrain.job("http-get", timeout=10, registry=REGISTRY)
def http_get(job: pgdrain.Job) -> None:
    with urllib.request.urlopen(URL, timeout=5) as response:
        response.read()


@pgdrain.job("http-get-async", timeout=10, registry=REGISTRY)
async def http_get_async(job: pgdrain.Job) -> None:
    host, port = URL.split("//")[1].split("/")[0].split(":")
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 5)
    writer.write(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    await asyncio.wait_for(reader.read(), 5)
    writer.close()


def slow_server(ms: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self) -> None:
            time.sleep(ms / 1000)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 512  # listen backlog: 50 callers at once must not be dropped

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


SEED_CLAIM = """
UPDATE seed_jobs SET status = 'running', attempts = attempts + 1
WHERE id = (SELECT id FROM seed_jobs WHERE status = 'pending' AND run_at <= now()
            ORDER BY run_at FOR UPDATE SKIP LOCKED LIMIT 1)
RETURNING id
"""


def seed_worker(url: str, jobs: int) -> float:
    conn = connect(url)
    conn.run("CREATE TABLE IF NOT EXISTS seed_jobs (id bigint GENERATED ALWAYS AS IDENTITY "
             "PRIMARY KEY, status text NOT NULL DEFAULT 'pending', attempts int NOT NULL "
             "DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now())")
    conn.run("TRUNCATE seed_jobs")
    conn.run(f"INSERT INTO seed_jobs (status) SELECT 'pending' FROM generate_series(1, {jobs})")
    started = time.perf_counter()
    while rows := conn.run(SEED_CLAIM):
        with urllib.request.urlopen(URL, timeout=5) as response:
            response.read()
        conn.run("UPDATE seed_jobs SET status = 'done' WHERE id = :id", id=rows[0][0])
    elapsed = time.perf_counter() - started
    conn.close()
    return jobs / elapsed


def drain_run(url: str, connector: Connector, job_type: str, concurrency: int,
              jobs: int) -> float:
    conn = connect(url)
    conn.run("TRUNCATE jobs")
    conn.run(f"INSERT INTO jobs (job_type) SELECT '{job_type}' FROM generate_series(1, {jobs})")
    conn.close()
    settings = pgdrain.Settings(concurrency=concurrency, max_jobs=100_000)
    deadline = time.monotonic() + 900
    started = time.perf_counter()
    summary = drain(connector, REGISTRY, settings,
                    time_left=lambda: deadline - time.monotonic())
    elapsed = time.perf_counter() - started
    if summary.done != jobs:
        raise SystemExit(f"{job_type} at {concurrency}: {summary}")
    return jobs / elapsed


def main() -> None:
    global URL
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", type=int, default=200)
    parser.add_argument("--per-slot", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    server = slow_server(args.ms)
    URL = f"http://127.0.0.1:{server.server_address[1]}/"
    configs = [("seed worker (1 process)", None, 1), ("drain, concurrency 1", "http-get", 1),
               ("drain, concurrency 10", "http-get", 10),
               ("drain, concurrency 50", "http-get", 50),
               ("drain, concurrency 50, async def", "http-get-async", 50)]
    rates: dict[str, list[float]] = {label: [] for label, *_ in configs}
    with scratch_database("pgdrain_io") as url:
        conn = connect(url)
        migrate(conn)
        conn.close()
        connector = Connector(lambda timeout=None: connect(url, timeout=timeout))
        for round_no in range(args.rounds):
            order = configs[round_no:] + configs[:round_no]
            for label, job_type, concurrency in order:
                jobs = args.per_slot * concurrency
                rate = (seed_worker(url, jobs) if job_type is None
                        else drain_run(url, connector, job_type, concurrency, jobs))
                rates[label].append(rate)
                print(f"round {round_no + 1}: {label}: {rate:,.1f} jobs/s", file=sys.stderr,
                      flush=True)
        connector.discard()
    server.shutdown()
    base = statistics.median(rates["drain, concurrency 1"])
    print(f"\nJobs of {args.ms} ms (an HTTP GET to 127.0.0.1 answered after {args.ms} ms), "
          f"{args.per_slot} per handler slot, median of {args.rounds} interleaved rounds\n")
    print("| configuration | jobs/s (median) | runs | ratio to the drain at concurrency 1 |")
    print("|---|---:|---|---:|")
    for label, *_ in configs:
        median = statistics.median(rates[label])
        runs = ", ".join(f"{r:,.1f}" for r in rates[label])
        print(f"| {label} | {median:,.1f} | {runs} | {median / base:.1f} |")


if __name__ == "__main__":
    main()
