"""The sustained-load benchmark's histograms (bench/sustained.py): waits in ms, binned 5 %
apart, one histogram per second. No import of pgdrain: PgQueuer's processes use them too
(bench/sustained_peers.py, in the peers' environment)."""

from __future__ import annotations

import math

BUCKET_SECONDS = 1
# Histogram bins: 5 % apart from 0.01 ms, so a percentile read off them is within 5 %.
BIN_BASE_MS, BIN_RATIO = 0.01, 1.05


def to_bin(ms: float) -> int:
    return max(0, int(math.log(max(ms, BIN_BASE_MS) / BIN_BASE_MS) / math.log(BIN_RATIO)))


def from_bin(index: int) -> float:
    """The bin's upper edge, in ms (a percentile is reported as at most this)."""
    return BIN_BASE_MS * BIN_RATIO ** (index + 1)
