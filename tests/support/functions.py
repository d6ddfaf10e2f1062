"""Helpers for the function tests: the events in events/ and drain processes' output."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

EVENTS = Path(__file__).resolve().parents[2] / "events"


def load_event(name: str) -> dict:
    """An event file, exactly as `sam local invoke -e events/<name>` would pass it."""
    return json.loads((EVENTS / name).read_text())


def summary_of(process: subprocess.Popen, timeout: float = 60) -> dict:
    """Wait for a drain process and return the summary it printed."""
    output, _ = process.communicate(timeout=timeout)
    for line in output.splitlines():
        if line.startswith("SUMMARY "):
            return json.loads(line.removeprefix("SUMMARY "))
    raise AssertionError(f"the drain printed no summary (exit {process.returncode}):\n{output}")


@contextmanager
def killed_at_exit() -> Iterator[list[subprocess.Popen]]:
    """A list for the processes a fixture starts; any still running at exit is killed, and
    each is reaped (its pipes closed)."""
    started: list[subprocess.Popen] = []
    try:
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
            process.communicate()
