"""The caller's trace context, stored with the jobs it enqueues: X-Ray's trace header and W3C
``traceparent`` (with ``tracestate``).

The enqueue (library and API) calls ``capture``: inside a traced job's run, that job's
trace (``RUNNING_JOB``); else Lambda's ``_X_AMZN_TRACE_ID`` (the invocation's X-Ray header;
its ``Parent`` is the function's segment), then the API request's headers; and, when the
application already loaded OpenTelemetry, its current span. Only a sampled context is kept
(an unsampled one would show nothing anywhere), checked against the header formats, so a job
whose caller was not traced stores NULL and costs nothing. The drain (pgdrain.job_spans)
runs the job under it.

Nothing here imports OpenTelemetry: it is read only if the application imported it already.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

XRAY_ENV = "_X_AMZN_TRACE_ID"
"""Set by Lambda for each invocation (and by the X-Ray SDK's users elsewhere)."""

RUNNING_JOB: ContextVar[str | None] = ContextVar("pgdrain_running_job_xray", default=None)
"""While the drain runs a traced job (pgdrain.job_spans): the X-Ray header of its ``run``
subsegment, so that the jobs its handler enqueues join the job's trace, not the drain's."""

_XRAY = re.compile(r"Root=(1-[0-9a-f]{8}-[0-9a-f]{24})(?:;Parent=([0-9a-f]{16}))?"
                   r"(?:;Sampled=([01?]))?(?:;.*)?\Z")
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})\Z")
_TRACESTATE_MAX = 512


def capture(headers: Mapping[str, str] | None = None,
            environ: Mapping[str, str] = os.environ) -> dict[str, str] | None:
    """The sampled trace context to store with a job, or None. ``headers`` (lower-case names)
    are an API request's; a header that does not parse is ignored, never an error."""
    found: dict[str, str] = {}
    xray = (xray_header(RUNNING_JOB.get()) or xray_header(environ.get(XRAY_ENV))
            or xray_header((headers or {}).get("x-amzn-trace-id")))
    if xray is not None:
        found["xray"] = xray
    parent = traceparent((headers or {}).get("traceparent")) or _opentelemetry_current()
    if parent is not None:
        found["traceparent"] = parent
        state = (headers or {}).get("tracestate")
        if state and len(state) <= _TRACESTATE_MAX and state.isprintable():
            found["tracestate"] = state
    return found or None


def xray_header(value: str | None) -> str | None:
    """``value`` as a sampled X-Ray trace header with a parent (``Root=...;Parent=...;
    Sampled=1``), or None."""
    if not value or len(value) > 256:
        return None
    match = _XRAY.match(value.strip())
    if match is None or match[2] is None or match[3] != "1":
        return None
    return f"Root={match[1]};Parent={match[2]};Sampled=1"


def traceparent(value: str | None) -> str | None:
    """``value`` as a sampled W3C traceparent of version 00 (or a later one read as 00), or
    None for one that does not parse, is all zeros or not sampled."""
    if not value or len(value) > 128:
        return None
    match = _TRACEPARENT.match(value.strip().lower())
    if match is None or match[1] == "ff" or set(match[2]) == {"0"} or set(match[3]) == {"0"}:
        return None
    if not int(match[4], 16) & 1:
        return None
    return f"00-{match[2]}-{match[3]}-01"


def xray_parts(header: str) -> tuple[str, str]:
    """The trace id and the parent id of a header ``xray_header`` kept."""
    root, parent = header.split(";")[:2]
    return root.removeprefix("Root="), parent.removeprefix("Parent=")


def traceparent_parts(header: str) -> tuple[str, str]:
    """The trace id and the parent span id of a traceparent ``traceparent`` kept."""
    _, trace_id, span_id, _ = header.split("-")
    return trace_id, span_id


def _opentelemetry_current() -> str | None:
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    context: Any = trace.get_current_span().get_span_context()
    if not context.is_valid or not context.trace_flags.sampled:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-01"
