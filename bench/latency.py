"""Enqueue → start latency, through the library (``pgdrain.aws.ring`` after the commit) and
through the enqueue function (``POST /jobs``), with an idle queue and under a steady load.

    .venv/bin/python bench/latency.py [--idle 100] [--load-seconds 10] [--rate 20]

The drain function runs behind the local Lambda Invoke stand-in (pgdrain_dev.lambda_standin,
worker processes that stay warm, as Lambda containers do); the schedule is off, so every
start comes from a ring or from a drain's continuation. A job's latency is its first start
(recorded by its handler, the database's clock) minus its ``created_at`` (the enqueue's
transaction, same clock). Idle: one job at a time, 0.3-1 s apart, so the previous drain has
usually returned. Load: ``--rate`` jobs a second for ``--load-seconds``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "pgdrain"), str(ROOT / "dev"), str(ROOT)]

import pgdrain  # noqa: E402
from pgdrain.db import connect  # noqa: E402
from pgdrain.migrate import migrate  # noqa: E402
from pgdrain_dev.context import LambdaContext  # noqa: E402
from pgdrain_dev.embedded import scratch_database  # noqa: E402
from pgdrain_dev.lambda_standin import StandIn, make_server, standin_env  # noqa: E402


def percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return (statistics.median(ordered),
            ordered[min(len(ordered) - 1, max(0, round(len(ordered) * 0.99) - 1))])


def latencies(conn, ids: list[int]) -> list[float]:
    deadline = time.monotonic() + 120
    while True:
        rows = conn.run("SELECT extract(epoch FROM min(s.started_at) - j.created_at) "
                        "FROM jobs j JOIN starts s ON s.job_id = j.id "
                        "WHERE j.id = ANY(:ids) GROUP BY j.id", ids=ids)
        if len(rows) == len(ids) or time.monotonic() > deadline:
            return [float(r[0]) for r in rows]
        time.sleep(0.05)


def enqueue_function(env: dict[str, str]):
    os.environ.update(env)
    spec = importlib.util.spec_from_file_location("enqueue_app",
                                                  ROOT / "functions" / "enqueue" / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    event = json.loads((ROOT / "events" / "enqueue_single.json").read_text())
    event["body"] = json.dumps({"job_type": "stamp", "payload": {}})
    event["isBase64Encoded"] = False

    def post() -> int:
        response = module.lambda_handler(event, LambdaContext("pgdrain-enqueue", 15))
        return json.loads(response["body"])["ids"][0]

    return post


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=100)
    parser.add_argument("--load-seconds", type=float, default=10)
    parser.add_argument("--rate", type=float, default=20)
    args = parser.parse_args()
    rng = random.Random(7)
    with scratch_database("pgdrain_latency") as url:
        conn = connect(url)
        migrate(conn)
        conn.run("CREATE TABLE starts (job_id bigint, started_at timestamptz)")
        state = StandIn(ROOT / "functions" / "drain", timeout=120, max_containers=8,
                        log_path=None, env={}, quiet=True)
        server = make_server(state)
        port = server.server_address[1]
        env = {"DATABASE_URL": url, "PGDRAIN_JOBS": "bench.jobs",
               "POWERTOOLS_LOG_LEVEL": "ERROR", "DRAIN_FUNCTION_NAME": "pgdrain-drain"}
        state.env = {**standin_env(port), **env,
                     "PYTHONPATH": f"{ROOT}:{ROOT / 'layers' / 'pgdrain'}:{ROOT / 'dev'}"}
        os.environ.update({k: v for k, v in standin_env(port).items()
                           if k.startswith("AWS_") and k != "AWS_LAMBDA_FUNCTION_NAME"})
        os.environ.update(env)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        from pgdrain.aws import ring

        post = enqueue_function({**env, "POWERTOOLS_SERVICE_NAME": "pgdrain-enqueue"})

        def library() -> int:
            job = pgdrain.enqueue(conn, "stamp", {})
            ring(conn)
            return job.id

        # Warm the containers first (a cold start is Lambda's, not the queue's).
        latencies(conn, [library() for _ in range(3)])
        results = {}
        for name, enqueue in (("library", library), ("API", post)):
            ids = []
            for _ in range(args.idle):
                ids.append(enqueue())
                latencies(conn, ids[-1:])
                time.sleep(rng.uniform(0.3, 1.0))
            results[f"{name}, idle"] = latencies(conn, ids)
            ids = []
            until = time.monotonic() + args.load_seconds
            while time.monotonic() < until:
                ids.append(enqueue())
                time.sleep(rng.expovariate(args.rate))
            results[f"{name}, {args.rate:g} jobs/s"] = latencies(conn, ids)
        server.shutdown()
        server.server_close()
        state.close()
        conn.close()
    print("\nEnqueue → start, the drain behind the local Invoke stand-in, schedule off\n")
    print("| path, load | jobs | p50 (ms) | p99 (ms) | max (ms) |")
    print("|---|---:|---:|---:|---:|")
    for name, values in results.items():
        p50, p99 = percentiles(values)
        print(f"| {name} | {len(values)} | {p50 * 1000:.0f} | {p99 * 1000:.0f} "
              f"| {max(values) * 1000:.0f} |")


if __name__ == "__main__":
    main()
