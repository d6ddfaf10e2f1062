"""What awaiting a result costs when used: for each of JOBS jobs, a thread waits for it
(``pgdrain.wait`` on a connection of its own), a worker claims it and, once the waiter has
registered, finishes it (``pgdrain.complete``, autocommit: the statement's return is its
commit); the time from the finishing statement's start to ``wait`` returning with the job done
is the wake-up latency, p50 and p99. Also how the waiters were woken (by the notification, or
by the once-a-second re-read), and the statements a waiter ran while a job stayed pending for
WAIT_SECONDS.

And what the change costs a finish nobody waits for (``--against REVISION``): the drain's
finishing statements of this checkout (which probe ``pgdrain_waiters``) against REVISION's
(``git show REVISION:.../queries.sql``), each prepared, run alternately on batches of 100
claimed no-op jobs; the median time of each statement, client-side, on one connection.

    .venv/bin/python bench/waits.py
    .venv/bin/python bench/waits.py --jobs 0 --against 17493ad
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test .venv/bin/python bench/waits.py
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import threading
import time
from typing import Any

import pgdrain
from pgdrain import waiting
from pgdrain.db import Session, connect
from pgdrain.migrate import migrate
from pgdrain.sql import QUERIES, parse_catalogue
from pgdrain_dev.embedded import scratch_database


class _Counting(Session):
    def __init__(self, conn: Any):
        super().__init__(conn)
        self.sent = 0

    def _execute(self, query: str, params: dict[str, Any]) -> Any:
        self.sent += 1
        return super()._execute(query, params)


def wake_ups(url: str, jobs: int) -> list[float]:
    """Seconds from the finishing statement's start to wait() returning, for each job."""
    app, worker, waiter = connect(url), connect(url), connect(url)
    latencies: list[float] = []
    try:
        for _ in range(jobs):
            job = pgdrain.enqueue(app, "bench", {})
            [claimed] = pgdrain.claim(worker, batch_size=1, lease_seconds=60)
            returned: dict[str, float] = {}

            def wait(ident: int = job.id, returned: dict[str, float] = returned) -> None:
                found = pgdrain.wait(waiter, ident, timeout=30)
                returned["at"] = time.perf_counter()
                assert found["status"] == "done"

            thread = threading.Thread(target=wait)
            thread.start()
            while not app.run("SELECT 1 FROM pgdrain_waiters WHERE job_id = :id", id=job.id):
                time.sleep(0.0005)
            at = time.perf_counter()
            pgdrain.complete(worker, [claimed])
            thread.join(60)
            latencies.append(returned["at"] - at)
    finally:
        for conn in (app, worker, waiter):
            conn.close()
    return latencies


def idle_cost(url: str, seconds: float) -> int:
    """Statements one waiter runs while its job stays pending for ``seconds``."""
    conn = connect(url)
    try:
        job = pgdrain.enqueue(conn, "bench", {})
        counted = _Counting(conn)
        with contextlib.suppress(pgdrain.WaitTimeout):
            pgdrain.wait(counted, job.id, timeout=seconds)
        return counted.sent
    finally:
        conn.close()


FINISHES = ("job_complete_forget_batch", "job_complete_batch")


def finish_cost(url: str, revision: str, rounds: int, batch: int = 100
                ) -> dict[str, tuple[float, float]]:
    """Per statement of FINISHES: (median seconds at REVISION, median in this checkout) to
    finish ``batch`` claimed no-op jobs, ``rounds`` times each, alternately."""
    text = subprocess.run(["git", "show", f"{revision}:layers/pgdrain/pgdrain/sql/queries.sql"],
                          check=True, capture_output=True, text=True).stdout
    before = parse_catalogue(text)
    conn = connect(url)
    try:
        found: dict[str, tuple[float, float]] = {}
        for name in FINISHES:
            statements = {"before": conn.prepare(before[name]),
                          "after": conn.prepare(QUERIES[name])}
            times: dict[str, list[float]] = {"before": [], "after": []}
            for _ in range(rounds):
                for label, statement in statements.items():
                    pgdrain.enqueue_many(conn, [{"job_type": "bench"}] * batch)
                    jobs = pgdrain.claim(conn, batch_size=batch, lease_seconds=60)
                    at = time.perf_counter()
                    statement.run(ids=[j.id for j in jobs], tokens=[j.lease_token for j in jobs])
                    times[label].append(time.perf_counter() - at)
            found[name] = (statistics.median(times["before"]), statistics.median(times["after"]))
        return found
    finally:
        conn.close()


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--wait-seconds", type=float, default=10.0)
    parser.add_argument("--against", metavar="REVISION")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with scratch_database("pgdrain_waits") as url:
        conn = connect(url)
        migrate(conn)
        conn.close()
        if args.against:
            for name, (old, new) in finish_cost(url, args.against, args.rounds).items():
                print(f"{name}, 100 jobs nobody waits for: {args.against} {old * 1e6:.0f} µs, "
                      f"this checkout {new * 1e6:.0f} µs ({(new / old - 1) * 100:+.1f} %), "
                      f"medians of {args.rounds}")
        if not args.jobs:
            return
        before = waiting.counts.copy()
        ms = [x * 1000 for x in wake_ups(url, args.jobs)]
        notified = waiting.counts["notified"] - before["notified"]
        rechecked = waiting.counts["rechecked"] - before["rechecked"]
        print(f"wake-up, {len(ms):,} waits (finish sent -> wait returned): p50 "
              f"{_p(ms, 0.5):.2f} ms, p99 {_p(ms, 0.99):.2f} ms, max {max(ms):.2f} ms; "
              f"woken by the notification {notified}, re-reads {rechecked}")
        sent = idle_cost(url, args.wait_seconds)
        print(f"a waiter whose job stayed pending {args.wait_seconds:g} s ran {sent} "
              f"statements ({sent - 5} status reads, 5 to listen, register, read the job "
              "whole, unregister, unlisten)")


if __name__ == "__main__":
    main()
