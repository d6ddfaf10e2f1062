"""What a statement's size costs a round trip over TCP, with and without TCP_NODELAY: the
median ms of ``SELECT 1`` padded with a comment to each size, run with a parameter (pg8000's
extended protocol: Parse, Bind, Execute, Sync through its 8 KB write buffer); then of a batch
enqueue (``enqueue_many`` of 100 jobs with 200-byte payloads, prepared: its Bind is ~25 KB) on
a scratch database.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test .venv/bin/python bench/statement_size.py

Needs a server reached over TCP (the embedded one listens on a Unix socket only).
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import time

import pgdrain
from pgdrain.db import Session, connect
from pgdrain.migrate import migrate
from pgdrain_dev.embedded import scratch_database

SIZES = (1_000, 4_000, 8_000, 9_500, 16_000, 32_000)
RUNS = 21


def median_ms(conn, size: int) -> float:
    statement = "SELECT :a::int AS one /* " + "x" * size + " */"
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        conn.run(statement, a=1)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def set_no_delay(conn, on: bool) -> None:
    conn._usock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, int(on))


def enqueue_ms(session: Session) -> float:
    jobs = [{"job_type": "noop", "payload": {"text": "x" * 200}} for _ in range(100)]
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        pgdrain.enqueue_many(session, jobs)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    url = os.environ.get("DATABASE_URL")
    if not url:
        sys.exit("set DATABASE_URL to a server reached over TCP")
    conn = connect(url)  # pgdrain's connect sets TCP_NODELAY
    sock = conn._usock
    if sock.family == socket.AF_UNIX:
        sys.exit("this server is reached over a Unix socket: no Nagle to measure")
    print("| statement bytes | TCP_NODELAY on (pgdrain) ms | off (pg8000's default) ms |")
    print("|---:|---:|---:|")
    for size in SIZES:
        set_no_delay(conn, True)
        on = median_ms(conn, size)
        set_no_delay(conn, False)
        off = median_ms(conn, size)
        print(f"| {size:,} | {on:.2f} | {off:.2f} |")
    conn.close()
    with scratch_database("statement_size", url) as scratch:
        conn = connect(scratch)
        migrate(conn)
        session = Session(conn, prepare=True)
        set_no_delay(conn, True)
        on = enqueue_ms(session)
        set_no_delay(conn, False)
        off = enqueue_ms(session)
        conn.close()
    print(f"| enqueue_many, 100 jobs of 200-byte payloads | {on:.2f} | {off:.2f} |")


if __name__ == "__main__":
    main()
