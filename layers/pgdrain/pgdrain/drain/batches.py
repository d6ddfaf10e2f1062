"""Batch handlers in the drain (``@pgdrain.job(..., batch_size=N, batch_window=S)``;
pgdrain.batches has the return protocol).

A batch type's jobs are claimed by their own claim (``BatchClaims``: the plain claims leave
them out), which takes a batch only once it is full or its oldest job's window has passed,
judged in SQL: a batch that waits to fill holds no claim. Jobs of a batch type claimed
otherwise (by the controlled claim, in a capped queue or under the type's rate, per item)
are grouped the same way. The loop starts a batch as one attempt: its first job leads it
(admission, time limit, slot, worker, all as one job's), the handler gets the list, and its
end is split into each item's ``Ended`` (``item_ends``) before the outcomes are settled, so
every item keeps its own attempts, backoff, policy and finishing write.

Only drains whose job modules declare a batch handler import this module.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from .. import store as pgstore
from ..batch_store import BatchClaim
from ..batches import BatchReportError, JobBatch, item_outcomes
from ..db import Session
from ..errors import Discard
from ..models import Finish, Job
from ..registry import Handler
from .admission import with_parsed_payload
from .attempt import Transaction
from .outcomes import COMMITTED, Ended

if TYPE_CHECKING:
    from .state import DrainState

# While a batch type has no due job, its claim looks again at most this often; while its
# window is open, when the window closes (or this, whichever is first).
BATCH_LOOK_SECONDS = 1.0
# A batch whose window has closed but whose jobs another drain holds: look again after this.
BATCH_BUSY_SECONDS = 0.05


class BatchStore(Protocol):
    def claim_batch(self, *, job_type: str, batch_size: int, take: int, batch_window: float,
                    lease_seconds: float, queues: Sequence[str] | None) -> BatchClaim: ...


class BatchClaims:
    """The batch types' claims, in turn, each looked at when it may have a batch."""

    def __init__(self, handlers: Mapping[str, Handler],
                 clock: Callable[[], float] = time.monotonic):
        self.sizes = {t: (h.batch_size or 1, h.batch_window) for t, h in handlers.items()}
        self.order = deque(sorted(self.sizes))
        self.clock = clock
        self.next_look = dict.fromkeys(self.sizes, 0.0)
        self.looked: set[str] = set()
        """The types the last claim looked at."""
        self.closes_at: dict[str, float] = {}
        """The batch types whose window is open: when it closes (``clock()``)."""

    def claim(self, store: BatchStore, *, room: int, lease: float,
              queues: Sequence[str] | None, every: bool = False, size: int = 1
              ) -> list[Job]:
        """The next batch type's batches that are ready, if any: one batch, or as many jobs
        as the loop's claim ``size`` if more (batches of 1 or 10 would otherwise cost a claim
        each), within ``room``. ``every``:
        look at each type now, however recently it was looked at (the other claims found
        nothing: before the drain waits or stops, no batch is left unseen), but those this
        same claim looked at already (``every`` after a claim without it)."""
        now = self.clock()
        seen, self.looked = (self.looked if every else set()), set()
        for _ in range(len(self.order)):
            job_type = self.order[0]
            self.order.rotate(-1)
            if job_type in seen or (self.next_look[job_type] > now and not every):
                continue
            self.looked.add(job_type)
            batch_size, window = self.sizes[job_type]
            batch_size = max(1, min(batch_size, room))
            got = store.claim_batch(job_type=job_type, batch_size=batch_size,
                                    take=max(batch_size, min(size, room)), batch_window=window,
                                    lease_seconds=lease, queues=queues)
            self.closes_at.pop(job_type, None)
            self.next_look[job_type] = now + look_after(got.closes_in, bool(got.jobs))
            if got.jobs:
                return got.jobs
            if got.closes_in is not None and got.closes_in > 0:
                self.closes_at[job_type] = now + got.closes_in
        return []

    def window_in(self) -> float | None:
        """Seconds until the first open window closes (None: none is open)."""
        if not self.closes_at:
            return None
        return max(0.0, min(self.closes_at.values()) - self.clock())


def look_after(closes_in: float | None, claimed: bool) -> float:
    """How long a batch type's claim waits before its next look: none after a batch (more
    may be ready), until its window closes, a moment while another drain holds its batch."""
    if claimed:
        return 0.0
    if closes_in is None:
        return BATCH_LOOK_SECONDS
    if closes_in <= 0:
        return BATCH_BUSY_SECONDS
    return min(closes_in, BATCH_LOOK_SECONDS)


