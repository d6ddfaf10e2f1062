"""One benchmark worker process: ``python bench/worker.py MODE``.

It imports and connects first, prints READY (on stderr: stdout carries the function's logs),
waits for a line on stdin, drains until the queue is empty, and prints DONE. Modes:

- ``drain``: the drain function's ``lambda_handler`` invoked in a loop, as Lambda would;
- ``bare``: pgdrain.claim + complete with prepared statements, no Lambda plumbing;
- ``seed``: the seed article's worker: its claim (LIMIT 1) and done queries on its own table.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "functions" / "drain"), str(ROOT)]

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
RETURNING id, job_type, payload, attempts, max_attempts
"""
SEED_COMPLETE = "UPDATE seed_jobs SET status = 'done' WHERE id = :id"


def main(mode: str) -> None:
    if mode == "drain":
        import app

        from pgdrain_dev.context import LambdaContext

        app.CONNECTOR.ensure_alive()

        def run() -> None:
            while app.lambda_handler({}, LambdaContext("bench", 900))["claimed"]:
                pass
    elif mode == "bare":
        import pgdrain
        from pgdrain.db import Session, connect

        session = Session(connect(os.environ["DATABASE_URL"]), prepare=True)

        def run() -> None:
            while jobs := pgdrain.claim(session, batch_size=int(os.environ["BATCH"]),
                                        lease_seconds=960):
                pgdrain.complete(session, jobs)
    elif mode == "seed":
        from pgdrain.db import connect

        conn = connect(os.environ["DATABASE_URL"])

        def run() -> None:
            while rows := conn.run(SEED_CLAIM):
                conn.run(SEED_COMPLETE, id=rows[0][0])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print("READY", file=sys.stderr, flush=True)
    sys.stdin.readline()
    cpu = time.process_time()
    run()
    # The run's own CPU (user + system of this process, every thread), not its imports.
    print(f"DONE {time.process_time() - cpu:.6f}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
