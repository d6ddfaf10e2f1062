"""The claim planner: which claim comes next (a job whose claim was lost, alone; the
controlled claim for capped or rate-limited work; the plain claim, from each tenant in turn
once tenants are seen), how many jobs it takes, and when a rate limit is worth waiting for.
It decides; the store (``Claims``, the part of the ``DrainStore`` port it uses) executes."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..models import Job

# A claim also takes the jobs its pace says will finish while the next claim is on its way.
CLAIM_AHEAD_SECONDS = 0.05
# A wait for a rate window ends this much after the window frees, so that the claim after it
# does not come a hair too early by the database's clock.
RATE_WAIT_SLACK_SECONDS = 0.01
# A drain that did not see tenants at its start looks again at most this often (when a claim
# comes back short): a tenant's flood that comes later is shared fairly within a second.
TENANT_LOOK_SECONDS = 1.0
# A drain whose job modules declare rate-limited types looks for their due jobs at its first
# claim, then at most this often while none is due (a walk of the claim's index: there is no
# index by type), and claims through the controlled claim only while some are.
RATED_LOOK_SECONDS = 1.0
# A drain with batch types whose other claims came back empty claims batches first, and
# tries the other claims first again at most this often (a batch's claim that finds nothing
# is always followed by them).
PLAIN_LOOK_SECONDS = 0.25


class Controlled(Protocol):
    """What the planner reads of a controlled claim (``store.ControlledClaim``)."""

    @property
    def jobs(self) -> list[Job]: ...

    @property
    def rate_free_in(self) -> float | None: ...

    @property
    def rated(self) -> Mapping[int, float]: ...


class Claims(Protocol):
    """The claims of the ``DrainStore`` port."""

    def claim(self, *, batch_size: int, lease_seconds: float,
              queues: Sequence[str] | None, fair: bool = False,
              by_queue: bool = False) -> list[Job]: ...

    def claim_alone(self, *, lease_seconds: float, queues: Sequence[str] | None
                    ) -> Job | None: ...

    def claim_controlled(self, *, batch_size: int, lease_seconds: float,
                         queues: Sequence[str] | None) -> Controlled: ...

    def tenanted(self) -> bool: ...

    def rated_due(self, queues: Sequence[str] | None) -> bool: ...


class Batched(Protocol):
    """What the planner asks of the batch types' claims (``drain.batches.BatchClaims``)."""

    def claim(self, store: Any, *, room: int, lease: float,
              queues: Sequence[str] | None, every: bool = False, size: int = 1
              ) -> list[Job]: ...

    def window_in(self) -> float | None: ...

    looked: set[str]


class Pace:
    """How fast this drain's jobs finish: jobs per second since its first start."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.first_start: float | None = None
        self.finished = 0

    def start(self) -> None:
        if self.first_start is None:
            self.first_start = self.clock()

    def finish(self) -> None:
        self.finished += 1

    def jobs_in(self, seconds: float) -> int:
        """Jobs that finish in ``seconds`` at this pace (0 before any has finished)."""
        if self.first_start is None or not self.finished:
            return 0
        elapsed = max(self.clock() - self.first_start, 1e-3)
        return int(self.finished / elapsed * seconds)


class Every:
    """A look at the database taken at most once every ``seconds``."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self.last: float | None = None

    def looked(self) -> None:
        self.last = self.clock()

    def due(self) -> bool:
        """True (and counted as a look) if the last look is ``seconds`` old, or none was."""
        now = self.clock()
        if self.last is not None and now - self.last < self.seconds:
            return False
        self.last = now
        return True


def claim_size(pace: Pace, *, room: int, free: int, batch_size: int, left: float) -> int:
    """How many jobs to claim: the ``free`` slots, plus what the jobs' pace says will finish
    while the next claim is on its way, within the time ``left`` (after the margin) and the
    ``room`` PGDRAIN_MAX_JOBS leaves; PGDRAIN_BATCH_SIZE caps it. Fast jobs so reach full
    batches; slow ones are not held claimed behind each other."""
    ahead = pace.jobs_in(CLAIM_AHEAD_SECONDS)
    fits = pace.jobs_in(max(0.0, left)) + free
    return max(1, min(room, batch_size, free + ahead, fits))


def claims_ahead(pace: Pace, *, free: int, ready: int) -> bool:
    """Whether to claim with no slot free: only while the pace says more than the ``ready``
    jobs finish before the next claim would come back."""
    return free > 0 or pace.jobs_in(CLAIM_AHEAD_SECONDS) > ready


def rate_wait(free_in: float | None, *, left: float, least_to_start: float) -> float | None:
    """After a claim found only work a rate limit holds back (it frees in ``free_in``
    seconds): how long to sleep before claiming again, if that still leaves time to run a
    job (None: do not wait). Never a loop of empty claims."""
    if free_in is None or left - free_in < least_to_start:
        return None
    return free_in + RATE_WAIT_SLACK_SECONDS


