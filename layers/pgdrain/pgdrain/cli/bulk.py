"""``pgdrain cancel|requeue|delete`` by filter instead of ids (pgdrain.bulk): count first and
say how many, then, once confirmed (at the terminal, or ``--yes``), act on those jobs only, a
batch at a time. Without a terminal to ask at and without ``--yes``, only the count is printed
and nothing changes (as ``requeue`` and ``purge`` do)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from .. import bulk
from . import arguments, output

FILTER_OPTIONS = ("status", "job_type", "queue", "tenant", "tags", "meta", "older_than",
                  "newer_than")
WORDS = {"cancel": "cancel", "requeue": "requeue", "delete": "delete"}


def add_filters(parser: argparse.ArgumentParser, *, status: bool = True,
                type_and_queue: bool = True) -> None:
    """The filter options of a bulk command (``type_and_queue``: unless the parser has them)."""
    if status:
        parser.add_argument("--status", choices=bulk.STATUSES,
                            help="only jobs in this status (within those the action applies "
                                 "to)")
    if type_and_queue:
        parser.add_argument("--type", "--job-type", dest="job_type", type=arguments.name,
                            metavar="TYPE", help="only jobs of this type")
        parser.add_argument("--queue", type=arguments.name, help="only jobs in this queue")
    parser.add_argument("--tenant", type=arguments.name, help="only jobs for this tenant")
    tag_and_meta(parser)
    parser.add_argument("--older-than", type=arguments.duration, metavar="AGE",
                        help="only jobs enqueued more than AGE ago (90s, 15m, 1h, 7d)")
    parser.add_argument("--newer-than", type=arguments.duration, metavar="AGE",
                        help="only jobs enqueued less than AGE ago")
    parser.add_argument("--batch", type=arguments.positive_int, default=bulk.BATCH,
                        help=f"jobs per transaction (default {bulk.BATCH})")


def tag_and_meta(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tag", dest="tags", action="append", type=tag, metavar="TAG",
                        help="only jobs with this tag (repeatable: all of them)")
    parser.add_argument("--meta", dest="meta", action="append", type=meta_match,
                        metavar="KEY=VALUE|JSON",
                        help="only jobs whose meta has KEY with the string VALUE, or contains "
                             "this JSON object (repeatable: all of them)")


def tag(raw: str) -> str:
    problem = bulk.tag_problem(raw)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return raw


def meta_match(raw: str) -> dict[str, Any]:
    """``KEY=VALUE`` (the string VALUE, exactly) or a JSON object (containment)."""
    if raw.lstrip().startswith("{"):
        return arguments.json_object(raw)
    key, equals, value = raw.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError("give KEY=VALUE or a JSON object, e.g. "
                                         "customer=42 or '{\"customer\": 42}'")
    return {key: value}


def merged_meta(parts: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The ``--meta`` options as one object; a key given twice with different values can
    match nothing: refused."""
    if not parts:
        return None
    merged: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if key in merged and merged[key] != value:
                raise bulk.InvalidFilter(f"{key!r:.60} is given twice, with different values",
                                         field="meta")
            merged[key] = value
    return merged


def filtering(args: argparse.Namespace) -> bool:
    """Whether the command was given a filter option (then it acts by filter, not by ids)."""
    return any(getattr(args, name, None) is not None for name in FILTER_OPTIONS)


def job_filter(args: argparse.Namespace) -> bulk.JobFilter:
    return bulk.job_filter({
        "status": getattr(args, "status", None), "job_type": args.job_type,
        "queue": args.queue, "tenant": args.tenant, "tags": args.tags,
        "meta": merged_meta(args.meta), "older_than_seconds": args.older_than,
        "newer_than_seconds": args.newer_than})


def run(conn: Any, name: str, args: argparse.Namespace, out: TextIO,
        stdin: TextIO | None = None) -> int:
    """Count the jobs the filter selects that action ``name`` applies to, say how many, and
    once confirmed act on them (up to the highest id counted)."""
    action = bulk.action_named(name)
    match = job_filter(args)
    counted = bulk.count(conn, action, match, seconds=30.0)
    shown = f"{counted.jobs:,}" + ("" if counted.complete else "+")
    statuses = "/".join(action.statuses) if len(action.statuses) < 5 else "not running"
    if not args.yes and not _confirmed(name, shown, statuses, counted, args, out, stdin):
        if args.json:
            print(output.to_json({f"would_{name}": counted.jobs, "complete": counted.complete,
                                  "upto": counted.upto}), file=out)
        else:
            print(f"{shown} job(s) ({statuses}) match, up to job {counted.upto}; nothing "
                  f"changed: run again with --yes to {WORDS[name]} them", file=out)
        return 0
    done = bulk.act(conn, action, match, upto=counted.upto, batch=args.batch)
    if args.json:
        print(output.to_json({"counted": counted.jobs, "upto": counted.upto,
                              "outcomes": dict(done.outcomes), "next_upto": done.next_upto}),
              file=out)
    else:
        parts = ", ".join(f"{n:,} {o.replace('_', ' ')}" for o, n in
                          sorted(done.outcomes.items())) or "no job matched any more"
        print(f"{name}: {parts}", file=out)
    if done.stopped == "busy":
        print(f"pgdrain {name}: stopped at job {done.next_upto}: drains held its batch's "
              "jobs through every try; run it again to go on", file=_errors(out))
        return 1
    return 0


def _confirmed(name: str, shown: str, statuses: str, counted: bulk.Counted,
               args: argparse.Namespace, out: TextIO, stdin: TextIO | None) -> bool:
    stdin = sys.stdin if stdin is None else stdin
    if args.json or counted.jobs == 0 or not stdin.isatty():
        return False
    print(f"{shown} job(s) ({statuses}) match, up to job {counted.upto}. "
          f"{WORDS[name].capitalize()} them? [y/N] ", end="", file=out, flush=True)
    answer = stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _errors(out: TextIO) -> TextIO:
    return sys.stderr if out is sys.stdout else out
