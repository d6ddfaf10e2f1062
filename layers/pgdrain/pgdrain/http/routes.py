"""The HTTP routes, once: what the functions serve, what their 404 and 405 answers list, what the
OpenAPI document describes, and what the SAM template must route (a test compares them).

Paths are written as API Gateway and OpenAPI write them (``/jobs/{id}``). A request's path is
matched here, not by Powertools' resolver: its patterns take only some characters in a
parameter, so a queue named with an ESC or U+202E (names ``POST /jobs`` accepts) matched no
route, and it hands the parameter over still percent-encoded (``a%20b``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    operation_id: str
    summary: str
    function: str
    """The Lambda function that serves it (``functions/<function>/app.py``)."""

    def parameters(self, segments: Sequence[str]) -> dict[str, str] | None:
        """The path parameters if a path of these (decoded) ``segments`` is this route's,
        else None: a ``{param}`` is one non-empty segment, whatever it holds."""
        template = self.path.split("/")[1:]
        if len(template) != len(segments):
            return None
        found = {}
        for expected, segment in zip(template, segments, strict=True):
            if expected.startswith("{"):
                if not segment:
                    return None
                found[expected[1:-1]] = segment
            elif segment != expected:
                return None
        return found


ROUTES: tuple[Route, ...] = (
    Route("POST", "/jobs", "enqueueJobs", "Enqueue one job, or a batch in one transaction",
          "enqueue"),
    Route("POST", "/jobs/cancel", "cancelJobs",
          "Cancel every job a filter selects: count first, then act up to the id counted",
          "enqueue"),
    Route("POST", "/jobs/requeue", "requeueJobs",
          "Requeue every failed job a filter selects: count first, then act up to the id "
          "counted", "enqueue"),
    Route("POST", "/jobs/delete", "deleteJobs",
          "Delete every job a filter selects (never a running one): count first, then act up "
          "to the id counted", "enqueue"),
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
    Route("POST", "/signals/{name}", "sendSignal",
          "Send a signal: the jobs waiting for it become due with its payload", "enqueue"),
    Route("GET", "/schedules", "listSchedules",
          "Every schedule: declared by the job modules and made at run time", "enqueue"),
    Route("GET", "/schedules/{name}", "getSchedule", "A schedule made at run time",
          "enqueue"),
    Route("PUT", "/schedules/{name}", "setSchedule",
          "Create or change a schedule made at run time (cron, zone, job type, payload)",
          "enqueue"),
    Route("DELETE", "/schedules/{name}", "deleteSchedule",
          "Delete a schedule made at run time (the jobs it enqueued stay)", "enqueue"),
    Route("POST", "/schedules/{name}/pause", "pauseSchedule",
          "Pause a schedule made at run time: no tick enqueues until it is resumed", "enqueue"),
    Route("POST", "/schedules/{name}/resume", "resumeSchedule",
          "Resume a paused schedule from its next tick (missed ticks are not run)",
          "enqueue"),
    Route("POST", "/drain", "drainNow", "Start a drain now (the drain function)", "drain"),
)


@dataclass(frozen=True, slots=True)
class Match:
    """The route a request is for, and its path parameters (decoded)."""

    route: Route
    params: dict[str, str]


def routes_of(function: str) -> tuple[Route, ...]:
    return tuple(r for r in ROUTES if r.function == function)


def match(method: str, path: str, function: str) -> Match | None:
    """The route of ``function`` that serves ``method`` on ``path``, or None (then
    ``allowed_methods`` says whether it is a 405 or a 404)."""
    segments = path_segments(path)
    for route in routes_of(function):
        if route.method == method.upper():
            found = route.parameters(segments)
            if found is not None:
                return Match(route, found)
    return None


def allowed_methods(path: str, function: str) -> list[str]:
    """The methods ``function`` serves on ``path`` (for a 405's ``Allow``); [] if none."""
    segments = path_segments(path)
    return sorted({r.method for r in routes_of(function) if r.parameters(segments) is not None})


def path_segments(path: str) -> list[str]:
    """A request path's segments, each percent-decoded after the split (so ``%2F`` stays in
    its segment) and one trailing slash ignored, as API Gateway ignores it.

    API Gateway (REST) delivers ``path`` percent-encoded; a hand-written event may hold the
    characters themselves, which pass as they are. Bytes that are not UTF-8 decode to lone
    surrogates (``surrogateescape``), which no name or id check accepts: a U+FFFD in their
    place would be a valid, and different, queue name."""
    segments = path.removeprefix("/").split("/")
    if len(segments) > 1 and segments[-1] == "":
        segments.pop()
    return [unquote(s, errors="surrogateescape") for s in segments]
