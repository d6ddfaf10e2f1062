"""The backlog the drain reports in its metrics, read through the claim's index.

The drain used to call ``stats()`` after every invocation: a ``GROUP BY queue, status`` over
the whole table, 200 ms with a million retained done rows and past the deadline with several
million. ``backlog()`` reads only pending rows through ``jobs_pending_idx``: its cost does not
grow with the finished history.
"""

from __future__ import annotations

import json

import pgdrain
from pgdrain.sql import QUERIES


def _plan(sql, name: str, **params) -> dict:
    statement = QUERIES[name].replace(":queues::text[]", "NULL::text[]")
    for key, value in params.items():
        statement = statement.replace(f":{key}::int", str(int(value)))
    [[text]] = [list(r.values()) for r in sql(
        f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}")]
    return (json.loads(text) if isinstance(text, str) else text)[0]["Plan"]


def _nodes(plan: dict) -> list[dict]:
    return [plan, *[n for child in plan.get("Plans", []) for n in _nodes(child)]]


def _buffers(plan: dict) -> int:
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]


def test_backlog_counts_due_jobs_and_the_oldest_wait_across_priorities(conn, sql):
    assert pgdrain.backlog(conn) == pgdrain.Backlog(due=0, oldest_due_seconds=0.0)
    sql("""INSERT INTO jobs (job_type, priority, run_at) VALUES
           ('a', 0, now() - interval '30 seconds'),
           ('a', 0, now() - interval '10 seconds'),
           ('b', 5, now() - interval '90 seconds'),
           ('b', 5, now() + interval '1 hour'),
           ('c', -3, now() + interval '1 hour')""")
    sql("INSERT INTO jobs (job_type, status, run_at) "
        "VALUES ('done', 'done', now() - interval '1 day')")
    found = pgdrain.backlog(conn)
    assert found.due == 3
    assert 90 <= found.oldest_due_seconds < 100  # priority 5's, behind priority 0's
    assert pgdrain.backlog(conn, cap=2).due == 2


def test_backlog_reads_stay_small_however_much_history_is_kept(conn, sql):
    sql("INSERT INTO jobs (job_type, status, finished_at) "
        "SELECT 'old', 'done', now() FROM generate_series(1, 50000)")
    sql("INSERT INTO jobs (job_type, priority) SELECT 'new', g % 3 FROM generate_series(1, 20) g")
    sql("VACUUM ANALYZE jobs")
    backlog = _plan(sql, "job_backlog", cap=10_000)
    stats = _plan(sql, "job_stats_by_status")
    # pgdrain_queues (a row per queue set at run time) may be scanned; jobs never.
    assert not [n for n in _nodes(backlog) if n["Node Type"] == "Seq Scan"
                and n.get("Relation Name") == "jobs"], backlog
    # Fifty thousand done rows fill a few hundred pages; the backlog reads a handful.
    assert _buffers(stats) > 300
    assert _buffers(backlog) < 40, _buffers(backlog)


def test_the_backlog_queue_by_queue_counts_paused_queues_apart(conn, sql):
    """What the drain's per-queue metrics and its alarms read: each queue's due jobs and
    oldest wait across priorities (not the delayed ones), the longest waits first; a paused
    queue's jobs are counted apart, and so is a paused queue with no jobs."""
    from pgdrain import store

    assert store.backlog_by_queue(conn) == store.QueueBacklogs()
    sql("""INSERT INTO jobs (job_type, queue, priority, run_at) VALUES
           ('a', 'emails', 0, now() - interval '30 seconds'),
           ('a', 'emails', 5, now() - interval '90 seconds'),
           ('a', 'emails', 0, now() + interval '1 hour'),
           ('b', 'reports', 0, now() - interval '600 seconds'),
           ('c', 'later', 0, now() + interval '1 hour')""")
    sql("INSERT INTO jobs (job_type, queue, status) VALUES ('d', 'old', 'done')")
    pgdrain.pause(conn, "reports")
    pgdrain.pause(conn, "quiet", new=True)
    found = store.backlog_by_queue(conn)
    assert [(q.queue, q.due, q.paused) for q in found.queues] == [
        ("reports", 1, True), ("emails", 2, False)]
    assert 600 <= found.queues[0].oldest_due_seconds < 610
    assert 90 <= found.queues[1].oldest_due_seconds < 100
    assert (found.due, found.paused_due, found.queues_paused) == (2, 1, 2)
    assert 90 <= found.oldest_due_seconds < 100  # the paused queue's wait pages nobody
    assert store.backlog_by_queue(conn, cap=1).queues[1].due == 1
    # The pairs read are bounded: the first (queue, priority) pair only, in name order.
    [first] = store.backlog_by_queue(conn, most_pairs=1).queues
    assert (first.queue, first.due) == ("emails", 1)


def test_the_backlog_queue_by_queue_reads_only_the_pending_index(conn, sql):
    sql("INSERT INTO jobs (job_type, status, finished_at) "
        "SELECT 'old', 'done', now() FROM generate_series(1, 50000)")
    sql("INSERT INTO jobs (job_type, queue, priority, run_at) "
        "SELECT 'later', 'q' || (g % 4), g % 2, now() + interval '1 hour' "
        "FROM generate_series(1, 20000) g")
    sql("INSERT INTO jobs (job_type, queue, priority) "
        "SELECT 'new', 'q' || (g % 4), g % 2 FROM generate_series(1, 20) g")
    sql("VACUUM ANALYZE jobs")
    plan = _plan(sql, "job_backlog_by_queue", cap=10_000, most_pairs=1_000)
    assert not [n for n in _nodes(plan) if n["Node Type"] == "Seq Scan"
                and n.get("Relation Name") == "jobs"], plan
    # Neither the history nor the delayed jobs are read: a handful of index pages.
    assert _buffers(plan) < 80, _buffers(plan)
