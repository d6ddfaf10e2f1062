"""The operator's commands: each reads its arguments, talks to the database through ``store``
and prints a table (or JSON with ``--json``). Each returns the process's exit status."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, TextIO

from .. import operator_store, store, waiting
from ..errors import InvalidJobId, WaitTimeout
from . import output, schedule_commands
from .output import Column

STATS_COLUMNS: Sequence[Column] = (
    ("queue", "QUEUE"), ("job_type", "TYPE"), ("due", "DUE"), ("scheduled", "SCHEDULED"),
    ("waiting", "WAITING"), ("running", "RUNNING"), ("failed", "FAILED"),
    ("cancelled", "CANCELLED"), ("oldest_due", "OLDEST DUE"),
    ("done_last_minute", "DONE 1M"), ("done_last_hour", "DONE 1H"),
    ("failed_last_hour", "FAILED 1H"),
)
COUNTED = ("due", "scheduled", "waiting", "running", "failed", "cancelled", "done_last_minute",
           "done_last_hour", "failed_last_minute", "failed_last_hour")
QUEUE_COLUMNS: Sequence[Column] = (
    ("queue", "QUEUE"), ("paused", "PAUSED"), ("max_running", "MAX RUNNING"), ("rate", "RATE"),
    ("due", "DUE"), ("scheduled", "SCHEDULED"), ("running", "RUNNING"), ("failed", "FAILED"),
)
MIGRATION_COLUMNS: Sequence[Column] = (
    ("version", "VERSION"), ("name", "NAME"), ("applied_at", "APPLIED (UTC)"),
)
LIST_COLUMNS: Sequence[Column] = (
    ("id", "ID"), ("job_type", "TYPE"), ("queue", "QUEUE"), ("status", "STATUS"),
    ("tries", "ATTEMPTS"), ("run_at", "RUN AT (UTC)"), ("updated_at", "UPDATED (UTC)"),
    ("waits_for", "WAITS FOR"), ("tags", "TAGS"), ("last_error", "LAST ERROR"),
)


def migrate(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    from ..migrate import migrate as apply
    from ..migrate import status

    if args.status:
        known = status(conn)
        if args.json:
            print(output.to_json(known), file=out)
        else:
            print(output.table(known, MIGRATION_COLUMNS), file=out)
            pending = [m for m in known if m["applied_at"] is None]
            print(f"\n{len(pending)} to apply: run `pgdrain migrate`" if pending else
                  "\nschema is up to date", file=out)
        return 0
    applied = apply(conn, deadline=time.monotonic() + args.timeout)
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
    from .bulk import merged_meta

    rows = store.list_jobs(conn, status=args.status, job_type=args.job_type, queue=args.queue,
                           since_seconds=args.since, waiting_for=args.waiting_for,
                           limit=args.limit, tags=args.tags, meta=merged_meta(args.meta))
    if args.json:
        print(output.to_json(rows), file=out)
        return 0
    if not rows:
        print("no jobs match", file=out)
        return 0
    shown = [{**r, "tries": f"{r['attempts']}/{r['max_attempts']}",
              "tags": ",".join(r["tags"]) or None} for r in rows]
    print(output.table(shown, LIST_COLUMNS), file=out)
    if len(rows) == args.limit:
        print(f"\n(the newest {args.limit}; --limit shows more)", file=out)
    return 0


def show(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    unfinished = False
    if args.wait is None:
        job = store.get_job(conn, args.id)
    else:
        try:
            job = waiting.wait(conn, args.id, timeout=args.wait)
        except WaitTimeout as exc:  # shown as it stands, and said so
            job, unfinished = exc.job, True
        except InvalidJobId:  # a valid id (parsed): no such job, or gone meanwhile
            job = None
    if job is None:
        print(f"pgdrain show: there is no job {args.id}", file=output_errors(out))
        return 1
    print(output.to_json(job) if args.json else output.record(job), file=out)
    if unfinished:
        print(f"pgdrain show: job {args.id} is still {job['status']} after {args.wait:g} s",
              file=output_errors(out))
        return 3
    return 0


def _by_filter(name: str, conn: Any, args: argparse.Namespace, out: TextIO) -> int | None:
    """The command's exit status when it was given a filter instead of ids (cli.bulk), None
    when it was given ids; neither is refused (exit 2)."""
    from . import bulk

    if args.ids and bulk.filtering(args):
        print(f"pgdrain {name}: give job ids or a filter, not both", file=output_errors(out))
        return 2
    if args.ids:
        return None
    if name != "requeue" and not bulk.filtering(args):
        print(f"pgdrain {name}: give job ids, or a filter (--status, --type, --queue, --tag, "
              "--meta, --tenant, --older-than, --newer-than)", file=output_errors(out))
        return 2
    return bulk.run(conn, name, args, out)


def requeue(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    # By type and queue alone, the count and the requeue it always had (requeue_failed); any
    # other filter, the bulk action's.
    if any(getattr(args, n) is not None for n in ("tenant", "tags", "meta", "older_than",
                                                  "newer_than")):
        return _by_filter("requeue", conn, args, out) or 0
    if not args.ids:  # every failed job, or those of a type or queue: count first, as purge
        found = operator_store.count_failed(conn, job_type=args.job_type, queue=args.queue)
        _known_names(found, args)
        if not args.yes:
            if args.json:
                print(output.to_json({"would_requeue": found["failed"], "requeued": []}),
                      file=out)
            else:
                print(f"{found['failed']} failed job(s) match; run again with --yes to requeue "
                      "them (or name them: --id ID)", file=out)
            return 0
    ids = operator_store.requeue_failed(conn, ids=args.ids, job_type=args.job_type,
                                        queue=args.queue, batch_size=args.batch)
    if args.json:
        print(output.to_json({"requeued": ids}), file=out)
    else:
        shown = "" if not ids else ": " + ", ".join(map(str, ids[:50])) + (
            f" and {len(ids) - 50} more" if len(ids) > 50 else "")
        print(f"requeued {len(ids)} job(s){shown}", file=out)
    refused = [i for i in sorted(set(args.ids or ())) if i not in set(ids)]
    for ident in refused:
        print(f"pgdrain requeue: job {ident} was not requeued: {_why_not_requeued(conn, ident)}",
              file=output_errors(out))
    return 1 if refused else 0


def _known_names(found: dict[str, Any], args: argparse.Namespace) -> None:
    """A type or queue no job has is a typo: say so rather than "requeued 0"."""
    from ..errors import UnknownQueue

    if not found["queue_known"]:
        raise UnknownQueue(f"no queue {args.queue!r}: no job names it (a typo?)")
    if not found["type_known"]:
        raise UnknownQueue(f"no job has type {args.job_type!r} (a typo?)")


def _why_not_requeued(conn: Any, ident: int) -> str:
    job = store.get_job(conn, ident)
    if job is None:
        return "there is no such job"
    if job["status"] != "failed":
        return f"it is {job['status']}, not failed"
    holder = store.live_job_with_key(conn, job["dedupe_key"]) if job["dedupe_key"] else None
    return (f"job {holder} is live with the same dedupe key" if holder is not None
            else "it changed meanwhile")


def delete(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    by_filter = _by_filter("delete", conn, args, out)
    if by_filter is not None:
        return by_filter
    if not args.yes:
        jobs = {i: store.get_job(conn, i) for i in sorted(set(args.ids))}
        plan = {i: ("not_found" if j is None else "running" if j["status"] == "running"
                    else f"would delete ({j['status']})") for i, j in jobs.items()}
        if args.json:
            print(output.to_json({str(i): o for i, o in plan.items()}), file=out)
        else:
            print(output.table([{"id": i, "outcome": o.replace("_", " ")}
                                for i, o in plan.items()], [("id", "ID"), ("outcome", "")]),
                  file=out)
            print("run again with --yes to delete them", file=out)
        return 0
    outcomes = operator_store.delete_jobs(conn, args.ids)
    if args.json:
        print(output.to_json({str(i): o for i, o in outcomes.items()}), file=out)
    else:
        print(output.table([{"id": i, "outcome": o.replace("_", " ")}
                            for i, o in outcomes.items()], [("id", "ID"), ("outcome", "")]),
              file=out)
    refused = {i: o for i, o in outcomes.items() if o != "deleted"}
    for ident, outcome in refused.items():
        reason = ("there is no such job" if outcome == "not_found" else
                  "it is running: cancel it first (pgdrain cancel), or let it finish")
        print(f"pgdrain delete: job {ident} was not deleted: {reason}", file=output_errors(out))
    return 1 if refused else 0


def run_now(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    outcomes = operator_store.run_now(conn, args.ids)
    if args.json:
        print(output.to_json({str(i): o for i, o in outcomes.items()}), file=out)
    else:
        words = {"due_now": "due now: the next drain runs it",
                 "already_due": "already due: the next drain runs it"}
        print(output.table([{"id": i, "outcome": words.get(o, o.replace("_", " "))}
                            for i, o in outcomes.items()], [("id", "ID"), ("outcome", "")]),
              file=out)
    refused = {i: o for i, o in outcomes.items() if o not in ("due_now", "already_due")}
    for ident, outcome in refused.items():
        reason = ("there is no such job" if outcome == "not_found"
                  else f"it is {outcome}, not pending (pgdrain requeue gives a failed job "
                       "fresh attempts)")
        print(f"pgdrain run-now: job {ident} was not made due: {reason}",
              file=output_errors(out))
    return 1 if refused else 0


def send_signal(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    from ..db import as_session
    from ..signals import signal

    options = {} if args.keep is None else {"keep_seconds": args.keep}
    with as_session(conn).transaction() as session:
        sent = signal(session, args.name, args.payload, **options)
    if args.json:
        print(output.to_json({"name": sent.name, "woken": list(sent.woken),
                              "kept_until": sent.kept_until}), file=out)
    else:
        woken = ", ".join(map(str, sent.woken[:50])) + (
            f" and {len(sent.woken) - 50} more" if len(sent.woken) > 50 else "")
        kept = output.cell(sent.kept_until)
        print(f"sent {output.quoted(sent.name)}: {len(sent.woken)} job(s) due now"
              + (f" ({woken})" if woken else "") + f"; kept until {kept} UTC", file=out)
    return 0


def enqueue(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    import pgdrain

    options = {k: v for k, v in (("queue", args.queue), ("priority", args.priority),
                                 ("delay_seconds", args.delay),
                                 ("dedupe_key", args.dedupe_key),
                                 ("max_attempts", args.max_attempts)) if v is not None}
    result = pgdrain.enqueue(conn, args.job_type, args.payload, **options)
    if args.json:
        print(output.to_json({"id": result.id, "created": result.created, "due": result.due}),
              file=out)
    elif result.created:
        print(f"enqueued job {result.id} ({'due now' if result.due else 'due later'})",
              file=out)
    else:
        print(f"job {result.id} holds dedupe key {output.quoted(args.dedupe_key)}: nothing "
              "enqueued", file=out)
    return 0


def queues(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    from .top import by_queue

    counts = {q["queue"]: q for q in by_queue(store.overview(conn))}
    states = {r["queue"]: r for r in store.queue_states(conn)}
    rows = [{"queue": name, "paused": states.get(name, {}).get("paused_at") is not None,
             "max_running": states.get(name, {}).get("max_running"),
             "rate": states.get(name, {}).get("rate"),
             **{k: counts.get(name, {}).get(k, 0) for k in ("due", "scheduled", "running",
                                                              "failed")}}
            for name in sorted(set(counts) | set(states))]
    if args.json:
        print(output.to_json(rows), file=out)
    elif not rows:
        print("no queues: no job names one and none was set", file=out)
    else:
        print(output.table(rows, QUEUE_COLUMNS), file=out)
    return 0


def purge(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    older = output.age(args.older_than) if args.older_than else "0s"
    if not args.yes:
        count = operator_store.count_purgeable(conn, status=args.status,
                                      older_than_seconds=args.older_than)
        if args.json:
            print(output.to_json({"would_purge": count, "purged": 0}), file=out)
        else:
            print(f"{count} {args.status} job(s) finished more than {older} ago; run again "
                  "with --yes to delete them", file=out)
        return 0
    purged = operator_store.purge_finished(conn, status=args.status,
                                           older_than_seconds=args.older_than,
                                           batch_size=args.batch)
    if args.json:
        print(output.to_json({"purged": purged}), file=out)
    else:
        print(f"purged {purged} {args.status} job(s) finished more than {older} ago", file=out)
    return 0


def cancel(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    by_filter = _by_filter("cancel", conn, args, out)
    if by_filter is not None:
        return by_filter
    outcomes = operator_store.cancel(conn, args.ids)
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
    ("name", "NAME"), ("source", "SOURCE"), ("cron", "CRON"), ("tz", "TZ"),
    ("job_type", "TYPE"), ("queue", "QUEUE"), ("last_tick", "LAST TICK (UTC)"),
    ("last_job_id", "LAST JOB"), ("next", "NEXT RUN (UTC)"),
)


def schedules(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    from ..scheduler import schedule_view

    rows = schedule_view(conn)  # the database's own record: no job module needed here
    if args.json:
        print(output.to_json(rows), file=out)
    elif not rows:
        print("no schedules: no drain has declared one (declare them with @pgdrain.job(..., "
              "cron=...) or pgdrain.schedule in a module of the drains' PGDRAIN_JOBS) and none "
              "was made at run time (pgdrain schedule set)", file=out)
    else:
        shown = [{**r, "next": "(paused)" if r["paused"] else r["next_run"]
                  if r["declared"] or r["source"] == "stored" else "(removed: stopped)"}
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


def grants(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    statements = operator_store.grants_needed(conn, args.role, args.part)
    if args.yes:
        operator_store.grant(conn, statements)
    if args.json:
        print(output.to_json({"role": args.role, "for": args.part, "granted": args.yes,
                              "statements": statements}), file=out)
        return 0
    print("\n".join(statements), file=out)
    if args.yes:  # a comment, so that the output stays a script to keep or run elsewhere
        print(f"-- granted, {len(statements)} statements", file=out)
    return 0


COMMANDS: dict[str, Callable[[Any, argparse.Namespace, TextIO], int]] = {
    "migrate": migrate, "stats": stats, "list": list_jobs, "show": show, "requeue": requeue,
    "purge": purge, "janitor": janitor, "cancel": cancel, "pause": pause, "resume": resume,
    "schedules": schedules, "queue": queue, "queues": queues, "delete": delete,
    "run-now": run_now, "enqueue": enqueue, "grants": grants, "signal": send_signal,
    "schedule": schedule_commands.schedule,
}
