"""The attempts running on the runner's threads and event loop, under the loop's watch:
each under its own time limit (``Runner.interrupt``); one that ignores it for
RUNAWAY_GRACE_SECONDS is recorded as timed out, its slot given to the next job, and what it
does later never written (see pgdrain.runner)."""

from __future__ import annotations

import logging
import queue
import time
from collections import Counter

from ..models import Job
from ..runner import Runner, Task
from .attempt import Attempt, ended_on_worker, worker_call
from .outcomes import Ended
from .state import DrainState

log = logging.getLogger("pgdrain.drain")  # the library's one drain logger, as users filter it

# After a worker thread's time limit ran out, it has this long to stop before its job is
# recorded as timed out without it (and the thread counted as a runaway).
RUNAWAY_GRACE_SECONDS = 0.2

# The loop waits at most this long between looks at limits and the completer while
# attempts run on workers.
TICK_SECONDS = 0.05

# While jobs run longer than this, or report progress, the loop writes their progress and
# reads their cancel requests this often (one statement for all of them).
CONTROL_SECONDS = 1.0


class Running:
    def __init__(self, state: DrainState, runner: Runner):
        self.s = state
        self.runner = runner
        self.outbox: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        # A checkpoint handed over wakes the loop at once: the handler waits for it.
        state.checkpoints.wake = lambda: self.outbox.put(None)
        self.attempts: dict[int, tuple[Attempt, Task]] = {}
        """By ``id(task)``: what runs on workers now."""
        self.by_type: Counter[str] = Counter()
        self.runaways: dict[int, tuple[Attempt, Task]] = {}
        self.next_sync = time.monotonic() + CONTROL_SECONDS

    def __len__(self) -> int:
        return len(self.attempts)

    def launch(self, attempt: Attempt, must_end: float, start_by: float | None) -> None:
        task = Task(attempt.job, attempt.handler, attempt.timeout, attempt.started,
                    worker_call(attempt), self.outbox, must_end=must_end, start_by=start_by)
        if attempt.session is not None:
            task.conn = attempt.session.conn
        self.attempts[id(task)] = attempt, task
        self.by_type[attempt.job.job_type] += 1
        self.runner.start(task)

    def tick(self) -> int:
        """Wait a little for attempts to end, and deal with those that ended, overran, or
        report progress; how many ended."""
        ended = self._collect(self._wait_seconds())
        self._enforce_limits()
        self.s.checkpoints.save_handed()
        self._sync_controls()
        return ended

    # --- ending ---

    def _wait_seconds(self) -> float:
        now = time.monotonic()
        limits = [task.limit_at - now for _, task in self.attempts.values()
                  if task.fired_at is None]
        return max(0.0, min([TICK_SECONDS, *limits]))

    def _collect(self, timeout: float) -> int:
        ended = 0
        try:
            task = self.outbox.get(timeout=timeout) if timeout > 0 else self.outbox.get_nowait()
        except queue.Empty:
            return ended
        while True:
            ended += self._finished(task)
            try:
                task = self.outbox.get_nowait()
            except queue.Empty:
                return ended

    def _finished(self, task: Task | None) -> int:
        if task is None:
            return 0  # woken for a checkpoint: saved below, in this tick
        if self.runaways.pop(id(task), None) is not None:
            return 0  # recorded as timed out already, its connection given back then
        entry = self.attempts.get(id(task))
        if entry is None:
            return 0  # handed back already: revoked as it found itself too late to begin
        attempt = entry[0]
        if task.late:  # it could not begin in time for its rate window: it never ran
            self._never_began(attempt, task)
            return 0
        transaction = attempt.transaction
        if transaction is not None:
            self.s.store.give_back(transaction.session,
                                   broken=task.fired_at is not None or transaction.broken)
        self._forget(attempt, task)
        self.s.pace.finish()
        self.s.settle(ended_on_worker(attempt, task))
        return 1

    def _sync_controls(self) -> None:
        """About every CONTROL_SECONDS: write the progress handlers reported and tell the
        handlers of jobs asked to stop (``job.cancel_requested``). Jobs that end within a
        second and report nothing (most) cost no statement."""
        now = time.monotonic()
        if now < self.next_sync:
            return
        self.next_sync = now + CONTROL_SECONDS
        jobs = [job for a, task in self.attempts.values() if not task.finished
                and (now - a.started >= CONTROL_SECONDS or a.job.control.has_progress)
                for job in self._items(a)]
        if not jobs:
            return
        asked = self.s.store.sync_controls(jobs, [j.control.take_progress() for j in jobs])
        for job in jobs:
            if job.id in asked:
                job.control.cancel_requested = True

    def _items(self, attempt: Attempt) -> list[Job]:
        """The attempt's jobs: its job, or every item of the batch it leads."""
        if not self.s.batches:
            return [attempt.job]
        from .batches import batch_jobs

        return batch_jobs(self.s, attempt.job)

    def _enforce_limits(self) -> None:
        now = time.monotonic()
        for attempt, task in list(self.attempts.values()):
            if task.finished:
                continue
            if task.fired_at is None:
                if now >= task.limit_at:
                    if self.runner.revoke(task):
                        self._never_began(attempt, task)
                        continue
                    task.fired_at = now
                    self.runner.interrupt(task)
            elif now - task.fired_at >= RUNAWAY_GRACE_SECONDS:
                self._runaway(attempt, task, now)
            else:
                self.runner.interrupt(task)  # again: it may have caught the first
        for _, task in self.runaways.values():
            self.runner.interrupt(task)

    def _never_began(self, attempt: Attempt, task: Task) -> None:
        """An attempt whose handler never began before its time ran out (the event loop was
        held by another handler): nothing of it ran, so it is handed back, uncharged."""
        self._forget(attempt, task)
        if attempt.session is not None:
            self.s.store.give_back(attempt.session, broken=False)
        self.s.release([attempt.job])

    def _forget(self, attempt: Attempt, task: Task) -> None:
        self.attempts.pop(id(task), None)
        self.by_type[attempt.job.job_type] -= 1

    def _runaway(self, attempt: Attempt, task: Task, now: float) -> None:
        """A handler that ignored its limit: record its job as timed out without it, and
        take its connection back (broken: it is closed under the runaway), so that a
        runaway never keeps a pooled connection lent past this moment."""
        self._forget(attempt, task)
        self._give_up(attempt, task)
        self.s.settle(Ended(attempt.job, attempt.handler, attempt.started,
                            time.monotonic() - attempt.started, timed_out=attempt.timeout))
        fired_at = task.fired_at
        log.error("job %s (%s) ignored its time limit: still running %.1f s after it ran out "
                  "(it caught HandlerTimeout, or is blocked where Python cannot interrupt "
                  "it). Its job is recorded as timed out and whatever it does later is not "
                  "written. Never swallow HandlerTimeout; give blocking calls a timeout.",
                  attempt.job.id, attempt.job.job_type, now - fired_at if fired_at else 0)

    def stop_all(self) -> None:
        """On the way out after an error: hand back what never began, interrupt every other
        handler, give them a moment."""
        for attempt, task in list(self.attempts.values()):
            if self.runner.revoke(task):
                self._never_began(attempt, task)
        for _, task in self.attempts.values():
            if not task.finished:
                task.fired_at = task.fired_at or time.monotonic()
                self.runner.interrupt(task)
        until = time.monotonic() + RUNAWAY_GRACE_SECONDS
        while self._unfinished() and time.monotonic() < until:
            time.sleep(0.005)
        for attempt, task in list(self.attempts.values()):
            if not task.finished:
                self._give_up(attempt, task)

    def _unfinished(self) -> bool:
        return any(not task.finished for _, task in self.attempts.values())

    def _give_up(self, attempt: Attempt, task: Task) -> None:
        """No longer wait for ``attempt``: it is a runaway, and its pooled connection (if
        any) goes back to the pool as broken now, not when (if ever) the handler returns."""
        self.runaways[id(task)] = attempt, task
        if attempt.session is not None:
            self.s.store.give_back(attempt.session, broken=True)

    def abandoned(self) -> int:
        """Runaways still running: their handlers outlive the drain."""
        return sum(1 for _, task in self.runaways.values() if not task.finished)
