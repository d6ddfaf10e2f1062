"""A peer queue's worker for bench/throughput.py: PgQueuer or procrastinate on no-op jobs.

    PEERS_PYTHON=.venv-bench/bin/python   (make bench-peers installs it)
    $PEERS_PYTHON bench/peer_worker.py install|fill|run SYSTEM URL [N | default|tuned]

Runs in its own virtual environment (the peers need asyncpg and psycopg, which pgdrain does
not). ``run`` follows worker.py's protocol: connect, print READY on stderr, wait for a line on
stdin, drain until the queue is empty, print DONE. Each peer at its documented defaults, and
at the tuning its documentation suggests for throughput:

- PgQueuer: ``QueueManager.run(mode=drain)``; batch_size 10 (its default) or 100 (tuned);
- procrastinate: ``run_worker_async(wait=False)``; concurrency 1 (its default) or 10 (tuned).
"""

from __future__ import annotations

import asyncio
import sys


async def pgqueuer(action: str, url: str, arg: str) -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    conn = await asyncpg.connect(url)
    driver = AsyncpgDriver(conn)
    if action == "install":
        await Queries(driver).install()
    elif action == "fill":
        await conn.execute("TRUNCATE pgqueuer")
        n = int(arg)
        await Queries(driver).enqueue(["noop"] * n, [None] * n, [0] * n)
    else:
        qm = QueueManager(Queries(driver))

        @qm.entrypoint("noop")
        async def noop(job: object) -> None:
            pass

        await _ready()
        await qm.run(batch_size=100 if arg == "tuned" else 10, mode=QueueExecutionMode.drain)
        print("DONE", file=sys.stderr, flush=True)
    await conn.close()


async def procrastinate_(action: str, url: str, arg: str) -> None:
    import logging

    import procrastinate

    # Its advice about defining the app in an importable module concerns deployments; the
    # benchmark's stderr carries the READY / DONE protocol.
    logging.getLogger("procrastinate").setLevel(logging.ERROR)

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop")
    async def noop() -> None:
        pass

    async with app.open_async():
        if action == "install":
            await app.schema_manager.apply_schema_async()
        elif action == "fill":
            async with app.connector.pool.connection() as conn:  # type: ignore[attr-defined]
                await conn.execute("TRUNCATE procrastinate_jobs CASCADE")
            for start in range(0, int(arg), 1000):
                await noop.batch_defer_async(*[{}] * min(1000, int(arg) - start))
        else:
            await _ready()
            await app.run_worker_async(concurrency=10 if arg == "tuned" else 1, wait=False,
                                       install_signal_handlers=False)
            print("DONE", file=sys.stderr, flush=True)


async def _ready() -> None:
    print("READY", file=sys.stderr, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


def main() -> None:
    action, system, url = sys.argv[1:4]
    arg = sys.argv[4] if len(sys.argv) > 4 else "default"
    run = pgqueuer if system == "pgqueuer" else procrastinate_
    asyncio.run(run(action, url, arg))


if __name__ == "__main__":
    main()