class ClaimPlanner:
    """The state the next claim depends on, from the janitor's look at the start on."""

    def __init__(self, *, alone_due: bool, controlled: bool, fair: bool, rated: bool,
                 lease: float, queues: Sequence[str] | None, by_queue: bool = False,
                 batches: Batched | None = None):
        self.alone_due = alone_due
        """Jobs whose claim was lost are due (the janitor said so): claim them one by one."""
        self.controlled = controlled
        """Some queue has a cap or a rate limit (the janitor's look at the start): claim
        through claim_controlled too. A limit set later is obeyed at once (the plain claim
        leaves such queues alone) and served from the next drain on."""
        self.by_queue = by_queue
        """Some queue is paused, capped or rate-limited (the janitor's look): the plain claim
        reads queue by queue, past that queue's backlog. Either claim takes the same jobs; a
        queue paused later costs only speed until the next drain."""
        self.rated = rated
        self.rated_due = False
        """A job of a rate-limited type is due (looked for at the first claim, then at most
        every RATED_LOOK_SECONDS while none is): claim through claim_controlled too. Only
        then: the controlled claim takes turns with other drains on the type's row lock."""
        self.rated_look = Every(RATED_LOOK_SECONDS)
        self.fair = fair
        """Pending jobs name tenants: the plain claim takes from each in turn."""
        self.tenant_look = Every(TENANT_LOOK_SECONDS)
        self.tenant_look.looked()
        self.lease = lease
        self.queues = queues
        self.rate_free_in: float | None = None
        """After a claim that found nothing: the seconds until a rate limit that held due
        work back lets one more start (None: no rate held anything back)."""
        self.batches = batches
        """The batch types' claims (drain.batches; None: no batch handler): they take turns
        with the other claims, one batch a claim."""
        self.batch_turn = False
        self.plain_found = True
        """The last plain claim took jobs (with batch types: see _batch_first)."""
        self.plain_look = Every(PLAIN_LOOK_SECONDS)
        self.start_by: dict[int, float] = {}
        """Jobs claimed under a rate limit: the ``time.monotonic()`` by which each must start,
        or be handed back unstarted (flow.start_slack: the starts keep the rate)."""

    def claim(self, store: Claims, size: int, *, room: int | None = None) -> list[Job]:
        """The next claim: a job whose claim was lost before, alone, while there are any;
        then up to ``size`` jobs, the controlled claim's first (else a steady flow of others'
        jobs would leave them waiting). With batch types, every other claim is a batch's
        first (within ``room``, the jobs the drain may still claim), and either kind is
        tried when the other finds nothing."""
        if self.alone_due:
            job = store.claim_alone(lease_seconds=self.lease, queues=self.queues)
            if job is not None:
                return [job]
            self.alone_due = False
        self.rate_free_in = None
        batch_first = False
        if self.batches is not None:
            self.batches.looked = set()
            batch_first = self._batch_first()
            if batch_first and (jobs := self._batch(store, size, room)):
                return jobs
        jobs = self._controlled(store, size) if self._wants_controlled(store) else []
        if len(jobs) < size:
            jobs += self._plain(store, size - len(jobs))
        if not jobs and self.batches is not None:
            # Nothing else to do: every batch type is looked at now.
            jobs = self._batch(store, size, room, every=True)
        if jobs:
            self.rate_free_in = None
        return jobs

    def _batch_first(self) -> bool:
        """Whether a batch's claim comes first: every other claim while the other claims
        find work; else every claim but one every PLAIN_LOOK_SECONDS (a drain of batches
        alone would pay an empty claim for each)."""
        if self.plain_found:
            self.batch_turn = not self.batch_turn
            return self.batch_turn
        return not self.plain_look.due()

    def _batch(self, store: Claims, size: int, room: int | None, *, every: bool = False
               ) -> list[Job]:
        assert self.batches is not None
        return self.batches.claim(store, room=size if room is None else room,
                                  lease=self.lease, queues=self.queues, every=every, size=size)

    def wait_in(self) -> float | None:
        """After a claim that found nothing: the seconds until a rate limit frees or a batch's
        window closes, whichever is first (None: neither holds due work back)."""
        window = None if self.batches is None else self.batches.window_in()
        waits = [w for w in (self.rate_free_in, window) if w is not None]
        return min(waits) if waits else None

    def _wants_controlled(self, store: Claims) -> bool:
        """Whether to claim capped or rate-limited work: while some queue has a limit, or
        while rated types' jobs were due at the last look, and at a look at most every
        RATED_LOOK_SECONDS (the first at the first claim)."""
        if self.controlled:
            return True
        if self.rated and not self.rated_due and self.rated_look.due():
            self.rated_due = store.rated_due(self.queues)
        return self.rated_due

    def _controlled(self, store: Claims, size: int) -> list[Job]:
        sent = time.monotonic()
        taken = store.claim_controlled(batch_size=size, lease_seconds=self.lease,
                                       queues=self.queues)
        self.rate_free_in = taken.rate_free_in
        self.start_by.update((job_id, sent + within) for job_id, within in taken.rated.items())
        if not self.controlled and not taken.jobs and taken.rate_free_in is None:
            self.rated_due = False  # none due any more: look again in a while
        return list(taken.jobs)

    def _plain(self, store: Claims, size: int) -> list[Job]:
        jobs = store.claim(batch_size=size, lease_seconds=self.lease, queues=self.queues,
                           fair=self.fair, by_queue=self.by_queue)
        if len(jobs) < size and not self.fair and self._tenants_came(store):
            self.fair = True
            jobs += store.claim(batch_size=size - len(jobs), lease_seconds=self.lease,
                                queues=self.queues, fair=True, by_queue=self.by_queue)
        self.plain_found = bool(jobs)
        return jobs

    def _tenants_came(self, store: Claims) -> bool:
        """Whether jobs naming tenants came since the last look (the janitor's, at the start):
        asked when a claim comes back short, at most once every TENANT_LOOK_SECONDS."""
        return self.tenant_look.due() and store.tenanted()
