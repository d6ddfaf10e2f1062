"""PgQueuer in the sustained-load harness (bench/sustained.py --system pgqueuer): its
producer and its worker, run with the peers' Python (PEERS_PYTHON, ``make bench-peers``).

    $PEERS_PYTHON bench/sustained_peers.py install URL
    $PEERS_PYTHON bench/sustained_peers.py produce URL RATE BATCH BEGIN END OUT
    $PEERS_PYTHON bench/sustained_peers.py consume URL END OUT

``produce`` enqueues ``BATCH`` no-op jobs a statement (``Queries.enqueue`` with lists: one
statement, its own transaction) at ``RATE`` jobs/s from ``BEGIN`` until ``END`` (epoch
seconds), on the same fixed schedule as pgdrain's producers, and writes how many went in per
second. ``consume``
runs ``QueueManager.run`` at PgQueuer's defaults (continuous mode, batch_size 10, its
LISTEN/NOTIFY wake-ups) until ``END``, and writes each job's wait from its enqueue
(``created``, the database's clock) to its start (this machine's clock: the server runs here)
and to its pick (``updated``), in the histograms bench/sustained_jobs.py keeps for pgdrain.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.sustained_bins import BUCKET_SECONDS, to_bin  # noqa: E402

ENTRYPOINT = "timed"


async def install(url: str) -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(url)
    await Queries(AsyncpgDriver(conn)).install()
    await conn.close()


async def produce(url: str, rate: float, batch: int, begin: float, end: float,
                  out: str) -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(conn))
    interval, due = batch / rate, max(begin, time.time())
    enqueued: Counter[int] = Counter()
    worst_lag = 0.0
    while due < end and time.time() < end:
        pause = due - time.time()
        if pause > 0:
            await asyncio.sleep(pause)
        else:
            worst_lag = max(worst_lag, -pause)
        if batch == 1:
            await queries.enqueue(ENTRYPOINT, None)
        else:
            await queries.enqueue([ENTRYPOINT] * batch, [None] * batch, [0] * batch)
        enqueued[int(time.time() // BUCKET_SECONDS)] += batch
        due += interval
    await conn.close()
    Path(out).write_text(json.dumps({"enqueued": enqueued, "worst_lag": worst_lag}))


async def consume(url: str, end: float, out: str) -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(url)
    manager = QueueManager(Queries(AsyncpgDriver(conn)))
    starts: defaultdict[int, Counter[int]] = defaultdict(Counter)
    claims: defaultdict[int, Counter[int]] = defaultdict(Counter)

    @manager.entrypoint(ENTRYPOINT)
    async def timed(job: object) -> None:
        now = time.time()
        created = job.created.timestamp()  # type: ignore[attr-defined]
        bucket = int(now // BUCKET_SECONDS)
        starts[bucket][to_bin((now - created) * 1000)] += 1
        picked = job.updated.timestamp()  # type: ignore[attr-defined]
        claims[bucket][to_bin((picked - created) * 1000)] += 1

    async def stop() -> None:
        await asyncio.sleep(max(0.0, end - time.time()))
        manager.shutdown.set()

    stopper = asyncio.create_task(stop())
    await manager.run()
    await stopper
    Path(out).write_text(json.dumps({"start": starts, "claim": claims, "calls": 0,
                                     "idle": 0}))


def main() -> None:
    action, url, *rest = sys.argv[1:]
    if action == "install":
        asyncio.run(install(url))
    elif action == "produce":
        rate, batch, begin, end, out = rest
        asyncio.run(produce(url, float(rate), int(batch), float(begin), float(end), out))
    elif action == "consume":
        end, out = rest
        asyncio.run(consume(url, float(end), out))
    else:
        raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    main()
