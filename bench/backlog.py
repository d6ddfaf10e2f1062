"""A backlog drained by drains that start drains, through the local Lambda Invoke stand-in.

    .venv/bin/python bench/backlog.py [--jobs 10000] [--ms 200] [--max-drains 4 16]
                                      [--concurrency 10] [--timeout 120]

Enqueues ``--jobs`` I/O-bound jobs (each waits ``--ms``, as a network call would) in one bulk
INSERT, starts ``pgdrain_dev.lambda_standin`` (the drain function in worker processes, reached
by boto3 through AWS_ENDPOINT_URL_LAMBDA), invokes the drain once asynchronously, as the
schedule would, and waits until every job is done. Continuation and fan-out do the rest; the
schedule is off. Every 20 ms it samples the drains holding a slot and the database's
connections. Prints, for each PGDRAIN_MAX_DRAINS value: time to empty, jobs/s, peak drains
(never above the cap), peak connections, invocations (and how many answered busy), the
drains' launches by reason (fan-out, continue) with the busy answers and the stand-in's
refusals (no container free: Lambda would throttle and retry them) of each, and Lambda
GB-seconds per 1,000 jobs at the template's 256 MB.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "pgdrain"), str(ROOT / "dev"), str(ROOT)]

from pgdrain import store  # noqa: E402
from pgdrain.db import connect  # noqa: E402
from pgdrain.migrate import migrate  # noqa: E402
from pgdrain_dev.embedded import scratch_database  # noqa: E402
from pgdrain_dev.lambda_standin import (  # noqa: E402
    StandIn,
    make_server,
    reason,
    standin_env,
)

MEMORY_GB = 0.25  # the template's MemorySize (256 MB)


def run(url: str, jobs: int, ms: int, max_drains: int, concurrency: int, timeout: float,
        log: Path) -> dict[str, float | str]:
    conn = connect(url)
    conn.run("TRUNCATE jobs")
    conn.run("INSERT INTO jobs (job_type, payload) SELECT 'io', "
             f"jsonb_build_object('ms', {int(ms)}) FROM generate_series(1, {int(jobs)})")
    log.unlink(missing_ok=True)
    state = StandIn(ROOT / "functions" / "drain", timeout=timeout,
                    max_containers=max_drains * 2 + 2, log_path=log, env={}, quiet=True)
    server = make_server(state)
    port = server.server_address[1]
    state.env = {**standin_env(port), "DATABASE_URL": url, "PGDRAIN_JOBS": "bench.jobs",
                 "PGDRAIN_MAX_DRAINS": str(max_drains), "PGDRAIN_CONCURRENCY": str(concurrency),
                 "POWERTOOLS_LOG_LEVEL": "ERROR",
                 "PYTHONPATH": f"{ROOT}:{ROOT / 'layers' / 'pgdrain'}:{ROOT / 'dev'}"}
    threading.Thread(target=server.serve_forever, daemon=True).start()
    peaks = {"drains": 0, "connections": 0}
    database = conn.run("SELECT current_database()")[0][0]
    started = time.monotonic()
    threading.Thread(target=state.invoke, args=("pgdrain-drain", {"source": "bench"}),
                     daemon=True).start()
    try:
        while conn.run("SELECT count(*) FROM jobs WHERE status <> 'done'")[0][0]:
            peaks["drains"] = max(peaks["drains"], store.drains_running(conn))
            peaks["connections"] = max(peaks["connections"], conn.run(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = :d", d=database)[0][0])
            if time.monotonic() - started > 3600:
                raise SystemExit("the backlog did not drain within an hour")
            time.sleep(0.02)
        elapsed = time.monotonic() - started
        while state.running:  # the last drains look once more and return
            time.sleep(0.05)
    finally:
        server.shutdown()
        server.server_close()
        state.close()
        conn.close()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    results = [r["result"] for r in records if "result" in r]
    seconds = sum(r["ended"] - r["started"] for r in records)
    busy_by = {why: sum(1 for r in records if reason(r["event"]) == why
                        and r.get("result", {}).get("stopped") == "busy")
               for why in ("fan-out", "continue")}
    # Started too late for any work (the queue empty): as much a start for nothing as busy.
    idle_by = {why: sum(1 for r in records if reason(r["event"]) == why
                        and r.get("result", {}).get("stopped") == "empty"
                        and not r["result"].get("claimed"))
               for why in ("fan-out", "continue")}
    launches = {why: state.asked[why] for why in ("fan-out", "continue")}
    return {"max_drains": max_drains, "seconds": round(elapsed, 1),
            "jobs_per_s": round(jobs / elapsed), "peak_drains": peaks["drains"],
            "peak_connections": peaks["connections"] - 1,  # not this sampler's
            "invocations": len(records),
            "busy": sum(1 for r in results if r.get("stopped") == "busy"),
            "errors": sum(1 for r in records if "error" in r),
            "fan_out": launches["fan-out"], "fan_out_busy": busy_by["fan-out"],
            "fan_out_idle": idle_by["fan-out"], "continue_idle": idle_by["continue"],
            "fan_out_refused": state.refused_by["fan-out"],
            "continue": launches["continue"], "continue_busy": busy_by["continue"],
            "continue_refused": state.refused_by["continue"],
            "surplus_share": f"{surplus_share(launches, busy_by, state.refused_by):.1%}",
            "wasted_share": f"{surplus_share(launches, busy_by, state.refused_by, idle_by):.1%}",
            "gb_s_per_1000": round(seconds * MEMORY_GB / jobs * 1000, 2),
            "requests_per_1000": round(len(records) / jobs * 1000, 2)}


def surplus_share(launches: dict[str, int], busy: dict[str, int],
                  refused: Mapping[str, int], idle: Mapping[str, int] | None = None) -> float:
    """Of the drains' launches, the share that started to find every slot taken (busy) or
    found no container (refused: in Lambda a throttled invoke that is retried later, to be
    busy); with ``idle``, also those that started after the work was gone."""
    made = sum(launches.values())
    wasted = sum(busy.values()) + sum(refused[why] for why in launches) + sum(
        (idle or {}).values())
    return wasted / made if made else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--ms", type=int, default=200)
    parser.add_argument("--max-drains", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    rows = []
    with scratch_database("pgdrain_backlog") as url:
        conn = connect(url)
        migrate(conn)
        conn.close()
        for cap in args.max_drains:
            row = run(url, args.jobs, args.ms, cap, args.concurrency, args.timeout,
                      Path(f"/tmp/pgdrain-backlog-{cap}.jsonl"))
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    print(f"\n{args.jobs:,} jobs of {args.ms} ms, PGDRAIN_CONCURRENCY={args.concurrency}, "
          f"one asynchronous invoke to start, schedule off\n")
    print("| PGDRAIN_MAX_DRAINS | time to empty (s) | jobs/s | peak drains | peak connections "
          "| invocations (busy) | GB-s per 1,000 jobs | requests per 1,000 jobs |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['max_drains']} | {r['seconds']} | {r['jobs_per_s']:,} | {r['peak_drains']} "
              f"| {r['peak_connections']} | {r['invocations']} ({r['busy']}) "
              f"| {r['gb_s_per_1000']} | {r['requests_per_1000']} |")
    print("\nThe drains' launches, by reason: made (busy; refused: no container free; idle: "
          "started when nothing was left)\n")
    print("| PGDRAIN_MAX_DRAINS | fan-out launches (busy, refused, idle) "
          "| continue launches (busy, refused, idle) | busy + refused | all wasted |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['max_drains']} | {r['fan_out']} ({r['fan_out_busy']}, "
              f"{r['fan_out_refused']}, {r['fan_out_idle']}) | {r['continue']} "
              f"({r['continue_busy']}, {r['continue_refused']}, {r['continue_idle']}) "
              f"| {r['surplus_share']} | {r['wasted_share']} |")


if __name__ == "__main__":
    main()
