"""The batch handlers' statements (pgdrain.batches): a batch type's claim, which waits for
its window in SQL, and the due count's part for batch types. Only drains whose job modules
declare a batch handler run them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .claimed import claimed_jobs_from_document
from .db import as_session
from .models import Job


@dataclass(frozen=True, slots=True)
class BatchClaim:
    """What one batch type's claim took, and when its window closes if it took nothing."""

    jobs: list[Job]
    closes_in: float | None = None
    """Seconds until the oldest due job's window closes (<= 0: closed, yet nothing was
    claimed: another drain holds them); None: none is due."""


def claim_batch_of_type(conn: Any, *, job_type: str, batch_size: int, batch_window: float,
                        lease_seconds: float, queues: Sequence[str] | None = None,
                        take: int | None = None) -> BatchClaim:
    """Claim up to ``take`` (default ``batch_size``; never fewer) due jobs of ``job_type``
    once a batch is full or its oldest job has been due ``batch_window`` seconds (by the
    database's clock); else claim nothing and say when the window closes. One statement,
    committed at once."""
    [[document, closes_in]] = as_session(conn).values(
        "job_claim_batch_of_type", job_type=job_type, batch_size=batch_size,
        take=max(batch_size, take or 0), batch_window=float(batch_window),
        lease_seconds=lease_seconds, queues=list(queues) if queues else None)
    return BatchClaim(claimed_jobs_from_document(document),
                      None if closes_in is None else float(closes_in))


def batch_due(conn: Any, sizes: dict[str, tuple[int, float]],
              queues: Sequence[str] | None = None) -> int:
    """Due jobs of the batch types (``sizes``: each type's batch_size and batch_window) that
    their claims would take now, read without a lock."""
    if not sizes:
        return 0
    types = sorted(sizes)
    [[due]] = as_session(conn).values(
        "job_batch_due", job_types=types, batch_sizes=[sizes[t][0] for t in types],
        batch_windows=[float(sizes[t][1]) for t in types],
        queues=list(queues) if queues else None)
    return int(due)
