"""Schema migrations: the numbered files in ``sql/migrations``, applied in order and recorded.

Safe to run again (applied versions are skipped) and to run concurrently: every run takes the
same advisory lock first, so a second run waits, then finds nothing left to do.

Each migration is applied whole, in one transaction, while the jobs table is small; on a big
one, the statements that build an index or check a constraint run online, outside any
transaction, so that the app's writes and the drains go on meanwhile (``migration_steps``).
The first run refuses, before creating anything, to build over objects that are not
pgdrain's (an app's own ``jobs`` table), and says how to give pgdrain a schema of its own.
"""

from __future__ import annotations

import time
from contextlib import nullcontext, suppress
from typing import Any

from . import sql
from .db import NoTimeLeft, Session, as_session, sqlstate
from .errors import MigrationError, server_text
from .migration_steps import Step, plan
from .store import MIGRATION_LOCK_KEY

ONLINE_ABOVE_ROWS = 10_000
"""From this many jobs, indexes are built and constraints checked online. Below it, building
in the migration's transaction holds writes back for milliseconds, and the migration stays
all or nothing."""

BRIEF_LOCK_MS = 2_000
"""With a deadline: how long a step in a transaction (an ALTER TABLE, whose lock holds every
write back while it waits) waits for its lock before it gives up and tries again later."""
_LOCK_NOT_AVAILABLE = "55P03"
_RETRY_PAUSE_SECONDS = 1.0


def migrate(conn: Any, *, deadline: float | None = None, to_version: int | None = None,
            online_above_rows: int = ONLINE_ABOVE_ROWS) -> list[str]:
    """Bring the schema up to date; return the migrations applied now.

    ``conn`` must be a pg8000 native connection outside any transaction (pgdrain commits on
    it). ``deadline`` (``time.monotonic()``) bounds an online step's waits: a step that
    cannot get its lock before then fails, and the next run resumes where this one stopped.
    ``to_version`` stops after that migration (an upgrade in stages; tests of upgrades).
    """
    session = as_session(conn)
    session.rows("migration_lock", lock_key=MIGRATION_LOCK_KEY)
    failed = True
    try:
        with session.transaction():
            _prepare(session)
            done = {r["version"] for r in session.rows("migration_applied")}
        pending = [m for m in sql.migrations()
                   if m[0] not in done and (to_version is None or m[0] <= to_version)]
        online = bool(pending) and _big(session, online_above_rows)
        applied_now: list[str] = []
        for version, name, script in pending:
            label = f"{version:04d}_{name}"
            try:
                _apply(session, plan(script, online=online), version, name, deadline)
            except Exception as exc:
                raise MigrationError(f"migration {label} failed: {server_text(exc)}") from exc
            applied_now.append(label)
        failed = False
        return applied_now
    finally:
        # After a failure the connection may be gone (its session's lock with it): the
        # failure is what to report.
        with suppress(Exception) if failed else nullcontext():
            session.rows("migration_unlock", lock_key=MIGRATION_LOCK_KEY)


