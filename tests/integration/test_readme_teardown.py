"""The README's teardown SQL and plain-SQL requeue, run as written: the teardown leaves
nothing of pgdrain in a migrated database; the requeue gives a failed job fresh attempts."""

from __future__ import annotations

import re
from pathlib import Path

import pgdrain

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
TEARDOWN = re.search(r"<!-- teardown -->\n```sql\n(.*?)```", README, re.DOTALL)[1]
PLAIN_SQL = re.search(r"Plain SQL works too:\n\n```sql\n(.*?)```", README, re.DOTALL)[1]


def test_the_teardown_leaves_nothing_of_pgdrain(conn, sql):
    pgdrain.enqueue(conn, "a")
    conn.run(TEARDOWN)
    left = sql("""
        SELECT c.relname AS name FROM pg_class AS c
        JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND (c.relname = 'jobs' OR c.relname LIKE 'pgdrain%')
        UNION ALL
        SELECT p.proname FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
        WHERE n.nspname = current_schema() AND p.proname LIKE 'pgdrain%'""")
    assert left == []


def test_the_plain_sql_requeue_gives_a_failed_job_fresh_attempts(conn, sql):
    statements = re.sub(r"--[^\n]*", "", PLAIN_SQL).split(";")
    [insert, requeue] = [s.strip() for s in statements if s.strip()]
    conn.run(insert)
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    pgdrain.fail(conn, job, "boom")
    sql("UPDATE jobs SET attempts = max_attempts")  # out of attempts, as a dead letter is
    conn.run(requeue)
    [row] = sql("SELECT status, attempts, finished_at FROM jobs")
    assert (row["status"], row["attempts"], row["finished_at"]) == ("pending", 0, None)
    [again] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    assert again.attempts == 1
