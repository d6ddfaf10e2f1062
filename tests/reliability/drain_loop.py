"""Drive the real drain function in this process, as warm invocations of one Lambda container.

    python tests/reliability/drain_loop.py --out FILE [--timeout 60] [--until empty|idle]
                                           [--max-invocations N] [--max-seconds S]
    python tests/reliability/drain_loop.py --out FILE --plan PLAN.json

The environment configures it as in Lambda (DATABASE_URL, PGDRAIN_JOBS, PGDRAIN_*, ...). Every
line of FILE is one JSON object, written and flushed as it happens, so a process killed with
SIGKILL leaves the record of what it finished:

- ``{"ready": true, "pid": ...}`` once the function is imported (the cold start) and the
  driver's own connection is open, right before the first invocation;
- loop mode: ``{"invocation": n, "summary": {...}, "remaining": s}`` after each invocation, with
  the seconds the context had left when ``lambda_handler`` returned (negative if it overran).
  ``--until empty`` stops once no job is pending or running (waiting for retries that are not
  due yet); ``--until idle`` stops after the first invocation that claimed nothing;
- plan mode: for each run of the plan, the driver enqueues the run's jobs in its queue, invokes
  the function with a context that has the run's ``time_left``, and writes
  ``{"run": n, "time_left", "remaining", "start_db", "deadline_db", "returned_db",
  "running_after", "summary"}``. ``*_db`` are epoch seconds by the database's clock (the clock
  of ``executions``): ``start_db`` is read before the context is made, ``deadline_db`` is an
  estimate of the context's deadline that is never late, and ``returned_db`` is read after
  ``lambda_handler`` returned. ``running_after`` counts the queue's jobs still ``running``
  after the return. A plan is ``{"queue": q, "job_types": {type: budget_seconds},
  "runs": [{"time_left": s, "jobs": [{"job_type": t, "payload": {...}}, ...]}, ...]}``; each
  job type is registered as the ``record`` handler of recording_jobs.py with that time budget,
  and the drain drains that queue only (``PGDRAIN_QUEUES``).
- ``{"exit": reason}`` last, when the driver ends normally.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "functions" / "drain"), str(ROOT / "layers" / "pgdrain"), str(ROOT)]


def _emit(out: TextIO, record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def _db_now(conn: Any) -> float:
    return conn.run("SELECT clock_timestamp()")[0][0].timestamp()


def _loop(app: Any, conn: Any, out: TextIO, args: argparse.Namespace) -> str:
    from pgdrain_dev.context import LambdaContext

    started = time.monotonic()
    for invocation in range(args.max_invocations):
        if time.monotonic() - started > args.max_seconds:
            return "max_seconds"
        context = LambdaContext("pgdrain-drain", args.timeout)
        deadline = time.monotonic() + args.timeout  # never later than the context's own
        summary = app.lambda_handler({}, context)
        remaining = deadline - time.monotonic()
        _emit(out, {"invocation": invocation, "summary": summary,
                    "remaining": round(remaining, 4)})
        if summary["claimed"]:
            continue
        if args.until == "idle":
            return "idle"
        outstanding = conn.run(
            "SELECT count(*) FROM jobs WHERE status IN ('pending', 'running')")[0][0]
        if not outstanding:
            return "empty"
        time.sleep(args.poll)  # retries not due yet, or jobs other drains are running
    return "max_invocations"


def _plan(app: Any, conn: Any, out: TextIO, plan: dict[str, Any]) -> str:
    import pgdrain
    from pgdrain_dev.context import LambdaContext
    from tests.reliability import recording_jobs

    for job_type, budget in plan["job_types"].items():
        pgdrain.job(job_type, timeout=budget)(recording_jobs.record)
    queue = plan["queue"]
    for number, run in enumerate(plan["runs"]):
        if run["jobs"]:
            pgdrain.enqueue_many(conn, [{**job, "queue": queue} for job in run["jobs"]])
        start_db = _db_now(conn)
        read_at = time.monotonic()
        deadline = time.monotonic() + run["time_left"]
        context = LambdaContext("pgdrain-drain", run["time_left"])
        summary = app.lambda_handler({}, context)
        remaining = deadline - time.monotonic()
        returned_db = _db_now(conn)
        running_after = conn.run("SELECT count(*) FROM jobs WHERE queue = :queue "
                                 "AND status = 'running'", queue=queue)[0][0]
        _emit(out, {"run": number, "time_left": run["time_left"],
                    "remaining": round(remaining, 4), "start_db": start_db,
                    "deadline_db": start_db + (deadline - read_at),
                    "returned_db": returned_db, "running_after": running_after,
                    "summary": summary})
    return "plan"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="file to append the JSON lines to")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="each invocation's context timeout, in seconds (loop mode)")
    parser.add_argument("--until", choices=("empty", "idle"), default="empty")
    parser.add_argument("--max-invocations", type=int, default=10_000)
    parser.add_argument("--max-seconds", type=float, default=300.0)
    parser.add_argument("--poll", type=float, default=0.02,
                        help="pause between invocations that found nothing due")
    parser.add_argument("--plan", help="a plan file: run plan mode instead of the loop")
    args = parser.parse_args(argv)

    plan = json.loads(Path(args.plan).read_text()) if args.plan else None
    if plan is not None:  # the drain drains the plan's queue only (read at the cold start)
        os.environ["PGDRAIN_QUEUES"] = plan["queue"]
    with open(args.out, "a", encoding="utf-8") as out:
        import app  # the cold start: settings, job modules, Powertools

        from pgdrain.db import connect

        conn = connect(os.environ["DATABASE_URL"])
        _emit(out, {"ready": True, "pid": os.getpid()})
        reason = _loop(app, conn, out, args) if plan is None else _plan(app, conn, out, plan)
        _emit(out, {"exit": reason})
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
