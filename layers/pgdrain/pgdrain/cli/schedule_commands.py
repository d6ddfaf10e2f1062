"""``pgdrain schedule set|show|pause|resume|delete NAME``: the schedules made at run time
(pgdrain.stored_schedules), from a shell. ``pgdrain schedules`` lists them with the declared
ones (pgdrain.cli.commands)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from types import ModuleType
from typing import Any, TextIO

from . import output


def schedule(conn: Any, args: argparse.Namespace, out: TextIO) -> int:
    from .. import stored_schedules as stored
    from ..scheduler import schedule as set_schedule

    if args.schedule_command == "set":
        options = {k: v for k, v in (("queue", args.queue), ("priority", args.priority),
                                     ("max_attempts", args.max_attempts),
                                     ("ttl_seconds", args.ttl)) if v is not None}
        entry = set_schedule(conn, args.cron, args.job_type, args.payload, name=args.name,
                             tz=args.tz, **options)
        said = "created" if entry.pop("created") else "changed"
    else:
        act = {"show": stored.get_schedule, "pause": stored.pause_schedule,
               "resume": stored.resume_schedule, "delete": stored.delete_schedule}
        entry = act[args.schedule_command](conn, args.name)
        said = {"show": "", "pause": "paused", "resume": "resumed",
                "delete": "deleted"}[args.schedule_command]
    if args.json:
        print(output.to_json(entry), file=out)
    elif args.schedule_command == "delete":
        print(f"schedule {output.quoted(args.name)} deleted (the jobs it enqueued stay)",
              file=out)
    else:
        print(describe(entry, said), file=out)
    return 0


def describe(entry: dict[str, Any], said: str) -> str:
    """A stored entry in a few lines: what it enqueues, when, and its state."""
    zone = f" ({entry['tz']})" if entry["tz"] else " (UTC)"
    state = "paused: enqueues nothing until resumed" if entry["paused"] else \
        f"next run {output.cell(entry['next_run'])}"
    head = f"schedule {output.quoted(entry['name'])}" + (f" {said}" if said else "")
    return (f"{head}: {output.cell(entry['cron'])}{output.cell(zone)}, "
            f"{output.quoted(entry['job_type'])} to queue {output.quoted(entry['queue'])}\n"
            f"  payload {output.cell(output.to_json(entry['payload']).replace(chr(10), ''))}\n"
            f"  {state}; last tick {output.cell(entry['last_tick'] or '-')}")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser],
               arguments: ModuleType,
               demo_option: Callable[[argparse.ArgumentParser], None]) -> None:
    """The ``schedule`` command and its subcommands, on the CLI's parser."""
    parser = commands.add_parser(
        "schedule", help="a schedule made at run time: set, show, pause, resume, delete",
        description="a schedule stored in the database (every drain ticks it, as the "
                    "declared ones): set, show, pause, resume, delete by NAME")
    subs = parser.add_subparsers(dest="schedule_command", required=True, metavar="ACTION")

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = subs.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("name", type=arguments.name, metavar="NAME",
                         help="the schedule's name, e.g. report:customer-42")
        sub.add_argument("--json", action="store_true", help="print JSON, for scripts")
        demo_option(sub)
        return sub

    put = action("set", "create the schedule NAME, or change it (cron, zone, type, payload, "
                        "options): one write, checked first")
    put.add_argument("--cron", required=True, metavar="EXPR",
                     help="five fields, e.g. '0 9 * * mon-fri'")
    put.add_argument("--type", dest="job_type", required=True, type=arguments.name,
                     metavar="TYPE", help="the job type to enqueue at each tick")
    put.add_argument("--payload", type=arguments.json_object, metavar="JSON",
                     help="the job's payload, a JSON object (default {})")
    put.add_argument("--tz", metavar="ZONE", help="an IANA zone, e.g. Europe/Paris (default "
                                                  "UTC)")
    put.add_argument("--queue", type=arguments.name)
    put.add_argument("--priority", type=int, help="lower runs first (default 0)")
    put.add_argument("--max-attempts", type=arguments.positive_int, metavar="N")
    put.add_argument("--ttl", type=arguments.duration, metavar="AGE",
                     help="a job not started within AGE of its tick ends failed")
    action("show", "the schedule NAME: what it enqueues, when, paused or not")
    action("pause", "stop the schedule NAME: no tick enqueues until it is resumed")
    action("resume", "let the schedule NAME tick again, from its next tick (the ticks missed "
                     "while paused are not run)")
    action("delete", "delete the schedule NAME (the jobs it enqueued stay)")
