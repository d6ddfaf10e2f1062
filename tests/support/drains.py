"""Drains run from a test against PostgreSQL: an invocation's clock, one drain on a connection of
its own (as a Lambda container has), and threads started together and joined within a bound."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from pgdrain import Settings
from pgdrain.db import Connector, connect
from pgdrain.drain import DrainSummary, drain
from pgdrain.registry import Registry

# Done rows kept a day. Most tests read a finished job's row as the evidence of its outcome
# (its status, attempts, result, when it ran), so their drains keep history. The shipped
# default keeps none (PGDRAIN_RETENTION_SECONDS=0): tests/integration/test_done_rows.py,
# tests/functions/test_drain_function.py and the model test (tests/model) run at it.
KEEP_HISTORY_SECONDS = 86400


def clock(seconds: float) -> Callable[[], float]:
    """A ``time_left`` that runs out ``seconds`` from now."""
    deadline = time.monotonic() + seconds
    return lambda: deadline - time.monotonic()


def connector_to(database_url: str) -> Connector:
    return Connector(lambda timeout=None: connect(database_url, timeout=timeout))


def run_drain(database_url: str, registry: Registry, seconds: float = 30.0,
              **settings: Any) -> DrainSummary:
    """One drain invocation of ``seconds`` with ``settings`` (done rows kept unless they say
    otherwise), on a connection of its own."""
    connector = connector_to(database_url)
    try:
        return drain(connector, registry,
                     Settings(**{"retention_seconds": KEEP_HISTORY_SECONDS, **settings}),
                     time_left=clock(seconds))
    finally:
        connector.discard()


def jobs_left(database_url: str) -> int:
    """Jobs not done yet, read on a connection of its own (a test's drain threads run drains
    until none is left)."""
    conn = connect(database_url)
    try:
        return int(conn.run("SELECT count(*) FROM jobs WHERE status <> 'done'")[0][0])
    finally:
        conn.close()


def run_all(threads: Sequence[threading.Thread], timeout: float = 120.0) -> None:
    """Start ``threads`` together and wait for them all, at most ``timeout`` in all."""
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "threads still running after the bound"
