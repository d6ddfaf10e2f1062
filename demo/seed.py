"""The seed article's scenario on pgdrain: four jobs, two workers at once, one retry.

Creates the schema on a fresh database (the embedded PostgreSQL, or a scratch database on the
server in DATABASE_URL), enqueues the article's four jobs, runs two worker processes that
share the queue, prints a line per job outcome, then the final table.

    make demo            # or: .venv/bin/python demo/seed.py
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
import uuid
import warnings
from contextlib import contextmanager
from urllib.parse import urlsplit

import pgdrain
from pgdrain.db import connect
from pgdrain.migrate import migrate

SEED_JOBS = [
    ("send-email", {"to": "sarah@example.com"}),
    ("deliver-webhook", {"url": "https://example.com/hooks"}),
    ("generate-export", {"format": "csv"}),
    ("sync-crm", {"contactId": 42}),
]
IDLE_POLLS = 20
POLL_SECONDS = 0.2


def handle_job(job: pgdrain.Job) -> None:
    """The seed's simulated work: 150 ms each; sync-crm times out on its first attempt."""
    time.sleep(0.15)
    if job.job_type == "sync-crm" and job.attempts == 1:
        raise TimeoutError("CRM API timed out")


def run_worker(name: str, url: str) -> None:
    conn = connect(url)
    settings = pgdrain.Settings(batch_size=1, lease_seconds=30)
    pgdrain.run_janitor(conn, settings)
    idle = 0
    while idle < IDLE_POLLS:
        jobs = pgdrain.claim(conn, batch_size=settings.batch_size,
                             lease_seconds=settings.lease_seconds)
        if not jobs:
            idle += 1
            time.sleep(POLL_SECONDS)
            continue
        idle = 0
        for job in jobs:
            label = f"#{job.id} {job.job_type} (attempt {job.attempts})"
            try:
                handle_job(job)
            except Exception as exc:
                pgdrain.record_failure(conn, job, str(exc), settings.backoff)
                print(f"[{name}] failed: {label} - {exc}", flush=True)
            else:
                pgdrain.complete(conn, [job])
                print(f"[{name}] done: {label}", flush=True)
    conn.close()


def print_table(rows: list[dict]) -> None:
    columns = ["id", "job_type", "status", "attempts"]
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    line = "+".join("-" * (w + 2) for w in widths)
    print(f"+{line}+")
    print("| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)) + " |")
    print(f"+{line}+")
    for row in rows:
        cells = [str(row[c]).ljust(w) for c, w in zip(columns, widths, strict=True)]
        print("| " + " | ".join(cells) + " |")
    print(f"+{line}+")


@contextmanager
def fresh_database():
    """A URL to an empty database, removed afterwards."""
    server_url = os.environ.get("DATABASE_URL")
    if not server_url:
        from pgdrain import embedded

        print("Starting an embedded PostgreSQL...")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pgserver: XDG_RUNTIME_DIR is not set
            server = embedded.start()
        try:
            yield server.url
        finally:
            server.stop()
        return
    name = f"pgdrain_demo_{uuid.uuid4().hex[:8]}"
    admin = connect(server_url)
    admin.run(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(server_url)._replace(path=f"/{name}").geturl()
    finally:
        admin.run(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.close()


def main() -> None:
    with fresh_database() as url:
        conn = connect(url)
        migrate(conn)
        print("Database ready.")
        for job_type, payload in SEED_JOBS:
            pgdrain.enqueue(conn, job_type, payload)
        print(f"Enqueued {len(SEED_JOBS)} jobs.\n")

        spawn = multiprocessing.get_context("spawn")
        workers = [spawn.Process(target=run_worker, args=(f"worker-{n}", url))
                   for n in (1, 2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        if any(w.exitcode for w in workers):
            sys.exit("a worker failed")

        rows = conn.run("SELECT id, job_type, status, attempts FROM jobs ORDER BY id")
        print_table([dict(zip(["id", "job_type", "status", "attempts"], r, strict=True))
                     for r in rows])
        conn.close()


if __name__ == "__main__":
    main()
