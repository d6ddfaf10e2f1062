"""The pgdrain command: operate the queue from a shell.

``migrate``, ``stats``, ``queues``, ``list``, ``show``, ``enqueue``, ``requeue``,
``run-now``, ``purge``, ``delete``, ``cancel``, ``pause``, ``resume``, ``queue set``, ``signal``,
``schedules``, ``schedule set|show|pause|resume|delete``, ``grants``, ``janitor`` and ``top``;
``invoke`` where pgdrain-dev is installed. Each prints a table, or JSON with ``--json``.

Reaches the database the functions reach, configured the same way (``DATABASE_URL``,
``DB_SECRET_ARN``, or RDS IAM auth), or with ``--demo`` the embedded one ``make demo`` leaves;
each command says on stderr which database it is on (never a password). Bad
arguments exit 2 with a message that says what is wrong; a failure exits 1 with one line that
names it, never a password nor the server's whole error record.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

from ..db import sqlstate
from ..errors import PgdrainError, QueryFailed, server_text
from ..models import Status
from ..version import VERSION
from . import arguments, schedule_commands
from . import bulk as bulk_options
from .output import cell

STATUSES = tuple(s.value for s in Status)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgdrain", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--json", action="store_true", help="print JSON, for scripts")
        _demo_option(sub)
        return sub

    parser.add_argument("--version", action="version", version=f"pgdrain {VERSION}")
    migrate = command("migrate", "create or upgrade the schema (idempotent)")
    migrate.add_argument("--status", action="store_true",
                         help="only list the migrations: applied (when) or still to apply")
    migrate.add_argument("--timeout", type=float, default=3600, metavar="SECONDS",
                         help="most time an upgrade of a big table may take, building its "
                              "indexes online (default 3600); a run cut short resumes")
    command("stats", "per queue and job type: due, scheduled, running, failed, the oldest due "
                     "job's wait, done in the last minute and hour; drains running")
    listing = command("list", "the newest jobs, filtered")
    listing.add_argument("--status", choices=STATUSES)
    listing.add_argument("--waiting-for", choices=("parents", "signal"),
                         help="only jobs waiting for their parents (depends_on) or for a "
                              "signal (WaitFor)")
    _filters(listing)
    bulk_options.tag_and_meta(listing)
    listing.add_argument("--since", type=arguments.duration, metavar="AGE",
                         help="only jobs changed in the last AGE (90s, 15m, 1h, 7d)")
    listing.add_argument("--limit", type=arguments.positive_int, default=50,
                         help="at most this many (default 50)")
    show = command("show", "one job: every field and its last error")
    show.add_argument("id", type=arguments.job_id, metavar="ID")
    show.add_argument("--wait", type=arguments.wait_seconds, metavar="SECONDS",
                      help="wait up to SECONDS (at most 900) for the job to finish (done, "
                           "failed or cancelled), then show it; exit status 3 if it had not")
    requeue = command("requeue", "give failed jobs a fresh set of attempts, due now (a "
                                 "redrive); by id, or the failed jobs a filter selects")
    requeue.add_argument("--id", type=arguments.job_id, action="append", dest="ids",
                         metavar="ID", help="a job id (repeatable)")
    _filters(requeue)
    requeue.add_argument("--all", action="store_true",
                         help="every failed job (also what no selector means)")
    requeue.add_argument("--yes", action="store_true",
                         help="requeue them; without it, a requeue by type, queue or --all "
                              "only counts (by --id, it requeues at once)")
    bulk_options.add_filters(requeue, status=False, type_and_queue=False)
    purge = command("purge", "delete done or failed jobs older than an age: counts first, "
                             "deletes with --yes")
    purge.add_argument("--status", choices=("done", "failed", "cancelled"), required=True)
    purge.add_argument("--older-than", type=arguments.duration, required=True, metavar="AGE",
                       help="finished more than AGE ago (90s, 15m, 1h, 7d)")
    purge.add_argument("--yes", action="store_true", help="delete them (default: only count)")
    purge.add_argument("--batch", type=arguments.positive_int, default=1000,
                       help="jobs per statement (default 1000)")
    cancel = command("cancel", "cancel jobs: a pending one never runs, a running one is asked "
                               "to stop; exits 1 if one could not be. By id, or every job a "
                               "filter selects (counted first; --yes or a confirmation)")
    cancel.add_argument("ids", type=arguments.job_id, nargs="*", metavar="ID")
    cancel.add_argument("--yes", action="store_true",
                        help="by filter: cancel them without asking (without it and without a "
                             "terminal, only count)")
    bulk_options.add_filters(cancel)
    delete = command("delete", "delete jobs (not running ones: cancel them first) by id, or "
                               "every job a filter selects; shows what it would delete, "
                               "deletes with --yes (or, by filter, once confirmed)")
    delete.add_argument("ids", type=arguments.job_id, nargs="*", metavar="ID")
    delete.add_argument("--yes", action="store_true", help="delete them")
    bulk_options.add_filters(delete)
    run_now = command("run-now", "make pending jobs that wait (delayed, snoozed, backing off "
                                 "before a retry) due now; exits 1 if one could not be")
    run_now.add_argument("ids", type=arguments.job_id, nargs="+", metavar="ID")
    enqueue = command("enqueue", "enqueue one job, as the application would (a test job, a "
                                 "manual run)")
    enqueue.add_argument("job_type", type=arguments.name, metavar="TYPE")
    enqueue.add_argument("--payload", type=arguments.json_object, metavar="JSON",
                         help="the job's payload, a JSON object (default {})")
    enqueue.add_argument("--queue", type=arguments.name)
    enqueue.add_argument("--priority", type=int, help="lower runs first (default 0)")
    enqueue.add_argument("--delay", type=arguments.duration, metavar="AGE",
                         help="due after AGE (90s, 15m, 1h)")
    enqueue.add_argument("--dedupe-key", metavar="KEY",
                         help="skip it if a live job holds this key (its id comes back)")
    enqueue.add_argument("--max-attempts", type=arguments.positive_int, metavar="N")
    send = command("signal", "send a signal: the jobs waiting for it (WaitFor) become due "
                             "with its payload; kept for jobs that wait for it later")
    send.add_argument("name", metavar="NAME")
    send.add_argument("--payload", type=arguments.json_value, metavar="JSON",
                      help="what the waiting jobs get (any JSON; default null)")
    send.add_argument("--keep", type=arguments.duration, metavar="AGE",
                      help="how long it is kept for later waits (default 7d)")
    command("queues", "every queue: paused, cap, rate, and its due, scheduled, running and "
                      "failed jobs")
    grants = command("grants", "the GRANT statements a role needs to run the functions "
                               "(run them as the tables' owner, or give --yes)")
    grants.add_argument("role", type=arguments.role, metavar="ROLE")
    grants.add_argument("--for", dest="part", choices=("app", "enqueue", "drain"),
                        default="app", help="both functions on one role (app, the default), "
                                            "or one function's")
    grants.add_argument("--yes", action="store_true",
                        help="grant them now, in one transaction (as the tables' owner)")
    pause = command("pause", "stop drains from claiming a queue's jobs (it still accepts "
                             "jobs; running ones finish)")
    pause.add_argument("queue", type=arguments.name, metavar="QUEUE")
    pause.add_argument("--new", action="store_true",
                       help="pause a queue no job names yet (otherwise refused as a typo)")
    resume = command("resume", "let drains claim a paused queue's jobs again")
    resume.add_argument("queue", type=arguments.name, metavar="QUEUE")
    queue = commands.add_parser("queue", help="a queue's settings, enforced by every drain",
                                description="a queue's settings, enforced by every drain")
    queue_commands = queue.add_subparsers(dest="queue_command", required=True,
                                          metavar="SUBCOMMAND")
    queue_set = queue_commands.add_parser(
        "set", help="set a queue's concurrency cap and rate limit",
        description="set a queue's concurrency cap and/or rate limit, across all drains (jobs "
        "over them wait, pending and uncharged); a setting not given stays as it is")
    queue_set.add_argument("queue", type=arguments.name, metavar="QUEUE")
    queue_set.add_argument("--max-running", type=arguments.cap, default=argparse.SUPPRESS,
                           metavar="N", help="at most N running at once; `none` lifts the cap")
    queue_set.add_argument("--rate", type=arguments.rate, default=argparse.SUPPRESS,
                           metavar="N/PERIOD",
                           help="at most N starts in any PERIOD of a second to a day (10/s, "
                                "100/min, 5/h, 3/10s); `none` lifts the limit")
    queue_set.add_argument("--new", action="store_true",
                           help="a queue no job names yet (otherwise refused as a typo)")
    queue_set.add_argument("--json", action="store_true", help="print JSON, for scripts")
    _demo_option(queue_set)
    command("schedules", "the periodic jobs the drains declared and the schedules made at "
                         "run time (read from the database): cron, zone, last tick and job, "
                         "next run, paused; and entries removed since")
    schedule_commands.add_parser(commands, arguments, _demo_option)
    command("janitor", "reclaim expired leases, end expired pending jobs and purge old "
            "finished jobs now")
    top = commands.add_parser("top", help="the queue live: depth, age, rates, drains (Ctrl-C "
                                          "quits)")
    top.add_argument("--interval", type=arguments.interval, default=1.0, metavar="SECONDS",
                     help="refresh every SECONDS (default 1)")
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    _demo_option(top)
    _add_plugin_commands(commands)
    return parser


def _demo_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--demo", action="store_true",
                        help="the embedded database `make demo` left on this machine, not the "
                             "configured one (nothing configured and no --demo: an error)")


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--type", "--job-type", dest="job_type", type=arguments.name,
                        metavar="TYPE", help="only jobs of this type")
    parser.add_argument("--queue", type=arguments.name, help="only jobs in this queue")


# Commands other packages add (pgdrain-dev adds `invoke`, pgdrain-console `console`): entry
# points of this group, each a function given the subparsers that adds its parser and sets
# `handler` (args -> exit code).
PLUGIN_GROUP = "pgdrain.commands"
OPTIONAL_COMMANDS = {
    "invoke": ("run a function of template.yaml locally, as `sam local invoke` does",
               "pgdrain's development tools", "`pip install -e dev/`"),
    "console": ("the queue in a web page, served from this machine (read-only unless "
                "--allow-actions)", "pgdrain's console", "`pip install ./console`"),
}
"""Each optional command: its help, the package it comes with, and how to install that."""


def _add_plugin_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]
                         ) -> None:
    from importlib.metadata import entry_points

    added = set()
    for entry in entry_points(group=PLUGIN_GROUP):
        entry.load()(commands)
        added.add(entry.name)
    for name, (help_text, package, _) in OPTIONAL_COMMANDS.items():
        if name not in added:  # say where it comes from, rather than "invalid choice"
            # Every word it was given, options included, is left for the message to ignore.
            missing = commands.add_parser(name, help=f"{help_text} (needs {package})",
                                          add_help=False, prefix_chars="\0")
            missing.add_argument("rest", nargs=argparse.REMAINDER)
            missing.set_defaults(handler=_not_installed)


def _not_installed(args: argparse.Namespace) -> int:
    _, package, install = OPTIONAL_COMMANDS[args.command]
    print(f"pgdrain {args.command}: this command comes with {package}, which is not installed "
          f"here: {install} in a clone of the repository (make installs it)", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:
        print(f"pgdrain {args.command}: interrupted", file=sys.stderr)
        return 130
    # A message may quote what the database or the operator gave (a name, the server's
    # text): escaped as every value the command prints, and so on one line.
    except QueryFailed as exc:  # the server's message and SQLSTATE, not its whole record
        print(f"pgdrain {args.command}: the database refused it: {cell(exc)}"
              f"{_unmigrated_hint(exc)}", file=sys.stderr)
        return 1
    except PgdrainError as exc:
        print(f"pgdrain {args.command}: {cell(exc)}", file=sys.stderr)
        return 2 if _is_usage(exc) else 1
    except Exception as exc:  # a driver error: say which, without the connection string
        print(f"pgdrain {args.command}: {cell(describe_failure(exc))}{_unmigrated_hint(exc)}",
              file=sys.stderr)
        return 1


def _is_usage(exc: PgdrainError) -> bool:
    """Settings the operator gave are wrong (exit 2), not the database or the network (1)."""
    from ..errors import (
        ConfigError,
        InvalidJobError,
        ScheduleConflict,
        UnknownQueue,
        UnknownSchedule,
    )

    return isinstance(exc, ConfigError | InvalidJobError | UnknownQueue | UnknownSchedule
                      | ScheduleConflict)


def describe_failure(exc: BaseException) -> str:
    """A driver error in one line: the server's message and SQLSTATE, not its whole record
    (source file, line, routine)."""
    fields = exc.args[0] if exc.args else None
    if isinstance(fields, dict) and fields.get("M"):
        return f"the database refused it: {server_text(exc)}"
    return f"{type(exc).__name__}: {exc}"


_PGDRAIN_RELATION = re.compile(r'relation "(jobs|pgdrain_[a-z_]+)" does not exist')


def _unmigrated_hint(exc: Exception) -> str:
    """What to do when pgdrain's own tables are missing: this database was never migrated
    (or the command reaches another database than the one that was)."""
    if sqlstate(exc) == "42P01" and _PGDRAIN_RELATION.search(str(exc)):
        return (". pgdrain's schema is not in this database: run `pgdrain migrate` (or check "
                "that this is the database the stack uses)")
    return ""


def _run(args: argparse.Namespace) -> int:
    handler = getattr(args, "handler", None)
    if handler is not None:
        return int(handler(args))
    from .commands import COMMANDS
    from .database import open_connection

    target = open_connection(demo=args.demo)
    # Where the command is, before anything it says of it: on stderr, so that a table or
    # --json on stdout stays what a script reads.
    print(f"pgdrain {args.command}: database {cell(target.where)}", file=sys.stderr)
    conn = target.conn
    try:
        if args.command == "top":
            from ..settings import read
            from .top import run

            def reconnect() -> object:  # after a failover: the same database, anew
                return open_connection(demo=args.demo).conn

            conn = None  # top closes it (and the ones it opens after an outage)
            return run(reconnect, conn=target.conn, interval=args.interval, once=args.once,
                       out=sys.stdout, max_drains=int(read("PGDRAIN_MAX_DRAINS")),
                       where=target.where)
        return COMMANDS[args.command](conn, args, sys.stdout)
    finally:
        if conn is not None:
            conn.close()