def _prepare(session: Session) -> None:
    """Create the schema and the record of migrations, refusing objects that are not ours."""
    if session.rows("migration_table_exists")[0]["present"]:
        return
    schema = sql.schema_in_use()
    if schema is not None:
        # Not a catalogue statement: a schema's name cannot be a parameter. It is one the
        # PGDRAIN_SCHEMA setting accepted (lowercase letters, digits and _), quoted.
        session.run_script(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    found = session.rows("migration_strangers", names=sorted(sql.objects()))[0]
    if found["schema"] is None:
        raise MigrationError(
            "the connection's search_path names no schema that exists, so there is nowhere "
            "to create pgdrain's tables: set PGDRAIN_SCHEMA (e.g. pgdrain) and migrate again")
    if found["found"]:
        where = found["schema"]
        raise MigrationError(
            f"schema {where} already has {', '.join(found['found'])}, not created by pgdrain "
            f"(there is no pgdrain_migrations beside it); nothing was created. Give pgdrain a "
            f"schema of its own: set PGDRAIN_SCHEMA=pgdrain (the same for the functions, the "
            f"CLI and your app's enqueues) and migrate again")
    session.rows("migration_create_table")


def _big(session: Session, rows: int) -> bool:
    """Whether the jobs table has at least ``rows`` rows (False when it is not there yet)."""
    with session.transaction():
        if not session.rows("migration_jobs_exist")[0]["present"]:
            return False
        return int(session.rows("migration_jobs_rows", limit=rows)[0]["rows"]) >= rows


def _apply(session: Session, steps: list[Step], version: int, name: str,
           deadline: float | None) -> None:
    """Run one migration's steps and record it: with its last transaction, so that a
    migration applied in one step is recorded with its changes or not at all."""
    for position, step in enumerate(steps):
        last = position == len(steps) - 1
        if step.alone:
            _run_alone(session, step, deadline)
            if last:
                with session.transaction():
                    session.rows("migration_record", version=version, name=name)
            continue
        _with_retry(lambda step=step, last=last: _run_together(session, step, version, name,
                                                               last, deadline), deadline)


def _run_together(session: Session, step: Step, version: int, name: str, last: bool,
                  deadline: float | None) -> None:
    _bound(session, deadline, lock_ms=BRIEF_LOCK_MS)
    with session.transaction():
        session.run_script(step.sql)
        if last:
            session.rows("migration_record", version=version, name=name)


def _run_alone(session: Session, step: Step, deadline: float | None) -> None:
    """A statement outside any transaction; a build that failed before is dropped first."""
    def attempt() -> None:
        # A concurrent build waits for the transactions already running to end: a wait that
        # holds no write back, so it may last as long as there is time.
        _bound(session, deadline, lock_ms=None)
        if step.builds_index:
            found = session.one("migration_index_valid", index_name=step.builds_index)
            if found is not None and not found["valid"]:
                # As the build itself: CONCURRENTLY, so the drop holds no writes back either.
                session.run_script(f"DROP INDEX CONCURRENTLY IF EXISTS {step.builds_index}")
        session.run_script(step.sql)
    _with_retry(attempt, deadline)


def _bound(session: Session, deadline: float | None, *, lock_ms: int | None) -> None:
    """Bound the next statements by the time left to ``deadline`` (on the server and the
    socket), their lock waits by ``lock_ms`` (None: the time left too)."""
    if deadline is None:
        return
    left_ms = int((deadline - time.monotonic()) * 1000)
    if left_ms <= 0:
        raise NoTimeLeft("no time left to migrate in")
    session.one("connection_bound", statement_ms=left_ms,
                lock_ms=left_ms if lock_ms is None else min(lock_ms, left_ms),
                idle_ms=min(left_ms, BRIEF_LOCK_MS))
    sock = getattr(session.conn, "_usock", None)
    if sock is not None:
        # A little past the server's own bound, so that the server says why it stopped.
        sock.settimeout(left_ms / 1000 + 5)


def _with_retry(run: Any, deadline: float | None) -> None:
    """Run ``run``; while it fails for want of a lock (lock_timeout: another session holds the
    table, and waiting longer would queue every write behind this one) and time is left, try
    again. Without a deadline, one try."""
    while True:
        try:
            run()
            return
        except Exception as exc:
            retry = (sqlstate(exc) == _LOCK_NOT_AVAILABLE and deadline is not None
                     and time.monotonic() + _RETRY_PAUSE_SECONDS < deadline)
            if not retry:
                raise
        time.sleep(_RETRY_PAUSE_SECONDS)


def status(conn: Any) -> list[dict[str, Any]]:
    """Every migration this version of pgdrain has, in order, and when each was applied to
    this database (None: not yet). Reads only; an unmigrated database has none applied."""
    session = as_session(conn)
    applied: dict[int, Any] = {}
    if session.rows("migration_table_exists")[0]["present"]:
        applied = {r["version"]: r["applied_at"] for r in session.rows("migration_applied")}
    return [{"version": version, "name": name, "applied_at": applied.get(version)}
            for version, name, _ in sql.migrations()]
