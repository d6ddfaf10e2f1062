"""``POST /jobs/cancel``, ``/jobs/requeue`` and ``/jobs/delete``: an action on every job a filter
selects (pgdrain.bulk), counted first.

The body is ``{"filter": {...}}``: the answer counts the jobs the filter selects among those
the action applies to and names the highest id counted (``upto``), and nothing changes. The same
body with that ``upto`` acts on those jobs (none enqueued since), a batch at a time, for as long
as the invocation's time allows; ``next_upto`` (null when it went through them all) is the
``upto`` to send again for the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import bulk
from ..db import Session
from ..models import MAX_JOB_ID
from .requests import ApiError, _json_object

OPERATIONS = {"cancelJobs": "cancel", "requeueJobs": "requeue", "deleteJobs": "delete"}
"""The routes' operation ids and their actions."""
BODY_FIELDS = ("filter", "upto", "batch")
MAX_SECONDS = 20.0
"""The longest one request acts (API Gateway answers 504 after 29 s)."""
COUNT_SECONDS = 5.0


def parse(body: str | None, *, base64_encoded: bool = False, content_type: str | None = None
          ) -> tuple[bulk.JobFilter, int | None, int]:
    """The filter, the ``upto`` (None: count only) and the batch of a bulk request; ApiError
    (400, 415, 422) naming what is wrong."""
    document = _json_object(body, base64_encoded, content_type, BODY_FIELDS, "a bulk action",
                            '{"filter": {...}, "upto": ID (to act)}')
    if not isinstance(document.get("filter"), dict):
        raise ApiError(422, "filter: give the filter, a JSON object ({} selects every job the "
                            "action applies to); fields: " + ", ".join(bulk.FILTER_FIELDS),
                       {"field": "filter"})
    try:
        match = bulk.job_filter(document["filter"])
    except bulk.InvalidFilter as exc:
        field = f"filter.{exc.field}" if exc.field else "filter"
        raise ApiError(422, f"{field}: {str(exc).split(': ', 1)[-1]}", {"field": field}
                       ) from None
    upto = document.get("upto")
    if upto is not None and (isinstance(upto, bool) or not isinstance(upto, int)
                             or not 0 <= upto <= MAX_JOB_ID):
        raise ApiError(422, "upto: a job id, as the count answered it", {"field": "upto"})
    batch = document.get("batch", bulk.BATCH)
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10_000:
        raise ApiError(422, "batch: an integer from 1 to 10000", {"field": "batch"})
    return match, upto, batch


def answer(session: Session, operation_id: str, match: bulk.JobFilter, upto: int | None,
           batch: int, time_left: Callable[[], float]) -> dict[str, Any]:
    """Count (no ``upto``), or act up to ``upto`` within half the time left."""
    action = bulk.action_named(OPERATIONS[operation_id])
    if upto is None:
        counted = bulk.count(session, action, match,
                             seconds=min(COUNT_SECONDS, time_left() / 4))
        return {"action": action.name, "count": counted.jobs, "complete": counted.complete,
                "upto": counted.upto, "statuses": list(action.statuses)}
    done = bulk.act(session, action, match, upto=upto, batch=batch,
                    seconds=max(0.5, min(MAX_SECONDS, time_left() / 2)))
    return {"action": action.name, "upto": upto, "jobs": done.jobs,
            "outcomes": dict(sorted(done.outcomes.items())), "next_upto": done.next_upto,
            "stopped": done.stopped}
