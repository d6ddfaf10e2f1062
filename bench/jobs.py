"""The benchmark's job type: a handler that does nothing, so the queue's own cost is measured."""

from __future__ import annotations

import pgdrain


@pgdrain.job("noop", timeout=5)
def noop(job: pgdrain.Job) -> None:
    pass


@pgdrain.job("io", timeout=10)
def io(job: pgdrain.Job) -> None:
    """An I/O-bound job: waits ``payload["ms"]`` (default 200) as a network call would."""
    import time

    time.sleep(job.payload.get("ms", 200) / 1000)


@pgdrain.job("io-async", timeout=10)
async def io_async(job: pgdrain.Job) -> None:
    """The same wait on the drain's event loop."""
    import asyncio

    await asyncio.sleep(job.payload.get("ms", 200) / 1000)


_STAMP = __import__("threading").local()


@pgdrain.job("stamp", timeout=10)
def stamp(job: pgdrain.Job) -> None:
    """Records when it started (the database's clock) in ``starts``, for bench/latency.py."""
    import os

    from pgdrain.db import connect

    conn = getattr(_STAMP, "conn", None)
    if conn is None:
        conn = _STAMP.conn = connect(os.environ["DATABASE_URL"])
    conn.run("INSERT INTO starts (job_id, started_at) VALUES (:id, clock_timestamp())",
             id=job.id)
