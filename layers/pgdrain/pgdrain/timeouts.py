"""Time limits for handlers: SIGALRM raises ``HandlerTimeout`` inside one that overruns.

An alarm stops the handler itself (unlike a watchdog thread, which would leave it running and
let a retry overlap it), and interrupts a blocking call (a sleep, a socket read without a
timeout). Signals reach only the main thread, which is where Lambda runs the handler;
elsewhere the limit cannot be enforced and the handler runs to its end.

``HandlerTimeout`` is a BaseException so that ``except Exception`` cannot swallow it, but a
handler can still catch it (``except BaseException``, a bare ``except:``) and run on. The limit
does not take that for an answer: after a short grace for ``finally`` blocks, it raises again
every few milliseconds, and from then on also on the next line the handler's frames execute
(a trace function), which leaves an ``except BaseException: pass`` by its own ``pass``. A
handler that returned after its limit fired is recorded as timed out, not done.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any

from .errors import HandlerTimeout

# After a limit fires, the handler has this long to unwind (its finally blocks run) before
# the limit insists.
GRACE_SECONDS = 0.2
# How often it insists.
INSIST_SECONDS = 0.02


def can_interrupt() -> bool:
    """Whether a time limit can stop a handler from this thread."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


class _Deferral:
    """Whether the drain's thread is in an ``alarm_deferred`` block, and whether an alarm
    came meanwhile. The alarm's Python handler runs on that thread only, between two
    bytecodes of whatever it runs: it looks here before it raises."""

    __slots__ = ("depth", "missed")

    def __init__(self) -> None:
        self.depth = 0
        self.missed = False


_DEFERRAL = _Deferral()


@contextmanager
def alarm_deferred() -> Iterator[None]:
    """Hold a time limit's HandlerTimeout off until the block ends, then raise it: around
    the drain's own I/O that a handler calls (a checkpoint saved on the drain's connection),
    which an exception raised mid-message would leave unusable. The block must be bounded by
    other means (the statement's deadline).

    Not by blocking SIGALRM: the kernel would hand the signal to another thread, and Python
    would still run the handler on this one, between two bytecodes of the driver."""
    if not can_interrupt():
        yield
        return
    _DEFERRAL.depth += 1
    try:
        yield
    finally:
        _DEFERRAL.depth -= 1
        if not _DEFERRAL.depth and _DEFERRAL.missed:
            _DEFERRAL.missed = False
            signal.raise_signal(signal.SIGALRM)  # the handler runs (and raises) right here


class TimeLimits:
    """Holds the SIGALRM handler for a drain; ``limit(seconds)`` bounds one handler call.

    The handler is installed once per drain rather than per job: each job then costs one
    timer set and one reset. ``on_stuck`` is called once if a handler is still running
    ``stuck_after`` seconds after its limit fired, despite every HandlerTimeout since.
    """

    def __init__(self, *, on_stuck: Callable[[float], None] | None = None,
                 stuck_after: float = 1.0) -> None:
        self.active = False
        self._current: _Limit | None = None
        self._armed = False
        """The timer may be set: a limit began and did not reset it on its way out."""
        self._previous: object = None
        self._on_stuck = on_stuck
        self._stuck_after = stuck_after

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

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if _DEFERRAL.depth:
            _DEFERRAL.missed = True
            return
        limit = self._current
        if limit is None:  # a late alarm for a block that just finished
            return
        if limit.fired_at is not None and not limit.in_handler(frame):
            return  # the handler is done: the block is on its way out
        now = time.monotonic()
        if limit.fired_at is None:
            limit.fired_at = now
            signal.setitimer(signal.ITIMER_REAL, GRACE_SECONDS)
        else:
            signal.setitimer(signal.ITIMER_REAL, INSIST_SECONDS)
            limit.insist(frame)
            if (not limit.reported_stuck and self._on_stuck is not None
                    and now - limit.fired_at >= self._stuck_after):
                limit.reported_stuck = True
                self._on_stuck(now - limit.fired_at)
        raise HandlerTimeout(f"timed out after {limit.seconds:g} s")

    def limit(self, seconds: float) -> _Limit:
        return _Limit(self, seconds)

    def disarm(self) -> None:
        """Stop the current limit's timer and tracing, whatever state it was left in (after
        a limit that ended as it should, there is nothing to stop: no system call)."""
        if self.active:
            self._current = None
            if self._armed:
                signal.setitimer(signal.ITIMER_REAL, 0)
                self._armed = False
            if sys.gettrace() is not None:
                sys.settrace(None)


class _Limit:
    __slots__ = ("_caller", "_tracer", "fired_at", "limits", "reported_stuck", "seconds")

    def __init__(self, limits: TimeLimits, seconds: float):
        self.limits = limits
        self.seconds = seconds
        self.fired_at: float | None = None
        self.reported_stuck = False
        self._caller: FrameType | None = None
        self._tracer: Callable[..., Any] | None = None

    @property
    def fired(self) -> bool:
        """Whether the limit ran out while the handler ran (it may have swallowed that)."""
        return self.fired_at is not None

    def __enter__(self) -> _Limit:
        if self.limits.active:
            self._caller = sys._getframe(1)
            self.limits._current = self
            self.limits._armed = True
            signal.setitimer(signal.ITIMER_REAL, max(self.seconds, 0.001))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.limits.active:
            self.limits._current = None
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.limits._armed = False
            if self._tracer is not None:
                sys.settrace(None)
                self._tracer = None
            self._caller = None

    def in_handler(self, frame: FrameType | None) -> bool:
        """Whether ``frame`` is the handler's (below the ``with`` block, not its exit)."""
        if frame is None or frame is self._caller or frame.f_code is _EXIT_CODE:
            return False
        while frame is not None:
            if frame.f_back is self._caller:
                return True
            frame = frame.f_back
        return False

    def insist(self, frame: FrameType | None) -> None:
        """Trace the handler's frames (those below the ``with`` block's own) so that the next
        line any of them runs raises HandlerTimeout.

        A trace function that raises is removed by Python: each alarm installs it again.
        """
        caller = self._caller
        message = f"timed out after {self.seconds:g} s"

        def tracer(traced: FrameType, event: str, arg: Any) -> Any:
            if event == "call" and getattr(traced.f_back, "f_trace", None) is not tracer:
                return None  # a frame the drain's own code called, not the handler
            if event in ("line", "call"):
                raise HandlerTimeout(message)
            return tracer  # an exception unwinding, a return: keep watching

        self._tracer = tracer
        while frame is not None and frame is not caller:
            frame.f_trace = tracer
            frame.f_trace_lines = True
            frame = frame.f_back
        sys.settrace(tracer)


_EXIT_CODE = _Limit.__exit__.__code__
