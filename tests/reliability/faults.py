"""Helpers for the fault, bad-input and security tests (plain functions, not a conftest).

- drain invocations in a process of their own (``start_drain``, ``finish``, ``summary_in``),
  as ``tests/functions/conftest.py``'s ``drain_process`` does but for any database URL;
- a private embedded PostgreSQL that a test may restart (``private_server``, ``restart``);
- the jobs table's fingerprint, to prove a refused request changed nothing (``table_state``);
- a URL for the same database as another role (``as_role``); a closed TCP port.
"""

from __future__ import annotations

import ast
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from pgdrain.db import connect
from pgdrain_dev import embedded
from tests.support.drains import KEEP_HISTORY_SECONDS

ROOT = Path(__file__).resolve().parents[2]
RUN_DRAIN = ROOT / "tests" / "support" / "run_drain.py"
RECORDING_JOBS = "tests.reliability.recording_jobs"

# What a drain that lost its database says on its way out: the function's own "drain failed"
# log line and the driver's exception (pg8000's InterfaceError for a dead socket, DatabaseError
# for the server's "terminating connection" FATAL, pgdrain's DatabaseConnectError, or the
# socket's own OSError, which pg8000 does not wrap on the first read of a reply: a connection
# reset by the server's exit surfaced as ConnectionResetError in CI).
DATABASE_ERROR = re.compile(r"\b(InterfaceError|DatabaseError|DatabaseConnectError"
                            r"|ConnectionResetError|BrokenPipeError|ConnectionAbortedError"
                            r"|ConnectionRefusedError|OSError)\b")


def executions_ddl() -> str:
    """``recording_jobs.EXECUTIONS_DDL``, read rather than imported: importing the job module
    would register its "record" type in this process's REGISTRY, which every function that a
    test loads here shares (and the OpenAPI document is built from)."""
    tree = ast.parse((ROOT / "tests" / "reliability" / "recording_jobs.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["EXECUTIONS_DDL"]:
            return ast.literal_eval(node.value)
    raise LookupError("recording_jobs.py defines no EXECUTIONS_DDL")


def start_drain(database_url: str, timeout: float = 60, **env: str) -> subprocess.Popen:
    """One drain invocation (``tests/support/run_drain.py``) in its own process.

    The environment is this one's (the suite has removed any PGDRAIN_* from it) plus the
    database, the recording job module, quiet logs, done rows kept, and ``env``.
    """
    environment = {**os.environ, "DATABASE_URL": database_url, "PGDRAIN_JOBS": RECORDING_JOBS,
                   "POWERTOOLS_LOG_LEVEL": "WARNING", "POWERTOOLS_SERVICE_NAME": "pgdrain-faults",
                   "PGDRAIN_BACKOFF_BASE_SECONDS": "0", "PGDRAIN_BACKOFF_JITTER": "0",
                   # Two handlers at once: the concurrent loop, with work that lasts long
                   # enough (2 s) for a fault to land mid-drain.
                   "PGDRAIN_CONCURRENCY": "2",
                   # Done rows kept: the tests check every job's row.
                   "PGDRAIN_RETENTION_SECONDS": str(KEEP_HISTORY_SECONDS), **env}
    return subprocess.Popen([sys.executable, str(RUN_DRAIN), str(timeout)], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process: subprocess.Popen, timeout: float = 90) -> tuple[int, str]:
    """Wait for a drain process (a hang fails the test); its exit code and output."""
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError(f"the drain hung for {timeout} s:\n{output[-4000:]}") from None
    return process.returncode, output


def summary_in(output: str) -> dict[str, Any] | None:
    """The summary a drain process printed, or None if it printed none."""
    for line in output.splitlines():
        if line.startswith("SUMMARY "):
            return json.loads(line.removeprefix("SUMMARY "))
    return None


def wait_for(condition: Callable[[], Any], timeout: float = 30, what: str = "a condition"
             ) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def rows(conn: Any, statement: str, **params: Any) -> list[dict[str, Any]]:
    """Rows of a statement on a pg8000 native connection, as dicts."""
    result = conn.run(statement, **params) if params else conn.run(statement)
    names = [c["name"] for c in conn.columns or []]
    return [dict(zip(names, row, strict=True)) for row in result or []]


# --- the jobs table's fingerprint ------------------------------------------------------------

TABLE_STATE = ("SELECT count(*) AS n, md5(coalesce(string_agg(j::text, '|' ORDER BY j.id), '')) "
               "AS digest FROM jobs AS j")


def table_state(sql: Callable[..., list[dict[str, Any]]]) -> tuple[int, str]:
    """The jobs table's row count and an md5 of every row's text: equal means unchanged."""
    [row] = sql(TABLE_STATE)
    return row["n"], row["digest"]


# --- a private embedded server that a test may restart --------------------------------------


@contextmanager
def private_server(datadir: Path) -> Iterator[embedded.EmbeddedPostgres]:
    """An embedded PostgreSQL of this test's own in ``datadir``; stopped afterwards.

    pgserver stops a server by the postmaster pid it saw at start, which a restart changes:
    so it is stopped here with pg_ctl, as pgserver itself does, before pgserver's own cleanup.
    """
    server = embedded.start(datadir)
    try:
        yield server
    finally:
        with suppress(Exception):  # not running (a failed restart) is fine
            _pg_ctl(server, ["-m", "immediate", "-w", "-t", "30", "stop"])
        server.stop()


def restart(server: embedded.EmbeddedPostgres) -> None:
    """``pg_ctl -m fast restart -w``: every session is terminated and the server comes back
    with the options it was started with (its socket directory among them)."""
    _pg_ctl(server, ["-m", "fast", "-w", "-t", "60", "-l", str(server.datadir / "log"),
                     "restart"])


def _pg_ctl(server: embedded.EmbeddedPostgres, args: list[str]) -> str:
    from pgserver.postgres_server import pg_ctl

    # As root, pgserver runs PostgreSQL as the system user "pgserver": pg_ctl must run as it.
    user = getattr(server._server, "system_user", None)
    return pg_ctl(args, pgdata=server.datadir, user=user, timeout=90)


# --- roles and ports -------------------------------------------------------------------------


def as_role(url: str, user: str, password: str) -> str:
    """``url`` with another user and password (as query parameters, which take precedence)."""
    return f"{url}{'&' if '?' in url else '?'}{urlencode({'user': user, 'password': password})}"


def closed_port() -> int:
    """A local TCP port that nothing listens on (bound once, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def backend_pids(database_url: str) -> list[dict[str, Any]]:
    """Other sessions on the database of ``database_url``, with their last query."""
    conn = connect(database_url)
    try:
        return rows(conn, "SELECT pid, application_name, state, query FROM pg_stat_activity "
                          "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    finally:
        conn.close()
