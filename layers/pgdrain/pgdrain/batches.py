"""Batch handlers: ``@pgdrain.job("index-docs", batch_size=100, batch_window=5)`` is called
with a list of up to 100 jobs of its type at once, and says how each ended.

The return protocol (``item_outcomes``, pure):

- ``None``: every item is done.
- a mapping ``{job.id: result}``: every item is done, those named with that result.
- ``BatchResult(results={...}, failures={job.id: error})``: the items in ``failures`` failed
  and retry alone, each with its own attempts, backoff and ``retry_on`` (an exception
  instance, or a message: a ``BatchItemFailed``); ``pgdrain.Snooze``, ``Discard``,
  ``WaitFor`` given as an item's error act on that item alone. The rest are done.

Raising fails every item (each with its own attempts); raising ``Snooze`` (or ``Discard``,
``WaitFor``...) applies it to every item. A report that names a job not in the batch, or an
item both done with a result and failed, is the batch's error: every item fails with it.

Light: the drain imports it only when a batch handler is registered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .models import Job


class BatchItemFailed(Exception):
    """An item a batch handler reported failed with a message (not an exception)."""


class BatchReportError(Exception):
    """A batch handler's return value is not a report of its batch: every item fails."""


class JobBatch(list[Job]):
    """What a batch handler (and the middleware and hooks around it) receives: the list of
    its jobs, which also answers what code written for one job asks of it: ``job_type`` and
    ``queue`` (the batch's), ``id`` (its first job's) and ``ids`` (every job's)."""

    @property
    def job_type(self) -> str:
        return self[0].job_type

    @property
    def queue(self) -> str:
        return self[0].queue

    @property
    def id(self) -> int:
        return self[0].id

    @property
    def ids(self) -> list[int]:
        return [job.id for job in self]


@dataclass(frozen=True, slots=True)
class BatchResult:
    """A batch handler's per-item report: ``results`` by job id (the done items' results;
    an item not named is done without one), ``failures`` by job id (an exception, or a
    message)."""

    results: Mapping[int, Any] = field(default_factory=dict)
    failures: Mapping[int, BaseException | str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ItemOutcome:
    """How one item of a batch ended: done with ``result``, or failed with ``error``."""

    job: Job
    result: Any = None
    error: BaseException | None = None


def item_outcomes(jobs: Sequence[Job], value: Any) -> list[ItemOutcome]:
    """Each item's outcome from what the batch handler returned (see the module's docstring);
    BatchReportError when ``value`` is not a report of this batch."""
    if value is None:
        return [ItemOutcome(job) for job in jobs]
    if isinstance(value, BatchResult):
        results, failures = value.results, value.failures
    elif isinstance(value, Mapping):
        results, failures = value, {}
    else:
        raise BatchReportError(
            f"a batch handler returns None, a mapping {{job.id: result}} or a "
            f"pgdrain.BatchResult, not {type(value).__name__}")
    if not isinstance(results, Mapping) or not isinstance(failures, Mapping):
        raise BatchReportError("BatchResult's results and failures are mappings by job id")
    ids = {job.id for job in jobs}
    for what, named in (("results", results), ("failures", failures)):
        strangers = [k for k in named if isinstance(k, bool) or k not in ids]
        if strangers:
            shown = ", ".join(repr(k) for k in strangers[:5])
            raise BatchReportError(
                f"the batch handler's {what} name {shown}, not a job id of this batch "
                f"(its ids: {_ids(jobs)})")
    both = sorted(set(results) & set(failures))
    if both:
        raise BatchReportError(f"the batch handler reported jobs {both[:5]} both done (a "
                               "result) and failed")
    return [ItemOutcome(job, error=_error(failures[job.id])) if job.id in failures
            else ItemOutcome(job, results.get(job.id)) for job in jobs]


def _ids(jobs: Sequence[Job]) -> str:
    shown = ", ".join(str(job.id) for job in jobs[:10])
    return shown + (f", ... ({len(jobs)} in all)" if len(jobs) > 10 else "")


def _error(reported: Any) -> BaseException:
    if isinstance(reported, BaseException):
        return reported
    return BatchItemFailed(str(reported) if reported is not None else "failed")
