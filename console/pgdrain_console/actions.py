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

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgdrain import bulk, control
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
    action: bulk.Action
    """The library's action (pgdrain.bulk): the statuses it applies to, and what it runs."""

    @property
    def statuses(self) -> tuple[str, ...]:
        return self.action.statuses

    def run(self, conn: Any, ids: Sequence[int]) -> dict[int, str]:
        return self.action.run(conn, ids)


JOB_ACTIONS = {a.name: a for a in (
    JobAction("retry", "Retry", bulk.ACTIONS["requeue"]),
    JobAction("cancel", "Cancel", bulk.ACTIONS["cancel"]),
    JobAction("run_now", "Run now", bulk.ACTIONS["run_now"]),
    JobAction("delete", "Delete", bulk.ACTIONS["delete"]),
)}
_WORDS = {"not_requeued": "not requeued (not failed, or its dedupe key is held by a live job)"}


def summary(action: JobAction, outcomes: Mapping[int, str] | Counter[str]) -> str:
    """``cancel: 3 cancelled, 1 cancel_requested``: of each job's outcome (by id), or of
    outcomes counted."""
    counted = outcomes if isinstance(outcomes, Counter) else Counter(outcomes.values())
    if not counted:
        return f"{action.label}: no job matched"
    return f"{action.label}: " + ", ".join(
        f"{n:,} {_WORDS.get(outcome, outcome.replace('_', ' '))}"
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


def bulk_confirm(console: Console, request: Request) -> Response:
    action, chosen, problems = _bulk_request(request)
    if action is None or problems:
        return console.refusal("400 Bad Request", "; ".join(problems), signed_in=True)
    try:
        with console.connections.connection() as conn:
            counted = bulk.count(conn, action.action, chosen.match)
    except Exception as exc:
        return console.back("/jobs?" + chosen.query(), f"{action.label} not started: "
                            f"{describe(exc)}")
    return console.render("confirm.html", action=action, chosen=chosen, upto=counted.upto,
                          counted=counted.jobs, complete=counted.complete)


def bulk_run(console: Console, request: Request) -> Response:
    action, chosen, problems = _bulk_request(request)
    upto_text = request.form.get("upto", "")
    if not (upto_text.isascii() and upto_text.isdigit() and len(upto_text) <= 19):
        problems.append("upto is a job id")
    if action is None or problems:
        return console.refusal("400 Bad Request", "; ".join(problems), signed_in=True)
    done = bulk.Acted()
    try:
        with console.connections.connection(statement_ms=ACTION_STATEMENT_MS) as conn:
            done = bulk.act(conn, action.action, chosen.match, upto=int(upto_text),
                            batch=BULK_BATCH, seconds=BULK_SECONDS)
    except Exception as exc:  # what was done stays done: say so, and what stopped it
        return _bulk_back(console, chosen, f"{action.label}: then it failed: "
                          f"{describe(exc)} (run it again for the rest)")
    message = summary(action, done.outcomes)
    if done.stopped == "time" and done.next_upto is not None:
        message += (f"; stopped after {BULK_SECONDS:.0f} s at job {done.next_upto + 1}: run "
                    "it again for the rest")
    elif done.stopped == "busy":
        message += (f"; stopped at job {done.next_upto}: drains held its jobs through every "
                    "try; run it again for the rest")
    return _bulk_back(console, chosen, message)


def _bulk_back(console: Console, chosen: filters.Filters, message: str) -> Response:
    query = chosen.query()
    return console.back("/jobs" + (f"?{query}" if query else ""), message)

