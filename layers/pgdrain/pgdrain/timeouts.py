"""Time limits for handlers: SIGALRM raises ``HandlerTimeout`` inside one that overruns.

An alarm stops the handler itself (unlike a watchdog thread, which would leave it running and
let a retry overlap it). Signals reach only the main thread, which is where Lambda runs the
handler; elsewhere the limit cannot be enforced and the handler runs to its end.
"""

from __future__ import annotations

import signal
import threading
from types import TracebackType

from .errors import HandlerTimeout


def can_interrupt() -> bool:
    """Whether a time limit can stop a handler from this thread."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


class TimeLimits:
    """Holds the SIGALRM handler for a drain; ``limit(seconds)`` bounds one handler call.

    The handler is installed once per drain rather than per job: each job then costs one
    timer set and one reset.
    """

    def __init__(self) -> None:
        self.active = False
        self._armed_for: float | None = None
        self._previous: object = None

    def __enter__(self) -> TimeLimits:
        if can_interrupt():
            self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
            self.active = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)  # type: ignore[arg-type]
            self.active = False

    def _on_alarm(self, signum: int, frame: object) -> None:
        seconds = self._armed_for
        if seconds is not None:  # not a late alarm for a block that just finished
            raise HandlerTimeout(f"timed out after {seconds:g} s")

    def limit(self, seconds: float) -> _Limit:
        return _Limit(self, seconds)


class _Limit:
    __slots__ = ("limits", "seconds")

    def __init__(self, limits: TimeLimits, seconds: float):
        self.limits = limits
        self.seconds = seconds

    def __enter__(self) -> None:
        if self.limits.active:
            self.limits._armed_for = self.seconds
            signal.setitimer(signal.ITIMER_REAL, max(self.seconds, 0.001))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.limits.active:
            self.limits._armed_for = None
            signal.setitimer(signal.ITIMER_REAL, 0)
