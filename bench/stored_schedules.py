"""What schedules made at run time cost (issue 28, item 7): a drain pass on an empty queue with
no stored schedule, with 10,000 stored and none due, and with 10,000 stored and DUE of them
due; the janitor's first statement (which now also probes pgdrain_schedules_next_tick_idx) in
each case; and creating a schedule (``pgdrain.schedule(conn, ...)``: a read of the clock and
one upsert). Medians of ROUNDS, on the embedded server unless DATABASE_URL names one.

    .venv/bin/python bench/stored_schedules.py
    .venv/bin/python bench/stored_schedules.py --stored 10000 --due 10 --rounds 30
"""

from __future__ import annotations

import argparse
import statistics
import time

import pgdrain
from pgdrain import Settings
from pgdrain.db import Connector, Session, connect
from pgdrain.drain import drain
from pgdrain.migrate import migrate
from pgdrain.registry import Registry
from pgdrain.store import JANITOR_LOCK_KEY
from pgdrain_dev.embedded import scratch_database


def _ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:.2f} ms"


def _pass(url: str, registry: Registry, rounds: int) -> list[float]:
    """Whole drain invocations on an empty queue (the warm container's connection kept)."""
    connector = Connector(lambda timeout=None: connect(url, timeout=timeout))
    try:
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            drain(connector, registry, Settings(), time_left=lambda: 600.0)
            times.append(time.perf_counter() - start)
        return times
    finally:
        connector.discard()


def _look(conn, rounds: int) -> list[float]:
    session = Session(conn)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        session.one("janitor_try_lock", lock_key=JANITOR_LOCK_KEY)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stored", type=int, default=10000)
    parser.add_argument("--due", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    registry = Registry()
    pgdrain.job("report", registry=registry)(lambda job: None)
    with scratch_database("bench_schedules") as url:
        conn = connect(url)
        migrate(conn)
        _pass(url, registry, 5)  # warm: the first passes pay for plans and caches
        print(f"| case | drain pass, empty queue (median of {args.rounds}) | janitor look |")
        print("|---|---:|---:|")
        print(f"| no stored schedule | {_ms(_pass(url, registry, args.rounds))} | "
              f"{_ms(_look(conn, args.rounds * 10))} |")
        created = []
        for i in range(args.stored):
            start = time.perf_counter()
            pgdrain.schedule(conn, "0 3 * * *", "report", {"customer": i},
                             name=f"report:customer-{i}", tz="Europe/Paris")
            created.append(time.perf_counter() - start)
        conn.run("VACUUM ANALYZE pgdrain_schedules")
        print(f"| {args.stored:,} stored, none due | {_ms(_pass(url, registry, args.rounds))} | "
              f"{_ms(_look(conn, args.rounds * 10))} |")
        due_passes = []
        connector = Connector(lambda timeout=None: connect(url, timeout=timeout))
        for _ in range(args.rounds):
            # DUE of them due again (as if their tick had come): each pass enqueues DUE jobs.
            conn.run("UPDATE pgdrain_schedules SET next_tick = now() - interval '1 second' "
                     "WHERE name IN (SELECT name FROM pgdrain_schedules ORDER BY name "
                     "LIMIT :n)", n=args.due)
            conn.run("DELETE FROM jobs")
            start = time.perf_counter()
            summary = drain(connector, registry, Settings(), time_left=lambda: 600.0)
            due_passes.append(time.perf_counter() - start)
            assert summary.scheduled == args.due, summary
        connector.discard()
        print(f"| {args.stored:,} stored, {args.due} due (their jobs run too) | "
              f"{_ms(due_passes)} | |")
        conn.run("DELETE FROM pgdrain_schedules")
        conn.run("DELETE FROM jobs")
        conn.run("VACUUM ANALYZE pgdrain_schedules")
        print(f"| none stored again (deleted) | {_ms(_pass(url, registry, args.rounds))} | "
              f"{_ms(_look(conn, args.rounds * 10))} |")
        print(f"\ncreate one (pgdrain.schedule(conn, ...)): median {_ms(created)}, "
              f"p99 {sorted(created)[int(len(created) * 0.99)] * 1000:.2f} ms")
        plan = conn.run("EXPLAIN SELECT name FROM pgdrain_schedules WHERE next_tick <= now() "
                        "ORDER BY next_tick LIMIT 500")
        print("schedule_stored_due's plan: " + " / ".join(r[0].strip() for r in plan[:2]))
        conn.close()


if __name__ == "__main__":
    main()
