"""The sustained-load benchmark's job type (bench/sustained.py): a no-op that records how long
its job waited, from the enqueue (``created_at``, the database's clock) to its start (this
machine's clock: the server runs here) and to its claim (``claimed_at``, the database's
clock), in a histogram per second that the drain process writes out when it ends."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from datetime import datetime

import pgdrain
from bench.sustained_bins import BUCKET_SECONDS, to_bin

_lock = threading.Lock()
start_waits: defaultdict[int, Counter[int]] = defaultdict(Counter)
claim_waits: defaultdict[int, Counter[int]] = defaultdict(Counter)
claim_calls: defaultdict[int, Counter[int]] = defaultdict(Counter)
"""How long each claim statement took (ms), per second: the drain's claim, timed around
the store's call (bench/sustained.py wraps it)."""


def _epoch(value: datetime | str) -> float:
    return (value if isinstance(value, datetime) else datetime.fromisoformat(value)).timestamp()


@pgdrain.job("timed", timeout=5)
def timed(job: pgdrain.Job) -> None:
    now = time.time()
    created = _epoch(job.created_at)
    bucket = int(now // BUCKET_SECONDS)
    with _lock:
        start_waits[bucket][to_bin((now - created) * 1000)] += 1
        claim_waits[bucket][to_bin((_epoch(job.claimed_at) - created) * 1000)] += 1


def record_claim_call(ms: float) -> None:
    bucket = int(time.time() // BUCKET_SECONDS)
    with _lock:
        claim_calls[bucket][to_bin(ms)] += 1


def record_wait(ms: float) -> None:
    """A seed worker's job (bench/sustained.py --system seed): claimed and started at once,
    ``ms`` after its enqueue."""
    bucket = int(time.time() // BUCKET_SECONDS)
    with _lock:
        start_waits[bucket][to_bin(ms)] += 1
        claim_waits[bucket][to_bin(ms)] += 1
