"""The completer: a drain's finishing writes, gathered and written together.

Each job's outcome (done, retry, fail, snooze, release) is added as it is known and written
with the others in one statement (``store.finish_many``): once the oldest waiting one started
``window_seconds`` ago, at the end of each claimed batch, and before the drain gives up. So a
job that ran that long is recorded before the next one starts, and a process that dies
mid-batch can lose only the outcomes of the last window, whose claims the janitor then refunds
(River's job completer, synchronous: a Lambda invocation has nothing to overlap it with).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .models import Finish, Job, Outcome, Written

# After each job, the waiting outcomes are written if the oldest of them started this long ago.
WINDOW_SECONDS = 0.05


@dataclass(frozen=True, slots=True)
class Recorded:
    """An outcome as written: its job, the outcome, whether the claim still held (``stale``
    when not), and what the job took."""

    job: Job
    outcome: Outcome
    stale: bool
    duration: float
    error: BaseException | None


class Completer:
    """Gathers outcomes; ``flush`` writes them in one statement through ``write``.

    ``write(finishes) -> Written`` is ``store.finish_many`` on the drain's session (a fake in
    tests); ``on_written`` receives every outcome once written, in the order added.
    """

    def __init__(self, write: Callable[[Sequence[Finish]], Written],
                 on_written: Callable[[Recorded], None], *,
                 window_seconds: float = WINDOW_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self._write = write
        self._on_written = on_written
        self._window = window_seconds
        self._clock = clock
        self._waiting: list[tuple[Finish, Job, float, BaseException | None]] = []
        self._oldest_start = 0.0

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, finish: Finish, job: Job, *, started: float, duration: float,
            error: BaseException | None = None) -> None:
        """An outcome to write; ``started`` is when its job began (``clock`` time)."""
        if not self._waiting:
            self._oldest_start = started
        self._waiting.append((finish, job, duration, error))

    def due(self) -> bool:
        """Whether the oldest waiting outcome's job started a window ago or more."""
        return bool(self._waiting) and self._clock() - self._oldest_start >= self._window

    def flush_if_due(self) -> None:
        if self.due():
            self.flush()

    def flush(self) -> Written:
        """Write every waiting outcome in one statement; each is then reported once."""
        if not self._waiting:
            return Written()
        waiting, self._waiting = self._waiting, []
        written = self._write([finish for finish, *_ in waiting])
        stale = set(written.stale)
        for finish, job, duration, error in waiting:
            self._on_written(Recorded(job, finish.outcome, finish.id in stale, duration, error))
        return written
