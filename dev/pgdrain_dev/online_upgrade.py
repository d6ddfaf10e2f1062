"""An upgrade of a big jobs table while the app writes to it: what the online migrations are
for. Shared by the test (tests/integration/test_online_upgrade.py: writes go on while the
indexes are built) and the benchmark (bench/online_upgrade.py: the writer's longest stall,
online against in one transaction).

The writer is the app of an older version: plain SQL that every schema version accepts, one
job inserted and an older one marked done, each its own transaction, as fast as it can.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

from pgdrain.db import connect
from pgdrain.migrate import migrate

FILL = """
INSERT INTO jobs (job_type, payload, status, finished_at)
SELECT 'history', jsonb_build_object('n', g),
       CASE WHEN g % 100 = 0 THEN 'pending' WHEN g % 7 = 0 THEN 'failed' ELSE 'done' END,
       CASE WHEN g % 100 = 0 THEN NULL ELSE now() END
FROM generate_series(1, :rows) AS g
"""
WRITE = "INSERT INTO jobs (job_type, payload) VALUES ('load', '{}') RETURNING id"
FINISH = ("UPDATE jobs SET status = 'done', finished_at = now(), updated_at = now() "
          "WHERE id = :id")
BUILDS = ("SELECT count(*) FROM pg_stat_progress_create_index "
          "WHERE datname = current_database()")


@dataclass
class UpgradeRun:
    applied: list[str]
    seconds: float
    writes: int = 0
    """All the writer's commits, before, during and after the migration."""
    writes_while_migrating: int = 0
    writes_during_builds: int = 0
    """Writer commits between two looks that both saw an index being built."""
    builds_seen: int = 0
    """Looks (every 10 ms) that saw an index being built."""
    longest_stall: float = 0.0
    """The longest time between two of the writer's commits while the migration ran."""
    errors: list[str] = field(default_factory=list)


def prepare(url: str, *, rows: int, from_version: int) -> None:
    """Schema at ``from_version``, then ``rows`` jobs (mostly history, some pending)."""
    conn = connect(url)
    try:
        migrate(conn, to_version=from_version)
        conn.run(FILL, rows=rows)
        conn.run("VACUUM ANALYZE jobs")
    finally:
        conn.close()


def upgrade_under_load(url: str, *, online_above_rows: int | None = None,
                       timeout: float = 600.0) -> UpgradeRun:
    """Migrate to the latest version while a writer and a watcher run; what they saw."""
    stop = threading.Event()
    commits: list[float] = []
    errors: list[str] = []
    looks: list[tuple[int, int]] = []  # (index builds in progress, writer commits so far)

    def write() -> None:
        conn = connect(url)
        try:
            while not stop.is_set():
                job_id = conn.run(WRITE)[0][0]
                conn.run(FINISH, id=job_id)
                commits.append(time.monotonic())
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()

    def watch() -> None:
        conn = connect(url)
        try:
            while not stop.is_set():
                looks.append((int(conn.run(BUILDS)[0][0]), len(commits)))
                time.sleep(0.01)
        finally:
            conn.close()

    threads = [threading.Thread(target=write, daemon=True),
               threading.Thread(target=watch, daemon=True)]
    for thread in threads:
        thread.start()
    while not commits and not errors:
        time.sleep(0.01)
    conn = connect(url)
    started = time.monotonic()
    try:
        options = {} if online_above_rows is None else {"online_above_rows": online_above_rows}
        applied = migrate(conn, deadline=started + timeout, **options)
    finally:
        ended = time.monotonic()
        conn.close()
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    during = [started, *(t for t in commits if started <= t <= ended), ended]
    run = UpgradeRun(applied=applied, seconds=ended - started, writes=len(commits),
                     errors=errors)
    run.writes_while_migrating = len(during) - 2
    run.longest_stall = max(b - a for a, b in itertools.pairwise(during))
    run.builds_seen = sum(1 for builds, _ in looks if builds)
    run.writes_during_builds = sum(
        later[1] - earlier[1] for earlier, later in itertools.pairwise(looks)
        if earlier[0] and later[0])
    return run
