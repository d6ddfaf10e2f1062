"""The sustained-load benchmark's job type (bench/sustained.py): a no-op that records how long
its job waited, from the enqueue (``created_at``, the database's clock) to its start (this
machine's clock: the server runs here) and to its claim (``claimed_at``, the database's
clock), in a histogram per second that the drain process writes out when it ends."""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, defaultdict
from datetime import datetime

import pgdrain

BUCKET_SECONDS = 1
# Histogram bins: 5 % apart from 0.01 ms, so a percentile read off them is within 5 %.
BIN_BASE_MS, BIN_RATIO = 0.01, 1.05

_lock = threading.Lock()
start_waits: defaultdict[int, Counter[int]] = defaultdict(Counter)
claim_waits: defaultdict[int, Counter[int]] = defaultdict(Counter)


def to_bin(ms: float) -> int:
    return max(0, int(math.log(max(ms, BIN_BASE_MS) / BIN_BASE_MS) / math.log(BIN_RATIO)))


def from_bin(index: int) -> float:
    """The bin's upper edge, in ms (a percentile is reported as at most this)."""
    return BIN_BASE_MS * BIN_RATIO ** (index + 1)


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


def record_wait(ms: float) -> None:
    """A seed worker's job (bench/sustained.py --system seed): claimed and started at once,
    ``ms`` after its enqueue."""
    bucket = int(time.time() // BUCKET_SECONDS)
    with _lock:
        start_waits[bucket][to_bin(ms)] += 1
        claim_waits[bucket][to_bin(ms)] += 1
