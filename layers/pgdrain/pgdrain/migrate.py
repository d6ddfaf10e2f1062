"""Schema migrations: the numbered files in ``sql/migrations``, applied in order and recorded.

Safe to run again (applied versions are skipped) and to run concurrently: every run takes the
same advisory lock first, so a second run waits, then finds nothing left to do.
"""

from __future__ import annotations

from typing import Any

from .db import as_session
from .errors import MigrationError, server_text
from .sql import migrations
from .store import MIGRATION_LOCK_KEY


def migrate(conn: Any) -> list[str]:
    """Bring the schema up to date in one transaction; return the migrations applied now.

    ``conn`` must be a pg8000 native connection (pgdrain commits on it).
    """
    session = as_session(conn)
    applied_now: list[str] = []
    with session.transaction():
        session.rows("migration_lock", lock_key=MIGRATION_LOCK_KEY)
        if not session.rows("migration_table_exists")[0]["present"]:
            session.rows("migration_create_table")
        done = {r["version"] for r in session.rows("migration_applied")}
        for version, name, sql in migrations():
            if version in done:
                continue
            try:
                session.run_script(sql)
            except Exception as exc:
                raise MigrationError(f"migration {version:04d}_{name} failed: "
                                     f"{server_text(exc)}") from exc
            session.rows("migration_record", version=version, name=name)
            applied_now.append(f"{version:04d}_{name}")
    return applied_now


def status(conn: Any) -> list[dict[str, Any]]:
    """Every migration this version of pgdrain has, in order, and when each was applied to
    this database (None: not yet). Reads only; an unmigrated database has none applied."""
    session = as_session(conn)
    applied: dict[int, Any] = {}
    if session.rows("migration_table_exists")[0]["present"]:
        applied = {r["version"]: r["applied_at"] for r in session.rows("migration_applied")}
    return [{"version": version, "name": name, "applied_at": applied.get(version)}
            for version, name, _ in migrations()]
