"""The drain runs a job whose enqueuer was traced inside that trace (pgdrain.trace_context).

For an X-Ray context, it sends the X-Ray daemon (``AWS_XRAY_DAEMON_ADDRESS``, which Lambda
sets for a traced function) a segment in the enqueuer's trace, a child of the enqueuing
segment: ``queued`` (from the enqueue, or from when a retry became due, to the start) and
``run`` (the handler, with its error), annotated with the job and the drain's own trace id.
The segment document goes over UDP as the SDK would send it, so it works with or without
``PGDRAIN_TRACING``'s X-Ray SDK and imports nothing (the SDK cannot open a segment inside
Lambda, only subsegments of the function's own). For a W3C ``traceparent``, when the
application loaded OpenTelemetry, it starts a consumer span that is a child of the
enqueuer's span and linked to whatever span was current in the drain (its own trace), with a
``pgdrain.queued`` span for the wait; the handler's own spans nest under it.

Only a job that carries a context pays: the drain checks ``job.trace_context`` and calls
``around`` for it alone. A span that cannot be sent is dropped (traces are best effort); the
job's outcome never depends on it.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import Any

from .models import Job
from .registry import Handler
from .trace_context import RUNNING_JOB, XRAY_ENV, traceparent_parts, xray_parts

log = logging.getLogger(__name__)

DAEMON_ENV = "AWS_XRAY_DAEMON_ADDRESS"
_HEADER = b'{"format": "json", "version": 1}\n'
_socket: socket.socket | None = None


def around(handler: Handler, jobs: Sequence[Job]) -> Handler:
    """``handler`` run inside the trace of each of ``jobs`` (one job, or a batch's) that
    carries one, or ``handler`` itself when there is nowhere to send a span (no daemon, no
    OpenTelemetry) or no stored context decodes."""
    traced = [(job, context) for job in jobs if (context := _context(job)) is not None]
    daemon = (daemon_address(os.environ.get(DAEMON_ENV))
              if any("xray" in context for _, context in traced) else None)
    otel = ("opentelemetry.trace" in sys.modules
            and any("traceparent" in context for _, context in traced))
    if daemon is None and not otel:
        return handler
    func = handler.func

    def spans() -> Any:
        return _spans(traced, daemon, otel)

    if handler.is_async:
        async def run_async(*args: Any) -> Any:
            with spans():
                return await func(*args)

        return dataclasses.replace(handler, func=run_async)

    def run(*args: Any) -> Any:
        with spans():
            return func(*args)

    return dataclasses.replace(handler, func=run)


def _context(job: Job) -> dict[str, Any] | None:
    try:
        context = json.loads(job.trace_context or "null")
    except ValueError:
        return None
    return context if isinstance(context, dict) and context else None


@contextmanager
def _spans(traced: list[tuple[Job, dict[str, Any]]], daemon: tuple[str, int] | None,
           otel: bool) -> Iterator[None]:
    started = time.time()
    error: BaseException | None = None
    # Each X-Ray job's segment and run subsegment ids: a segment per job, in its own trace.
    segments = [(job, str(context["xray"]), (_segment_id(), _segment_id()))
                for job, context in traced if "xray" in context] if daemon else []
    with ExitStack() as stack:
        if otel:
            stack.enter_context(_otel_span(
                [(job, context) for job, context in traced if "traceparent" in context],
                started))
        if segments:  # what the handler enqueues joins the (first) job's trace
            trace_id, _ = xray_parts(segments[0][1])
            token = RUNNING_JOB.set(f"Root={trace_id};Parent={segments[0][2][1]};Sampled=1")
            stack.callback(RUNNING_JOB.reset, token)
        try:
            yield
        except BaseException as exc:
            error = exc
            raise
        finally:
            if daemon is not None:
                ended, drain = time.time(), os.environ.get(XRAY_ENV)
                for job, header, ids in segments:
                    send(daemon, xray_segment(job, header, started, ended, error, drain, ids))


def daemon_address(value: str | None) -> tuple[str, int] | None:
    """The daemon's UDP address from ``AWS_XRAY_DAEMON_ADDRESS`` (``host:port``, or
    ``udp:host:port tcp:host:port``), or None."""
    if not value:
        return None
    for part in value.split():
        if part.startswith("tcp:"):
            continue
        host, _, port = part.removeprefix("udp:").rpartition(":")
        if host and port.isdigit() and 0 < int(port) < 65536:
            return host.strip("[]"), int(port)
    return None


def xray_segment(job: Job, header: str, started: float, ended: float,
                 error: BaseException | None, drain_header: str | None,
                 ids: tuple[str, str] | None = None) -> dict[str, Any]:
    """The segment document of one attempt, a child of the enqueuing segment; ``ids``: the
    segment's and its ``run`` subsegment's (new ones if None)."""
    trace_id, parent_id = xray_parts(header)
    segment_id, run_id = ids or (_segment_id(), _segment_id())
    since = _queued_since(job)
    begin = min(since, started) if since is not None else started
    run: dict[str, Any] = {"id": run_id, "name": "run", "start_time": started,
                           "end_time": ended}
    if error is not None:
        run["fault"] = True
        run["cause"] = {"exceptions": [{"id": _segment_id(), "type": type(error).__name__,
                                        "message": str(error)[:1000]}]}
    subsegments = [run]
    if since is not None and since < started:
        subsegments.insert(0, {"id": _segment_id(), "name": "queued", "start_time": since,
                               "end_time": started})
    annotations: dict[str, Any] = {"job_id": job.id, "job_type": job.job_type[:250],
                                   "queue": job.queue[:250], "attempt": job.attempts}
    if drain_header and drain_header.startswith("Root="):
        annotations["drain_trace_id"] = drain_header.split(";")[0].removeprefix("Root=")
    segment: dict[str, Any] = {
        "name": _segment_name(job.job_type), "id": segment_id, "trace_id": trace_id,
        "parent_id": parent_id, "start_time": begin, "end_time": ended,
        "origin": "pgdrain::Job", "annotations": annotations, "subsegments": subsegments}
    if error is not None:
        segment["fault"] = True
    return segment


def send(address: tuple[str, int], segment: dict[str, Any]) -> None:
    """One segment document to the daemon over UDP; dropped (logged at debug) if it cannot
    go. Never blocks: a datagram."""
    global _socket
    try:
        if _socket is None:
            family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
            _socket = socket.socket(family, socket.SOCK_DGRAM)
            _socket.setblocking(False)
            atexit.register(_socket.close)  # one for the process, as the SDK keeps one
        _socket.sendto(_HEADER + json.dumps(segment, separators=(",", ":"),
                                            default=str).encode(), address)
    except OSError as exc:
        log.debug("X-Ray segment for job %s not sent: %s", segment.get("annotations"), exc)


@contextmanager
def _otel_span(traced: list[tuple[Job, dict[str, Any]]], started: float) -> Iterator[None]:
    """A consumer span, a child of the first job's enqueuer and linked to every other job's
    and to the span current in the drain, after a ``pgdrain.queued`` span per job."""
    from opentelemetry import trace  # loaded already: around() checked sys.modules
    from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
    from opentelemetry.trace.span import TraceState

    def remote(context: dict[str, Any]) -> Any:
        trace_id, span_id = traceparent_parts(str(context["traceparent"]))
        state = (TraceState.from_header([context["tracestate"]])
                 if context.get("tracestate") else None)
        return SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED), trace_state=state)

    parents = [remote(context) for _, context in traced]
    current = trace.get_current_span().get_span_context()
    links = [Link(p) for p in parents[1:]] + ([Link(current)] if current.is_valid else [])
    tracer = trace.get_tracer("pgdrain")
    first = traced[0][0]
    attributes: dict[str, str | int] = {
        "messaging.system": "pgdrain", "messaging.operation.type": "process",
        "messaging.destination.name": first.queue, "messaging.message.id": str(first.id),
        "pgdrain.job_type": first.job_type, "pgdrain.attempt": first.attempts}
    if len(traced) > 1:
        attributes["messaging.batch.message_count"] = len(traced)
    for (job, _), parent in zip(traced, parents, strict=True):
        since = _queued_since(job)
        if since is not None and since < started:
            tracer.start_span("pgdrain.queued",
                              context=trace.set_span_in_context(NonRecordingSpan(parent)),
                              start_time=int(since * 1e9),
                              attributes={**attributes, "messaging.message.id": str(job.id)}
                              ).end(end_time=int(started * 1e9))
    with tracer.start_as_current_span(
            f"pgdrain.job {first.job_type}",
            context=trace.set_span_in_context(NonRecordingSpan(parents[0])),
            kind=SpanKind.CONSUMER, links=links, attributes=attributes):
        yield


def _queued_since(job: Job) -> float | None:
    """When this attempt's wait began: the enqueue for a first attempt, else when the retry
    became due; None for a time Python cannot hold (plain SQL's ``-infinity``)."""
    since: Any = job.created_at if job.attempts <= 1 else job.run_at
    return since.timestamp() if isinstance(since, datetime) else None


def _segment_name(job_type: str) -> str:
    # X-Ray names: up to 200 characters of letters, digits, spaces and _.:/%&#=+\-@
    allowed = "".join(c if c.isalnum() or c in " _.:/%&#=+\\-@" else "_" for c in job_type)
    return f"pgdrain {allowed}"[:200]


def _segment_id() -> str:
    return os.urandom(8).hex()

