"""The seed article's scenario, run through the functions' ``lambda_handler``s.

Creates the schema on a fresh database (the embedded PostgreSQL, or a scratch database on the
server in DATABASE_URL), enqueues the article's four jobs through the enqueue function
(``POST /jobs``, the API Gateway event of events/enqueue_single.json with each job as its
body), then runs two drain "containers" at
once: each is its own process that invokes ``lambda_handler`` with a Lambda-like context (a
real 30-second deadline), again every 200 ms as the schedule and the doorbell would, until it
has found nothing to do twenty times in a row. Their structured logs become the article's
lines, and the final table is printed as the article prints it.

    make demo            # or: .venv/bin/python demo/seed.py
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import threading
from contextlib import redirect_stdout
from pathlib import Path

from pgdrain.db import connect
from pgdrain.migrate import migrate
from pgdrain_dev.context import LambdaContext
from pgdrain_dev.embedded import demo_database, demo_datadir, scratch_database

ROOT = Path(__file__).resolve().parents[1]
SEED_JOBS = [
    ("send-email", {"to": "sarah@example.com"}),
    ("deliver-webhook", {"url": "https://example.com/hooks"}),
    ("generate-export", {"format": "csv"}),
    ("sync-crm", {"contactId": 42}),
]
# One "container": invoke the drain until it has been idle for a while, like the seed's worker.
CONTAINER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import app
from pgdrain_dev.context import LambdaContext
idle = 0
while idle < 20:
    summary = app.lambda_handler({}, LambdaContext("pgdrain-drain", timeout_seconds=30))
    idle = 0 if summary["claimed"] else idle + 1
    if summary["claimed"] == 0:
        time.sleep(0.2)
"""


def enqueue_through_the_api(url: str) -> list[int]:
    """POST each seed job to the enqueue function's handler, as API Gateway would."""
    os.environ.update(DATABASE_URL=url, PGDRAIN_JOBS="pgdrain_dev.demo_jobs.seed",
                      POWERTOOLS_LOG_LEVEL="WARNING", POWERTOOLS_METRICS_DISABLED="true")
    path = ROOT / "functions" / "enqueue" / "app.py"
    spec = importlib.util.spec_from_file_location("enqueue_app", path)
    enqueue_app = importlib.util.module_from_spec(spec)
    template = json.loads((ROOT / "events" / "enqueue_single.json").read_text())
    ids = []
    with redirect_stdout(io.StringIO()):  # the function's own logs; the demo prints its lines
        spec.loader.exec_module(enqueue_app)
        for job_type, payload in SEED_JOBS:
            event = {**template, "body": json.dumps({"job_type": job_type, "payload": payload})}
            response = enqueue_app.lambda_handler(event, LambdaContext("pgdrain-enqueue"))
            if response["statusCode"] != 201:
                sys.exit(f"POST /jobs answered {response['statusCode']}: {response['body']}")
            ids += json.loads(response["body"])["ids"]
    enqueue_app.CONNECTOR.discard()
    return ids


def seed_lines(worker: str, record: dict) -> list[str]:
    """The article's lines for one of the drain's log records (none for other records)."""
    if record.get("message") == "jobs done":  # the drain logs done jobs a hundred to a line
        return [line for job in record["jobs"] for line in seed_lines(worker, job)]
    label = f"#{record.get('job_id')} {record.get('job_type')} (attempt {record.get('attempt')})"
    outcome = record.get("outcome")
    if outcome == "done":
        return [f"[{worker}] done: {label}"]
    if outcome in ("retried", "failed"):
        return [f"[{worker}] failed: {label} - {record['error'].split(': ', 1)[-1]}"]
    return []


def relay(worker: str, stream, lock: threading.Lock) -> None:
    for raw in stream:
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        lines = seed_lines(worker, record) if isinstance(record, dict) else [raw.rstrip()]
        with lock:
            for line in filter(None, lines):
                print(line, flush=True)


def print_table(rows: list[dict]) -> None:
    columns = ["id", "job_type", "status", "attempts"]
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    print(rule)
    print("| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)) + " |")
    print(rule)
    for row in rows:
        cells = [str(row[c]).ljust(w) for c, w in zip(columns, widths, strict=True)]
        print("| " + " | ".join(cells) + " |")
    print(rule)


def main() -> None:
    embedded = not os.environ.get("DATABASE_URL")
    if embedded:
        print("Starting an embedded PostgreSQL...")
    with demo_database() if embedded else scratch_database("pgdrain_demo") as url:
        conn = connect(url)
        migrate(conn)
        print("Database ready.")
        # Done jobs kept a day, to show them in the table at the end: by default a drain
        # deletes each done job as it finishes (PGDRAIN_RETENTION_SECONDS=0).
        env = {**os.environ, "DATABASE_URL": url, "PGDRAIN_JOBS": "pgdrain_dev.demo_jobs.seed",
               "PGDRAIN_BATCH_SIZE": "1", "POWERTOOLS_METRICS_NAMESPACE": "pgdrain-demo",
               "PGDRAIN_RETENTION_SECONDS": "86400"}
        ids = enqueue_through_the_api(url)
        print(f"Enqueued {len(ids)} jobs with POST /jobs: ids {ids}.\n")
        lock = threading.Lock()
        containers = []
        for n in (1, 2):
            process = subprocess.Popen(
                [sys.executable, "-c", CONTAINER, str(ROOT / "functions" / "drain")],
                env=env, stdout=subprocess.PIPE, text=True)
            relay_thread = threading.Thread(target=relay, args=(f"worker-{n}", process.stdout,
                                                                 lock))
            relay_thread.start()
            containers.append((process, relay_thread))
        for process, relay_thread in containers:
            process.wait()
            relay_thread.join()
        if any(process.returncode for process, _ in containers):
            sys.exit("a drain container failed")

        print("\nThe jobs (the demo keeps done ones; by default a drain deletes each as it "
              "finishes):")
        rows = conn.run("SELECT id, job_type, status, attempts FROM jobs ORDER BY id")
        print_table([dict(zip(["id", "job_type", "status", "attempts"], r, strict=True))
                     for r in rows])
        conn.close()
    if embedded:
        print(f"\nThe demo's queue stays in {demo_datadir()}: try `.venv/bin/pgdrain stats "
              "--demo`, `.venv/bin/pgdrain list --demo`, `.venv/bin/pgdrain top --demo`, or "
              "`.venv/bin/pgdrain console --demo` and open the URL it prints.")


if __name__ == "__main__":
    main()
