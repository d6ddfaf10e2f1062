"""Scenario 1: exactly once while a lease lives.

Eight drain processes drain 20,000 ``record`` jobs at once (RELIABILITY_JOBS, or times
RELIABILITY_SCALE), each invoking the function in a loop until nothing is pending or running.
Every execution raises with probability 0.1; a job that raises is retried (quick backoff) and
fails after its 3 attempts. Leases (120 s) outlast the contexts (60 s), so no lease expires and
every claim is finished by the drain that made it.

Checked: every job ends done or failed; each attempt of each job ran exactly once and the
executions of a job never overlap in time (each ended before the next one started); attempts
never exceed max_attempts; every attempt's record in the table matches its execution; and the
drains' summaries add up to the table (the identities follow from pgdrain.drain: each claim spends
an attempt and ends in exactly one outcome; release and snooze refund the attempt; retry, fail
and the janitor's reclaim each append one ``errors`` entry).
"""

from __future__ import annotations

import os
import time

PROCESSES = int(os.environ.get("RELIABILITY_PROCESSES") or 8)


def test_exactly_once_while_a_lease_lives(drains, audit, sql, scaled, add_up, unaccounted,
                                          figures):
    jobs = scaled(20_000, "JOBS")
    sql("INSERT INTO jobs (job_type, payload) "
        "SELECT 'record', '{\"fail\": 0.1}' FROM generate_series(1, :n)", n=jobs)

    started = time.monotonic()
    group = drains(PROCESSES, timeout=60, until="empty", max_seconds=240 * max(1, jobs / 20_000))
    group.wait_all(timeout=300 * max(1, jobs / 20_000))
    elapsed = time.monotonic() - started

    summaries = group.summaries()
    total = add_up(summaries)
    statuses = audit.statuses()
    ledger = audit.ledger()
    table = sql("""
        SELECT (SELECT coalesce(sum(attempts), 0) FROM jobs)::int AS attempts,
               (SELECT coalesce(sum(jsonb_array_length(errors)), 0) FROM jobs)::int AS errors,
               (SELECT count(*) FROM executions)::int AS executions,
               (SELECT count(*) FROM executions WHERE outcome = 'raised')::int AS raised,
               (SELECT count(*) FROM executions WHERE outcome = 'returned')::int AS returned
    """)[0]

    # Every job ends done or failed.
    lost = jobs - statuses["done"] - statuses["failed"]
    assert sum(statuses.values()) == jobs
    assert lost == 0, f"jobs neither done nor failed: {statuses}"

    # Exactly once: every attempt ran once, and a job's executions never overlap in time.
    assert audit.overlaps() == []
    assert audit.open_executions_of_live_processes() == []
    assert audit.beyond_max_attempts() == []
    assert ledger.problems == []
    assert set(ledger.reasons) <= {audit.RAISED}, ledger.reasons  # no lease ever expired
    assert table["executions"] == table["attempts"] == ledger.attempts

    # The summaries add up to the table.
    assert [s for s in summaries if unaccounted(s)] == []
    assert (total["reclaimed"], total["stale"], total["released"], total["snoozed"],
            total["purged"]) == (0, 0, 0, 0, 0), total
    assert statuses["done"] == total["done"] == table["returned"]
    assert statuses["failed"] == total["failed"] + total["reclaimed_failed"]
    assert table["attempts"] == total["claimed"] - total["released"] - total["snoozed"]
    assert table["executions"] == total["claimed"] - total["released"]
    assert table["raised"] == total["retried"] + total["failed"]
    assert table["errors"] == total["retried"] + total["failed"] + total["reclaimed"]
    if jobs >= 1000:  # the faults were really injected, at about the rate asked for
        assert 0.07 < table["raised"] / table["executions"] < 0.13, table

    figures("exactly-once", processes=PROCESSES, invocations=len(summaries), jobs=jobs,
            executions=table["executions"], raised=table["raised"], retried=total["retried"],
            done=statuses["done"], failed=statuses["failed"], lost=lost,
            overlaps=0, duplicate_runs=0, over_max_attempts=0,
            seconds=round(elapsed, 1), jobs_per_second=round(jobs / elapsed))
