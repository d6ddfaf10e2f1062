"""A job that never started is never charged (issue: faults, item 2).

A drain claims a batch and runs it one job after another. When a job kills its own process
(an out-of-memory kill, Lambda's own timeout), the jobs behind it never started; SQS, River and
Oban would all charge them the receive or attempt. Here the janitor charges only a claim whose
start was recorded, and a start is recorded only for a job that was in a lost claim before,
which is then claimed alone (the claim records it): the batch-mates of a killer come back with
their attempt and run once, while the killer, alone from then on, is charged for each death and
ends failed.
"""

from __future__ import annotations

import json
import signal

import pgdrain
from tests.functions import conftest as function_fixtures

function_env = function_fixtures.function_env
drain_process = function_fixtures.drain_process

ENV = {"PGDRAIN_LEASE_SECONDS": "60", "PGDRAIN_BACKOFF_BASE_SECONDS": "0",
       "PGDRAIN_BATCH_SIZE": "10"}


def _expire(sql) -> None:
    sql("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
        "WHERE status = 'running'")


def test_a_killer_ahead_of_nine_jobs_never_costs_them_an_attempt(drain_process, conn, sql):
    # The nine could not survive a single charge (max_attempts 1).
    killer = pgdrain.enqueue(conn, "test-kill", priority=-1, max_attempts=2).id
    innocent = [r.id for r in pgdrain.enqueue_many(
        conn, [{"job_type": "test-noop", "max_attempts": 1}] * 9)]

    rounds = []
    while sql("SELECT status FROM jobs WHERE id = :id", id=killer)[0]["status"] != "failed":
        assert len(rounds) < 6, rounds
        process = drain_process(10, **ENV)
        output, _ = process.communicate(timeout=60)
        rounds.append((process.returncode,
                       sql("SELECT count(*) AS n FROM jobs WHERE status = 'done'")[0]["n"]))
        _expire(sql)
    # Killed three times, the nine claimed behind it each time: the first death was not
    # charged (no start recorded), the next two were. The fourth drain's janitor dead-letters
    # the killer, and the nine run, once each.
    assert rounds == [(-signal.SIGKILL, 0)] * 3 + [(0, 9)], rounds
    summary = json.loads(output.split("SUMMARY ", 1)[1])
    assert (summary["reclaimed_failed"], summary["reclaimed_refunded"], summary["done"]) == (
        1, 0, 9), summary

    rows = {r["id"]: r for r in sql("SELECT id, status, attempts, lost_claims, errors FROM jobs")}
    assert (rows[killer]["status"], rows[killer]["attempts"], rows[killer]["lost_claims"]) == (
        "failed", 2, 1)
    assert [e["error"][:13] for e in rows[killer]["errors"]] == ["lease expired"] * 2
    for ident in innocent:
        # One lost claim, not charged: after it the killer was claimed alone, so they never
        # shared its claim again. Done on their only attempt, no error recorded.
        assert (rows[ident]["status"], rows[ident]["attempts"], rows[ident]["errors"],
                rows[ident]["lost_claims"]) == ("done", 1, [], 1)
