"""The drain's one loop, for N slots (PGDRAIN_CONCURRENCY; N=1 included): claims and
finishing writes on the drain's thread and connection; each attempt on the drain's thread
(``attempt.runs_inline``) or on the runner's threads and event loop (``running``).

Claimed jobs wait in ``ready`` until a slot is free; a job that can no longer start before
the deadline is released with the rest of ``ready``, uncharged. A job whose claim was lost
before runs alone. When nothing claimed is left unfinished, every outcome is written and the
observer told that the batch finished, before the next claim."""

from __future__ import annotations

import time
from collections import deque
from contextlib import suppress

from ..db import Session
from ..errors import Discard
from ..middleware import applied
from ..models import Job
from ..registry import Handler
from ..runner import Runner
from . import budget
from .admission import Admission, Verdict, admit, with_parsed_payload
from .attempt import Attempt, Transaction, run_inline, runs_inline
from .outcomes import Ended
from .planner import ClaimPlanner, claim_size, claims_ahead, rate_wait
from .running import Running
from .state import DrainState
from .summary import Stop


class Loop:
    def __init__(self, state: DrainState, planner: ClaimPlanner, runner: Runner):
        self.s = state
        self.planner = planner
        self.slots = max(1, state.settings.concurrency)
        self.ready: deque[Job] = deque()
        self.running = Running(state, runner)
        self.stopping: Stop | None = None
        self.isolated = False
        """A job with a lost claim is running: nothing else starts or is claimed."""
        self.claimed_nothing = False
        """The last claim came back empty while jobs ran: claim again once one finishes
        (its retry may be due at once), and stop only when a claim finds nothing with
        nothing running and every outcome written."""

    def run(self) -> None:
        s = self.s
        try:
            while True:
                self._start_ready()
                if self.stopping is None and not self.isolated and len(self.ready) < self.slots:
                    if not self.running and not self.ready:
                        self._batch_finished()
                    if not self.claimed_nothing and self._claim_more():
                        continue
                if not self.ready and not self.running:
                    if self.stopping is not None:
                        break
                    continue  # claim again, now that every outcome is written
                self._tick()
            s.completer.flush()
            s.summary.stopped = self.stopping or Stop.EMPTY
        except BaseException:
            self.running.stop_all()
            if s.store.connected:
                with suppress(Exception):
                    s.release(list(self.ready))
                    self.ready.clear()
                    s.completer.flush()
            raise
        finally:
            s.observer.batch_finished()
            s.summary.abandoned += self.running.abandoned()

    def _batch_finished(self) -> None:
        """Nothing claimed is left unfinished: everything so far is written first (a retry
        due at once is claimable), and the batch is over."""
        self.s.completer.flush()
        self.s.observer.batch_finished()
        self.claimed_nothing = False

    def _tick(self) -> None:
        if self.running.tick():
            self.claimed_nothing = False
        if not self.running:
            self.isolated = False
        self.s.completer.flush_if_due()

    # --- claiming ---

    def _claim_more(self) -> bool:
        """Claim if there is room; True if jobs came (or a rate limit was waited for)."""
        s = self.s
        room = s.settings.max_jobs - s.summary.claimed
        if room <= 0:
            self.stopping = s.stopping(Stop.MAX_JOBS)
            return False
        if s.left() < s.budget.least_to_start(s.started):
            self.stopping = s.stopping(Stop.DEADLINE)
            return False
        free = self.slots - len(self.running) - len(self.ready)
        if not claims_ahead(s.pace, free=free, ready=len(self.ready)):
            return False
        # What finished is written before the next claim, as a batch at a time would: a
        # write of thousands of outcomes costs more per row than a batch's.
        s.completer.flush()
        size = claim_size(s.pace, room=room, free=max(free, 0),
                          batch_size=s.settings.batch_size, left=s.left())
        jobs = self.planner.claim(s.store, size, room=room)
        if not jobs:
            return self._claimed_nothing()
        s.summary.claimed += len(jobs)
        self.ready.extend(jobs)
        return True

    def _claimed_nothing(self) -> bool:
        """An empty claim: with jobs running, claim again once one ends; else wait for a
        rate limit that frees in time (True), or stop."""
        if self.running:
            self.claimed_nothing = True
            return False
        free_in = self.planner.rate_free_in
        wait = rate_wait(self.planner.wait_in(), left=self.s.left(),
                         least_to_start=self.s.budget.least_to_start(self.s.started))
        if wait is not None:
            time.sleep(wait)
            return True
        self.stopping = Stop.RATE_LIMITED if free_in is not None else Stop.EMPTY
        return False

    # --- starting ---

    def _start_ready(self) -> None:
        while self.ready and len(self.running) < self.slots and not self.isolated:
            if self.ready[0].lost_claims and not self._isolate():
                return
            started = self._start_one()
            if self.isolated and not self.running:
                self.isolated = False  # it ran, failed at once, or could not start in time
            if not started:
                return

    def _isolate(self) -> bool:
        """A job whose claim was lost before (it may be what killed a drain) runs alone:
        once nothing else runs and every outcome so far is written, so that if it kills
        this process too, it takes no other job's run or outcome with it."""
        if self.running:
            return False
        self.s.completer.flush()
        self.isolated = True
        return True

    def _start_one(self) -> bool:
        """Start (or refuse, or hand back) the first ready job that may go now; False when
        none may."""
        for index, job in enumerate(self.ready):
            if bool(job.lost_claims) is not self.isolated:
                if self.isolated:
                    return False
                continue  # a job with a lost claim waits to run alone (see _isolate)
            done = self._admit(index, job)
            if done is not None:
                return done
        return False

    def _admit(self, index: int, job: Job) -> bool | None:
        """Act on the job's admission: True if it was dealt with, False if nothing claimed
        may start any more, None to look at the next ready job."""
        s = self.s
        left = s.left()
        admission = admit(job, s.registry, default_timeout=s.settings.job_timeout_seconds,
                          budget=s.budget, left=left, started=s.started,
                          of_type=self.running.by_type[job.job_type],
                          late=budget.late(self.planner.start_by.get(job.id), time.monotonic()))
        verdict = admission.verdict
        if verdict is Verdict.WAIT:
            return None
        if verdict is Verdict.TOO_LATE:
            # Nothing claimed can start in time any more: hand it all back, uncharged.
            s.release(list(self.ready))
            self.ready.clear()
            self.stopping = s.stopping(Stop.DEADLINE)
            s.completer.flush()
            return False
        if verdict is Verdict.START:
            return self._start(index, job, admission, left)
        del self.ready[index]
        if verdict is Verdict.REFUSE and admission.error is not None:
            s.fail_at_once(job, admission.error)
        else:
            s.release([job])
        return True

    def _start(self, index: int, job: Job, admission: Admission, left: float) -> bool | None:
        s, handler = self.s, admission.handler
        assert handler is not None
        session = None
        if handler.transactional:
            session = s.store.lend(s.budget.io_deadline)
            if session is None and self.running:
                return None  # every pooled connection is lent: a plain job may go first
        del self.ready[index]
        if handler.transactional and session is None:
            s.release([job])  # lent to no attempt of this drain: none comes back in time
            return True
        if admission.cut_short and not handler.resumable:  # a resumable job expects it
            s.warn_cut_short(job, handler, left)
        batch = None
        if handler.batch_size is not None:  # it leads a batch of its type's ready jobs
            from .batches import take_group

            batch = take_group(self.ready, job, handler)
        self._attempt(job, handler, admission.timeout, session, time.monotonic() + left,
                      batch)
        return True

    def _attempt(self, job: Job, handler: Handler, timeout: float, session: Session | None,
                 must_end: float, batch: list[Job] | None = None) -> None:
        s = self.s
        started = time.monotonic()
        s.started += 1
        s.pace.start()
        transaction: Transaction | None
        if batch is not None:
            from .batches import start_batch

            # Middleware goes around the handler's one call: its `job` is the batch's list.
            ready = start_batch(s, batch, applied(s.registry, handler), session, started)
            if ready is None:
                s.pace.finish()
                return
            job, handler, transaction = ready
        else:
            try:
                job = with_parsed_payload(job, handler)
            except Discard as exc:
                if session is not None:
                    s.store.give_back(session, broken=False)
                s.settle(Ended(job, handler, started, time.monotonic() - started, error=exc))
                s.pace.finish()
                return
            transaction = None if session is None else Transaction(session, job, s.done)
            handler = applied(s.registry, handler)
        items = s.batches[job.id][1] if batch is not None else (job,)
        if any(item.trace_context is not None for item in items):
            from ..job_spans import around  # an enqueuer was traced: run it in that trace

            handler = around(handler, items)
        attempt = Attempt(job, handler, timeout, started, transaction)
        inline = runs_inline(handler, slots=self.slots, limits=s.limits)
        s.checkpoints.begin(job, handler, inline=inline)
        if inline:
            self._run_inline(attempt)
        else:
            self.running.launch(attempt, must_end, self.planner.start_by.get(job.id))

    def _run_inline(self, attempt: Attempt) -> None:
        s = self.s
        transaction = attempt.transaction
        if transaction is not None:
            s.completer.flush()  # what is waiting goes first: this transaction writes its own
        s.inline = attempt.job
        try:
            ended = run_inline(attempt, s.limits)
        finally:
            s.inline = None
            if transaction is not None:
                s.store.give_back(transaction.session, broken=transaction.broken)
        s.settle(ended)
        s.pace.finish()
        s.completer.flush_if_due()
