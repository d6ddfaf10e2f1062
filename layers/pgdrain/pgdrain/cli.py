"""The pgdrain command: operate the queue from a shell.

``migrate``, ``stats``, ``requeue`` and ``janitor``; ``invoke`` where pgdrain-dev is installed.

Connects with ``DATABASE_URL``. Errors print one line that says what is wrong (never the
password) and exit non-zero.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from .errors import PgdrainError, QueryFailed


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgdrain", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("migrate", help="create or upgrade the schema (idempotent)")
    commands.add_parser("stats", help="job counts by queue and status, and the queue's lag")
    commands.add_parser("janitor", help="reclaim expired leases and purge old done jobs now")
    requeue = commands.add_parser("requeue", help="give failed jobs a fresh set of attempts")
    requeue.add_argument("--id", type=_job_id, action="append", dest="ids", metavar="ID",
                         help="a job id (repeatable); default: every failed job")
    requeue.add_argument("--job-type", help="only failed jobs of this type")
    requeue.add_argument("--queue", help="only failed jobs in this queue")
    _add_plugin_commands(commands)
    return parser


# Commands other packages add (pgdrain-dev adds `invoke`): entry points of this group, each a
# function given the subparsers that adds its parser and sets `handler` (args -> exit code).
PLUGIN_GROUP = "pgdrain.commands"
DEV_COMMANDS = {"invoke": "run a function of template.yaml locally, as `sam local invoke` does"}


def _add_plugin_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]
                         ) -> None:
    from importlib.metadata import entry_points

    added = set()
    for entry in entry_points(group=PLUGIN_GROUP):
        entry.load()(commands)
        added.add(entry.name)
    for name, help_text in DEV_COMMANDS.items():
        if name not in added:  # say where it comes from, rather than "invalid choice"
            missing = commands.add_parser(name, help=f"{help_text} (needs pgdrain-dev)",
                                          add_help=False)
            missing.add_argument("rest", nargs=argparse.REMAINDER)
            missing.set_defaults(handler=_needs_dev_tools)


def _needs_dev_tools(args: argparse.Namespace) -> int:
    print(f"pgdrain {args.command}: this command comes with pgdrain's development tools, which "
          "are not installed here: `pip install -e dev/` in a clone of the repository (make "
          "installs them)", file=sys.stderr)
    return 2


def _job_id(raw: str) -> int:
    from .errors import InvalidJobId
    from .store import job_id

    try:
        return job_id(raw.strip())
    except InvalidJobId as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except QueryFailed as exc:  # the server's message and SQLSTATE, not its whole record
        print(f"pgdrain {args.command}: the database refused it: {exc}", file=sys.stderr)
        return 1
    except PgdrainError as exc:
        print(f"pgdrain {args.command}: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a driver error: say which, without the connection string
        print(f"pgdrain {args.command}: {_describe(exc)}", file=sys.stderr)
        return 1


def _describe(exc: Exception) -> str:
    """A driver error in one line: the server's message and SQLSTATE, not its whole record
    (source file, line, routine)."""
    fields = exc.args[0] if exc.args else None
    if isinstance(fields, dict) and fields.get("M"):
        return f"the database refused it: {fields['M']} (SQLSTATE {fields.get('C', '?')})"
    return f"{type(exc).__name__}: {exc}"


def _run(args: argparse.Namespace) -> int:
    handler = getattr(args, "handler", None)
    if handler is not None:
        return int(handler(args))
    from . import store
    from .db import connect
    from .errors import ConfigError
    from .janitor import run_janitor
    from .migrate import migrate
    from .settings import Settings

    settings = Settings.from_env()
    if not settings.database_url:
        raise ConfigError("DATABASE_URL is not set")
    conn = connect(settings.database_url)
    try:
        if args.command == "migrate":
            applied = migrate(conn)
            print("applied: " + ", ".join(applied) if applied else "schema is up to date")
        elif args.command == "stats":
            found = store.stats(conn)
            print(json.dumps({"counts": found.counts, "due": found.due,
                              "oldest_due_seconds": round(found.oldest_due_seconds, 3)},
                             indent=2, sort_keys=True))
        elif args.command == "janitor":
            result = run_janitor(conn, settings)
            print(json.dumps({"ran": result.ran, "reclaimed": result.reclaimed,
                              "refunded": result.refunded, "failed": result.failed,
                              "purged": result.purged}))
        elif args.command == "requeue":
            ids = store.requeue_failed(conn, ids=args.ids, job_type=args.job_type,
                                       queue=args.queue)
            print(f"requeued {len(ids)} job(s)" + (f": {ids}" if ids else ""))
    finally:
        conn.close()
    return 0
