"""The HTTP routes, once: what the functions serve, what their 404 and 405 answers list, what the
OpenAPI document describes, and what the SAM template must route (a test compares them).

Paths are written as API Gateway and OpenAPI write them (``/jobs/{id}``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    operation_id: str
    summary: str
    function: str
    """The Lambda function that serves it (``functions/<function>/app.py``)."""

    @property
    def pattern(self) -> re.Pattern[str]:
        """The path as a regular expression: a ``{param}`` is one non-empty segment."""
        parts = re.split(r"\{[A-Za-z_]+\}", self.path)
        return re.compile("^" + "([^/]+)".join(map(re.escape, parts)) + "/?$")

    @property
    def powertools_path(self) -> str:
        """The path in Powertools' resolver syntax (``/jobs/<id>``)."""
        return re.sub(r"\{([A-Za-z_]+)\}", r"<\1>", self.path)


ROUTES: tuple[Route, ...] = (
    Route("POST", "/jobs", "enqueueJobs", "Enqueue one job, or a batch in one transaction",
          "enqueue"),
    Route("GET", "/jobs/{id}", "getJob", "A job's state, lease and error history", "enqueue"),
    Route("POST", "/jobs/{id}/retry", "retryJob",
          "Requeue a failed job with a fresh set of attempts, due now", "enqueue"),
    Route("POST", "/jobs/{id}/cancel", "cancelJob",
          "Cancel a job: pending, it never runs; running, its attempt ends cancelled",
          "enqueue"),
    Route("POST", "/queues/{queue}/pause", "pauseQueue",
          "Pause a queue: no drain claims its jobs; it still accepts them", "enqueue"),
    Route("POST", "/queues/{queue}/resume", "resumeQueue",
          "Resume a paused queue: drains claim its jobs again", "enqueue"),
    Route("PUT", "/queues/{queue}", "setQueue",
          "Set a queue's concurrency cap (max_running, null for none)", "enqueue"),
    Route("POST", "/drain", "drainNow", "Start a drain now (the drain function)", "drain"),
)


def routes_of(function: str) -> tuple[Route, ...]:
    return tuple(r for r in ROUTES if r.function == function)


def allowed_methods(path: str, function: str) -> list[str]:
    """The methods ``function`` serves on ``path`` (for a 405's ``Allow``); [] if none."""
    return sorted({r.method for r in routes_of(function) if r.pattern.match(path)})
