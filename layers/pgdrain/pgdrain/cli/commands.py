"""The operator's commands: each reads its arguments, talks to the database through ``store``
and prints a table (or JSON with ``--json``). Each returns the process's exit status."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, TextIO

from .. import store
from . import output
from .output import Column

STATS_COLUMNS: Sequence[Column] = (
    ("queue", "QUEUE"), ("job_type", "TYPE"), ("due", "DUE"), ("scheduled", "SCHEDULED"),
    ("running", "RUNNING"), ("failed", "FAILED"), ("cancelled", "CANCELLED"),
    ("oldest_due", "OLDEST DUE"),
    ("done_last_minute", "DONE 1M"), ("done_last_hour", "DONE 1H"),
    ("failed_last_hour", "FAILED 1H"),
)
COUNTED = ("due", "scheduled", "running", "failed", "cancelled", "done_last_minute",
           "done_last_hour", "failed_last_minute", "failed_last_hour")
LIST_COLUMNS: Sequence[Column] = (
    ("id", "ID"), ("job_type", "TYPE"), ("queue", "QUEUE"), ("status", "STATUS"),
    ("tries", "ATTEMPTS"), ("run_at", "RUN AT (UTC)"), ("updated_at", "UPDATED (UTC)"),
    ("last_error", "LAST ERROR"),
)


def migrate(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    from ..migrate import migrate as apply

    applied = apply(conn)
    if args.json:
        print(output.to_json({"applied": applied}), file=out)
    else:
        print("applied: " + ", ".join(applied) if applied else "schema is up to date", file=out)
    return 0


def stats(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    rows = store.overview(conn)
    totals: dict[str, float] = {key: sum(int(r[key]) for r in rows) for key in COUNTED}
    totals["oldest_due_seconds"] = max((float(r["oldest_due_seconds"]) for r in rows),
                                       default=0.0)
    drains = store.drains_running(conn)
    states = store.queue_states(conn)
    paused = {r["queue"]: r for r in states if r["paused_at"] is not None}
    caps = {r["queue"]: r["max_running"] for r in states if r["max_running"] is not None}
    rates = {r["queue"]: r["rate"] for r in states if r["rate"] is not None}
    rows = [{**r, "paused": r["queue"] in paused, "max_running": caps.get(r["queue"]),
             "rate": rates.get(r["queue"])}
            for r in rows]
    health = store.table_health(conn)
    if args.json:
        print(output.to_json({"queues": rows, "totals": totals, "drains_running": drains,
                              "paused_queues": sorted(paused), "caps": caps, "rates": rates,
                              "table": {**asdict(health), "total_bytes": health.total_bytes}}),
              file=out)
        return 0
    if not rows:
        print("no jobs", file=out)
    else:
        shown = [{**r, "oldest_due": output.age(r["oldest_due_seconds"])} for r in rows]
        if len(rows) > 1:
            shown.append({"queue": "(all)", "job_type": "",
                          **totals, "oldest_due": output.age(totals["oldest_due_seconds"])})
        print(output.table(shown, STATS_COLUMNS), file=out)
    print(f"\ndrains running: {drains}", file=out)
    print(output.table_health(health), file=out)
    for name, state in paused.items():
        print(f"queue {output.quoted(name)} is PAUSED (for "
              f"{output.age(state['paused_seconds'])}; {_resume_hint(name)})", file=out)
    for name, cap in caps.items():
        print(f"queue {output.quoted(name)} is capped at {cap} running", file=out)
    for name, rate in rates.items():
        print(f"queue {output.quoted(name)} is limited to {output.cell(rate)} starts", file=out)
    return 0


def _resume_hint(name: str) -> str:
    """How to resume queue ``name``: the command, its name quoted for the shell; or, for a
    name shown escaped (no one could type it from what they see, and the command refuses
    control characters), the API route with the name percent-encoded."""
    if output.escape(name) != name:
        from urllib.parse import quote

        return f"POST /queues/{quote(name, safe='')}/resume"
    import shlex

    return f"`pgdrain resume {shlex.quote(name)}`"


def list_jobs(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    rows = store.list_jobs(conn, status=args.status, job_type=args.job_type, queue=args.queue,
                           since_seconds=args.since, limit=args.limit)
    if args.json:
        print(output.to_json(rows), file=out)
        return 0
    if not rows:
        print("no jobs match", file=out)
        return 0
    shown = [{**r, "tries": f"{r['attempts']}/{r['max_attempts']}"} for r in rows]
    print(output.table(shown, LIST_COLUMNS), file=out)
    if len(rows) == args.limit:
        print(f"\n(the newest {args.limit}; --limit shows more)", file=out)
    return 0


def show(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    job = store.get_job(conn, args.id)
    if job is None:
        print(f"pgdrain show: there is no job {args.id}", file=output_errors(out))
        return 1
    print(output.to_json(job) if args.json else output.record(job), file=out)
    return 0


def requeue(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    # No selector is every failed job, as it always was (`--all` says so explicitly).
    ids = store.requeue_failed(conn, ids=args.ids, job_type=args.job_type, queue=args.queue,
                               batch_size=args.batch)
    if args.json:
        print(output.to_json({"requeued": ids}), file=out)
    else:
        shown = "" if not ids else ": " + ", ".join(map(str, ids[:50])) + (
            f" and {len(ids) - 50} more" if len(ids) > 50 else "")
        print(f"requeued {len(ids)} job(s){shown}", file=out)
    return 0


def purge(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    older = output.age(args.older_than) if args.older_than else "0s"
    if not args.yes:
        count = store.count_purgeable(conn, status=args.status,
                                      older_than_seconds=args.older_than)
        if args.json:
            print(output.to_json({"would_purge": count, "purged": 0}), file=out)
        else:
            print(f"{count} {args.status} job(s) finished more than {older} ago; run again "
                  "with --yes to delete them", file=out)
        return 0
    purged = store.purge_finished(conn, status=args.status, older_than_seconds=args.older_than,
                                  batch_size=args.batch)
    if args.json:
        print(output.to_json({"purged": purged}), file=out)
    else:
        print(f"purged {purged} {args.status} job(s) finished more than {older} ago", file=out)
    return 0


def cancel(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    outcomes = store.cancel(conn, args.ids)
    if args.json:
        print(output.to_json({str(i): o for i, o in outcomes.items()}), file=out)
    else:
        print(output.table([{"id": i, "outcome": _CANCEL_WORDS.get(o, o.replace("_", " "))}
                            for i, o in outcomes.items()], [("id", "ID"), ("outcome", "")]),
              file=out)
    refused = {i: o for i, o in outcomes.items() if o not in _CANCEL_WORDS}
    for ident, outcome in refused.items():
        reason = ("there is no such job" if outcome == "not_found"
                  else f"it is {outcome.removeprefix('already_')}")
        print(f"pgdrain cancel: job {ident} was not cancelled: {reason}",
              file=output_errors(out))
    return 1 if refused else 0


_CANCEL_WORDS = {"cancelled": "cancelled: it will not run",
                 "cancel_requested": "running: asked to stop (its attempt ends cancelled)"}


def pause(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    from ..control import pause as pause_queue

    state = pause_queue(conn, args.queue, new=args.new)
    if args.json:
        print(output.to_json(state), file=out)
    else:
        print(f"queue {output.quoted(args.queue)} is paused (since "
              f"{output.cell(state['paused_at'])} UTC): no drain claims its jobs; it still "
              "accepts them, and running ones finish",
              file=out)
    return 0


def resume(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    from ..control import resume as resume_queue

    state = resume_queue(conn, args.queue)
    print(output.to_json(state) if args.json else
          f"queue {output.quoted(args.queue)} runs: drains claim its jobs", file=out)
    return 0


SCHEDULE_COLUMNS: Sequence[Column] = (
    ("name", "NAME"), ("cron", "CRON"), ("tz", "TZ"), ("job_type", "TYPE"), ("queue", "QUEUE"),
    ("last_tick", "LAST TICK (UTC)"), ("last_job_id", "LAST JOB"), ("next", "NEXT RUN (UTC)"),
)


def schedules(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    from ..registry import REGISTRY, load_job_modules
    from ..scheduler import schedule_view
    from ..settings import read

    load_job_modules(read("PGDRAIN_JOBS"))
    rows = schedule_view(conn, REGISTRY)
    if args.json:
        print(output.to_json(rows), file=out)
    elif not rows:
        print("no schedules: declare them with @pgdrain.job(..., cron=...) or pgdrain.schedule "
              "in a module of PGDRAIN_JOBS", file=out)
    else:
        shown = [{**r, "next": r["next_run"] if r["declared"] else "(removed: stopped)"}
                 for r in rows]
        print(output.table(shown, SCHEDULE_COLUMNS), file=out)
    return 0


def queue(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    from ..control import set_queue

    given = {k: getattr(args, k) for k in ("max_running", "rate") if hasattr(args, k)}
    if not given:
        print("pgdrain queue set: give --max-running, --rate or both", file=sys.stderr)
        return 2
    state = set_queue(conn, args.queue, new=args.new, **given)
    if args.json:
        print(output.to_json(state), file=out)
        return 0
    cap = "no cap" if state["max_running"] is None else \
        f"at most {state['max_running']} running across all drains"
    rate = "no rate limit" if state["rate"] is None else \
        f"at most {state['rate']} starts across all drains"
    print(f"queue {output.quoted(args.queue)}: {cap}; {output.cell(rate)}", file=out)
    return 0


def janitor(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    from ..janitor import run_janitor
    from ..settings import Settings

    result = run_janitor(conn, Settings.from_env())
    print(output.to_json({"ran": result.ran, "reclaimed": result.reclaimed,
                          "refunded": result.refunded, "failed": result.failed,
                          "expired": result.expired, "purged": result.purged}), file=out)
    return 0


def output_errors(out: TextIO) -> TextIO:
    import sys

    return sys.stderr if out is sys.stdout else out


COMMANDS: dict[str, Callable[[Any, argparse.Namespace, TextIO], int]] = {
    "migrate": migrate, "stats": stats, "list": list_jobs, "show": show, "requeue": requeue,
    "purge": purge, "janitor": janitor, "cancel": cancel, "pause": pause, "resume": resume,
    "schedules": schedules, "queue": queue,
}
