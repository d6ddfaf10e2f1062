"""``pgdrain console``: the command that starts the console (added to the pgdrain command by
this package's entry point)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

DEFAULT_PORT = 8477


def port(raw: str) -> int:
    text = raw.strip()
    if not (text.isascii() and text.isdigit() and int(text) <= 65535):
        raise argparse.ArgumentTypeError(f"a port is a number from 0 to 65535 (0: any free "
                                         f"one), not {raw[:20]!r}")
    return int(text)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from pgdrain.cli import arguments

    about = ("the queue in a web page, served from this machine: queues, a chart of the last "
             "hour, jobs filtered and paged, each job whole, schedules; read-only unless "
             "--allow-actions")
    parser = commands.add_parser("console", help=about, description=about)
    parser.add_argument("--port", type=port, default=DEFAULT_PORT,
                        help=f"the port to listen on (default {DEFAULT_PORT}; 0: any free one)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (default 127.0.0.1: this machine only); "
                             "the token is required on any")
    parser.add_argument("--allow-actions", action="store_true",
                        help="allow retry, cancel, run now, delete, pause, resume, caps and "
                             "rates, one job at a time or on everything a filter selects")
    parser.add_argument("--refresh", type=arguments.interval, default=5.0, metavar="SECONDS",
                        help="read the overview at most every SECONDS, for every open tab "
                             "(default 5)")
    parser.add_argument("--demo", action="store_true",
                        help="the embedded database `make demo` left on this machine, not the "
                             "configured one")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pgdrain.cli.database import open_connection
    from pgdrain.cli.output import cell
    from pgdrain.settings import read

    from .app import Console, Settings
    from .connections import Connections
    from .guard import Guard, loopback, new_token
    from .server import serve

    first = open_connection(demo=args.demo)  # a database that does not answer stops here
    where = first.where
    spare: list[Any] = [first.conn]

    def connect() -> Any:
        return spare.pop() if spare else open_connection(demo=args.demo).conn

    try:
        server = serve(None, args.host, args.port)
    except OSError as exc:
        first.conn.close()
        print(f"pgdrain console: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    guard = Guard(new_token(), args.host, server.server_address[1])
    connections = Connections(connect)
    server.set_app(Console(connections=connections, guard=guard, settings=Settings(
        where=where, allow_actions=args.allow_actions, refresh_seconds=args.refresh,
        max_drains=int(read("PGDRAIN_MAX_DRAINS")))))
    print(guard.url(f"/?token={guard.token}"), flush=True)
    print(f"pgdrain console: database {cell(where)}; "
          f"{'actions allowed' if args.allow_actions else 'read-only'}; Ctrl-C stops it",
          file=sys.stderr, flush=True)
    if not loopback(args.host):
        print(f"pgdrain console: listening on {cell(args.host)}, beyond this machine: anyone "
              "with the URL can use it, and it is plain HTTP", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        connections.close()
    return 0
