"""A time limit for a handler: SIGALRM raises ``HandlerTimeout`` inside it when it overruns.

An alarm stops the handler itself (unlike a watchdog thread, which would leave it running and
let a retry overlap it). Signals reach only the main thread, which is where Lambda runs the
handler; elsewhere the limit cannot be enforced and the handler runs to its end.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import HandlerTimeout


def can_interrupt() -> bool:
    """Whether ``time_limit`` can stop a handler from this thread."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise HandlerTimeout in the block if it runs longer than ``seconds``."""
    if not can_interrupt():
        yield
        return
    armed = True

    def on_alarm(signum: int, frame: object) -> None:
        if armed:  # the block may have just finished as the timer fired
            raise HandlerTimeout(f"timed out after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
        armed = False
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