def take_group(ready: deque[Job], lead: Job, handler: Handler) -> list[Job]:
    """The batch ``lead`` (already out of ``ready``) leads: it and the ready jobs of its type
    after it, up to the type's batch_size, taken out of ``ready``. A job whose claim was lost
    runs alone (it may be what killed a drain), and one whose payload cannot be decoded is
    left to be refused on its own."""
    size = handler.batch_size or 1
    if lead.lost_claims:
        return [lead]
    group, kept = [lead], []
    for job in ready:
        if (len(group) < size and job.job_type == lead.job_type and not job.lost_claims
                and job.payload_error is None):
            group.append(job)
        else:
            kept.append(job)
    if len(group) > 1:
        ready.clear()
        ready.extend(kept)
    return group


def calling(handler: Handler, jobs: Sequence[Job]) -> Handler:
    """The handler as the attempt calls it: with the lead job in place of the batch, as any
    one job's (``func(job)`` or ``func(job, conn)``), handing the handler the list."""
    func, items = handler.func, JobBatch(jobs)
    if handler.transactional:
        return replace(handler, func=lambda _lead, conn: func(items, conn))
    return replace(handler, func=lambda _lead: func(items))


class StaleBatch(Exception):
    """A transactional batch's done write found claims lost: its transaction rolled back."""


@dataclass(frozen=True, slots=True)
class BatchCommitted:
    """A transactional batch committed: every item done with the handler's writes, but
    ``failures`` (the items it reported failed, to settle as failed attempts)."""

    failures: Mapping[int, BaseException]


class BatchTransaction(Transaction):
    """A transactional batch: the done items' writes commit with the handler's."""

    def __init__(self, session: Session, jobs: Sequence[Job],
                 done: Callable[[Job, Any], Finish]):
        super().__init__(session, jobs[0], done)
        self.jobs = list(jobs)

    def write(self, value: Any) -> object:
        outcomes = item_outcomes(self.jobs, value)  # a bad report: raised, rolled back
        finishes = [self.done(o.job, o.result) for o in outcomes if o.error is None]
        written = pgstore.finish_many(self.session, finishes)
        if written.stale:
            raise StaleBatch(f"the claims of jobs {list(written.stale)[:5]} of this batch were "
                             "lost meanwhile; its transaction rolled back")
        return BatchCommitted({o.job.id: o.error for o in outcomes if o.error is not None})


def item_ends(ended: Ended, handler: Handler, jobs: Sequence[Job]) -> list[Ended]:
    """Each item's end, from the batch's: a raise, a timeout, a bad report (every item
    fails with it), a committed transaction, or each item's own outcome."""
    def end(job: Job, result: Any = None, error: BaseException | None = None) -> Ended:
        return Ended(job, handler, ended.started, ended.duration, result, error,
                     ended.timed_out)

    if ended.timed_out is not None or ended.error is not None:
        return [end(job, error=ended.error) for job in jobs]
    value = ended.result
    if isinstance(value, BatchCommitted):
        return [end(job, error=value.failures[job.id]) if job.id in value.failures
                else end(job, COMMITTED) for job in jobs]
    try:
        return [end(o.job, o.result, o.error) for o in item_outcomes(jobs, value)]
    except BatchReportError as exc:
        return [end(job, error=exc) for job in jobs]


def start_batch(s: DrainState, jobs: Sequence[Job], handler: Handler,
                session: Session | None, started: float
                ) -> tuple[Job, Handler, Transaction | None] | None:
    """Ready a batch's attempt: each payload parsed into the handler's model (an item that
    does not fit is discarded alone), the batch registered for ``item_ends``; the lead job,
    the handler to call and the transaction, or None when no item is left to run."""
    parsed = []
    for job in jobs:
        try:
            parsed.append(with_parsed_payload(job, handler))
        except Discard as exc:
            s.settle(Ended(job, handler, started, 0.0, error=exc))
    if not parsed:
        if session is not None:
            s.store.give_back(session, broken=False)
        return None
    for item in parsed[1:]:  # the lead's is the loop's: each item's parents and signal
        s.checkpoints.begin(item, handler, inline=False)
    s.batches[parsed[0].id] = handler, parsed
    transaction = None if session is None else BatchTransaction(session, parsed, s.done)
    return parsed[0], calling(handler, parsed), transaction


def batch_jobs(s: DrainState, job: Job) -> list[Job]:
    """The jobs of the batch ``job`` leads (itself alone if it leads none)."""
    batch = s.batches.get(job.id)
    return [job] if batch is None else batch[1]
