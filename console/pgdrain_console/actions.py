"""The console's actions (POST, with ``--allow-actions``): on one job, on a queue, and on
everything a filter selects. Each runs the library call the CLI runs for the same command and
sends the browser back with what it did.

A bulk action is two requests. The first counts what the filter selects among the jobs the
action applies to (retry: the failed ones; cancel: pending, running or waiting; run now:
pending; delete: all but running) and asks to confirm, naming the highest id it counted. The
second acts on those jobs, up to that id, a batch of ``BULK_BATCH`` at a time: a job enqueued
in between is not touched. It stops after ``BULK_SECONDS`` and says how far it got; the same
confirmation goes on from there.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pgdrain import browse, control, operator_store
from pgdrain.cli import arguments

from . import filters
from .connections import ACTION_STATEMENT_MS
from .pages import describe
from .web import Request, Response

if TYPE_CHECKING:
    from .app import Console

BULK_BATCH = 1000
BULK_SECONDS = 60.0


@dataclass(frozen=True)
class JobAction:
    name: str
    label: str
    statuses: tuple[str, ...]
    """The statuses it applies to (what a bulk action counts and takes)."""
    run: Callable[[Any, Sequence[int]], dict[int, str]]


def _retry(conn: Any, ids: Sequence[int]) -> dict[int, str]:
    requeued = set(operator_store.requeue_failed(conn, ids=list(ids)))
    return {i: "requeued" if i in requeued else "not requeued (not failed, or its dedupe key "
            "is held by a live job)" for i in ids}


JOB_ACTIONS = {a.name: a for a in (
    JobAction("retry", "Retry", ("failed",), _retry),
    JobAction("cancel", "Cancel", ("pending", "running", "waiting"), operator_store.cancel),
    JobAction("run_now", "Run now", ("pending",), operator_store.run_now),
    JobAction("delete", "Delete", ("pending", "waiting", "done", "failed", "cancelled"),
              operator_store.delete_jobs),
)}


def summary(action: JobAction, outcomes: dict[int, str]) -> str:
    """``cancel: 3 cancelled, 1 cancel_requested``."""
    if not outcomes:
        return f"{action.label}: no job matched"
    counted = Counter(outcomes.values())
    return f"{action.label}: " + ", ".join(f"{n:,} {outcome.replace('_', ' ')}"
                                          for outcome, n in sorted(counted.items()))


def on_job(console: Console, request: Request, ident: int) -> Response:
    action = JOB_ACTIONS.get(request.form.get("action", ""))
    if action is None:
        return console.refusal("400 Bad Request", "the action is one of " +
                               ", ".join(JOB_ACTIONS), signed_in=True)
    try:
        with console.connections.connection() as conn:
            outcomes = action.run(conn, [ident])
    except Exception as exc:
        return console.back(f"/jobs/{ident}", f"{action.label} failed: {describe(exc)}")
    location = "/jobs" if action.name == "delete" and outcomes.get(ident) == "deleted" \
        else f"/jobs/{ident}"
    return console.back(location, f"job {ident}: {summary(action, outcomes)}")


def on_queue(console: Console, request: Request) -> Response:
    form = request.form
    queue, what = form.get("queue", ""), form.get("action", "")
    try:
        with console.connections.connection() as conn:
            if what == "pause":
                control.pause(conn, queue)
                message = f"queue {queue!r} paused: drains claim none of its jobs"
            elif what == "resume":
                control.resume(conn, queue)
                message = f"queue {queue!r} resumed"
            elif what == "set":
                cap, rate = _limits(form)
                row = control.set_queue(conn, queue, max_running=cap, rate=rate)
                message = (f"queue {queue!r}: at most {row['max_running'] or 'any number'} "
                           f"running, rate {row['rate'] or 'unlimited'}")
            else:
                return console.refusal("400 Bad Request", "the queue action is pause, resume "
                                       "or set", signed_in=True)
    except _Refused as exc:
        message = f"queue {queue!r} not changed: {exc}"
    except Exception as exc:
        message = f"queue {queue!r} not changed: {describe(exc)}"
    return console.back("/", message)


class _Refused(Exception):
    pass


def _limits(form: dict[str, str]) -> tuple[int | None, str | None]:
    """The cap and the rate of the queue form: blank lifts them, as ``none`` does."""
    import argparse

    try:
        cap = arguments.cap(form.get("max_running", "").strip() or "none")
        rate = arguments.rate(form.get("rate", "").strip() or "none")
    except argparse.ArgumentTypeError as exc:
        raise _Refused(str(exc)) from None
    return cap, rate


def _bulk_request(request: Request) -> tuple[JobAction | None, filters.Filters, list[str]]:
    action = JOB_ACTIONS.get(request.form.get("action", ""))
    chosen = filters.read(request.form)
    problems = list(chosen.problems)
    if action is None:
        problems.append("the action is one of " + ", ".join(JOB_ACTIONS))
    return action, chosen, problems


def _applying(action: JobAction, chosen: filters.Filters) -> browse.JobFilter:
    """The filter narrowed to the statuses the action applies to."""
    return replace(chosen.match, statuses=action.statuses)


def bulk_confirm(console: Console, request: Request) -> Response:
    action, chosen, problems = _bulk_request(request)
    if action is None or problems:
        return console.refusal("400 Bad Request", "; ".join(problems), signed_in=True)
    try:
        with console.connections.connection() as conn:
            _, high = browse.id_range(conn)
            counted, complete = (0, True) if high is None else browse.count_matching(
                conn, _applying(action, chosen), upto=high)
    except Exception as exc:
        return console.back("/jobs?" + chosen.query(), f"{action.label} not started: "
                            f"{describe(exc)}")
    return console.render("confirm.html", action=action, chosen=chosen, upto=high or 0,
                          counted=counted, complete=complete)


def bulk_run(console: Console, request: Request) -> Response:
    action, chosen, problems = _bulk_request(request)
    upto_text = request.form.get("upto", "")
    if not (upto_text.isascii() and upto_text.isdigit() and len(upto_text) <= 19):
        problems.append("upto is a job id")
    if action is None or problems:
        return console.refusal("400 Bad Request", "; ".join(problems), signed_in=True)
    match, upto = _applying(action, chosen), int(upto_text)
    outcomes: dict[int, str] = {}
    stopped_at = None
    started = time.monotonic()
    try:
        with console.connections.connection(statement_ms=ACTION_STATEMENT_MS) as conn:
            for ids in browse.matching_ids(conn, match, upto=upto, batch=BULK_BATCH):
                outcomes.update(action.run(conn, ids))
                if time.monotonic() - started >= BULK_SECONDS:
                    stopped_at = ids[-1] - 1
                    break
    except Exception as exc:  # what was done stays done: say so, and what stopped it
        return _bulk_back(console, chosen, f"{summary(action, outcomes)}; then it failed: "
                          f"{describe(exc)}")
    message = summary(action, outcomes)
    if stopped_at is not None:
        message += (f"; stopped after {BULK_SECONDS:.0f} s at job {stopped_at + 1}: run it "
                    "again for the rest")
    return _bulk_back(console, chosen, message)


def _bulk_back(console: Console, chosen: filters.Filters, message: str) -> Response:
    query = chosen.query()
    return console.back("/jobs" + (f"?{query}" if query else ""), message)

