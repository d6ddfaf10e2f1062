"""Scenario 2: kills.

Over 50 rounds (RELIABILITY_ROUNDS, or times RELIABILITY_SCALE), each round enqueues 40
``record`` jobs (sleeps of 0-10 ms, 10 % raising, max_attempts 1-4, 1.5 % killing their own
process on some attempts via ``kill_on``), starts two drain processes, and SIGKILLs each of
them (with probability 0.85) at a random moment 0-300 ms after it starts invoking the function:
in its janitor, during a claim, inside a handler, between a handler's end and the finishing
write (done writes are batched), or between invocations. A process that is not killed drains
until it finds nothing due (at most 3 invocations).

Time passing is simulated: between rounds, once every drain process is dead, every lease is
expired by SQL (the function's lease must outlast its timeout, so waiting for real leases would
take 20 s a round). The next round's janitor then reclaims them. After the last round, drains
run (leases expired before each) until every job is done or failed.

Checked: nothing is lost (every job ends done or failed); attempts stay within max_attempts;
each charged attempt ran at most once, and the next attempt of a killed execution started only
after its process was dead; every attempt that did not succeed has one ``errors`` entry saying
why; the claims the kills left behind (each classified when its process died: killed inside
the handler, killed after the handler before its outcome was written, or claimed and never
started) were charged by the janitor ("lease expired") exactly when the drain had recorded the
job's start, and refunded (``lost_claims``) otherwise, so an attempt number ran again only
after a refund, in a killed process; a failed job's ``last_error`` is its last entry; and no
drain that returned lost a claim (``stale`` is 0) or left one unaccounted.
"""

from __future__ import annotations

import json
import time
from collections import Counter

JOBS_PER_ROUND = 40
PROCESSES_PER_ROUND = 2
KILL_PROBABILITY = 0.85
KILL_WINDOW = 0.3
# The record handler's 10 s budget plus the drain's 2 s margin must fit in the context, and the
# lease must outlast the context. Small batches and few jobs per invocation make more moments
# (claims, finishing writes, invocation boundaries) for a kill to land in.
TIMEOUT = 15
ENV = {"PGDRAIN_LEASE_SECONDS": "20", "PGDRAIN_BATCH_SIZE": "5", "PGDRAIN_MAX_JOBS": "25"}


def _enqueue(sql, rng, count: int) -> None:
    payloads, max_attempts = [], []
    for _ in range(count):
        payload = {"seconds": round(rng.uniform(0, 0.01), 4), "fail": 0.1}
        if rng.random() < 0.015:
            payload["kill_on"] = rng.choice([[1], [2], [1, 2, 3, 4]])
        payloads.append(json.dumps(payload))
        max_attempts.append(rng.randint(1, 4))
    sql("INSERT INTO jobs (job_type, payload, max_attempts) "
        "SELECT 'record', p, m FROM unnest(CAST(:payloads AS jsonb[]), CAST(:max AS int[])) "
        "AS t(p, m)", payloads=payloads, max=max_attempts)


def _lost_claims(sql) -> list[dict]:
    """The claims dead drains left behind: running jobs whose lease the test has not expired,
    each with the state of its current attempt's execution and the process that ran it."""
    return sql("""
        SELECT j.id, j.attempts, e.pid, j.started_at IS NOT NULL AS recorded,
               CASE WHEN e.id IS NULL THEN 'unstarted'
                    WHEN e.ended_at IS NULL THEN 'in_handler'
                    ELSE 'unwritten' END AS state,
               coalesce(j.payload->'kill_on' @> to_jsonb(j.attempts), false) AS self_kill
        FROM jobs j
        LEFT JOIN LATERAL (
            SELECT * FROM executions x
            WHERE x.job_id = j.id AND x.attempt = j.attempts AND x.started_at >= j.claimed_at
            ORDER BY x.started_at DESC LIMIT 1) e ON true
        WHERE j.status = 'running' AND j.lease_expires_at > now()""")


def _after_deaths(audit, sql, group, born, stats: Counter) -> None:
    """Record which processes died (and when), and classify the claims they left behind."""
    audit.quiesce()
    died_by = audit.now()
    lost = _lost_claims(sql)
    stats.update(f"claims_{claim['state']}" for claim in lost)
    stats.update("claims_recorded" if claim["recorded"] else "claims_unrecorded"
                 for claim in lost)
    for drain in group:
        if not drain.killed:
            stats["claims_left_by_drains_that_exited"] += sum(c["pid"] == drain.pid
                                                              for c in lost)
            continue
        audit.record_death(drain.pid, born, died_by)
        own = [c for c in lost if c["pid"] == drain.pid]
        if any(c["state"] == "in_handler" and c["self_kill"] for c in own):
            stats["killed_by_kill_on_job"] += 1
            continue
        stats["killed_by_test"] += 1
        if any(c["state"] == "in_handler" for c in own):
            stats["test_kill_in_handler"] += 1
        elif own:
            stats["test_kill_before_finishing_write"] += 1
        else:  # in the janitor, a claim, between jobs or invocations: nothing of its own open
            stats["test_kill_elsewhere"] += 1


def test_kills_lose_nothing(drains, audit, sql, rng, scaled, unaccounted, figures):
    rounds = scaled(50, "ROUNDS")
    stats: Counter = Counter()
    summaries: list[dict] = []
    started = time.monotonic()

    for _ in range(rounds):
        _enqueue(sql, rng, JOBS_PER_ROUND)
        audit.expire_leases()  # every drain is dead: time passes, their leases run out
        born = audit.now()
        group = drains(PROCESSES_PER_ROUND, timeout=TIMEOUT, until="idle", max_invocations=3,
                       max_seconds=30, **ENV)
        group.wait_ready()
        kills = [(drain.ready_at + rng.uniform(0, KILL_WINDOW), drain) for drain in group
                 if rng.random() < KILL_PROBABILITY]
        for at, drain in sorted(kills, key=lambda k: k[0]):
            time.sleep(max(0.0, at - time.monotonic()))
            drain.kill()
        group.wait_all(timeout=60, allow_killed=True)
        summaries += group.summaries()
        stats["processes"] += len(group)
        stats["kills_sent"] += len(kills)
        _after_deaths(audit, sql, group, born, stats)

    # Later drains, after the leases expire, finish everything (jobs with kill_on still kill
    # them on their listed attempts).
    cleanup = 0
    while sql("SELECT count(*) AS n FROM jobs WHERE status IN ('pending', 'running')")[0]["n"]:
        cleanup += 1
        assert cleanup <= 200, f"jobs still unfinished after {cleanup} cleanup drains"
        audit.expire_leases()
        born = audit.now()
        group = drains(1, timeout=TIMEOUT, until="empty", max_seconds=10, **ENV)
        group.wait_all(timeout=60, allow_killed=True)
        summaries += group.summaries()
        stats["processes"] += 1
        _after_deaths(audit, sql, group, born, stats)
    elapsed = time.monotonic() - started

    jobs = rounds * JOBS_PER_ROUND
    statuses = audit.statuses()
    ledger = audit.ledger()
    lost = jobs - statuses["done"] - statuses["failed"]
    lost_claims = sum(stats[f"claims_{state}"]
                      for state in ("unstarted", "in_handler", "unwritten"))

    # Nothing lost: every job ends done or failed.
    assert sum(statuses.values()) == jobs
    assert lost == 0, statuses
    # Attempts within bounds; each attempt ran at most once; no overlap, killed ones included.
    assert audit.beyond_max_attempts() == []
    assert audit.overlaps() == []
    assert audit.open_executions_of_live_processes() == []
    # The record says why: one entry per unsuccessful attempt, matching its execution, and the
    # janitor's entries are exactly the claims that the dead drains left behind.
    assert ledger.problems == []
    # Never charged what may not have run: a lost claim whose start was never recorded was
    # refunded (lost_claims), one with a recorded start was charged ("lease expired").
    assert ledger.reasons[audit.LEASE_EXPIRED] == stats["claims_recorded"], (
        ledger.reasons, stats)
    assert ledger.lost_claims == stats["claims_unrecorded"], (ledger.lost_claims, stats)
    assert stats["claims_recorded"] + stats["claims_unrecorded"] == lost_claims
    assert sql("SELECT count(*) AS n FROM jobs WHERE status = 'failed' "
               "AND last_error IS DISTINCT FROM errors->-1->>'error'")[0]["n"] == 0
    # Drains that returned accounted for every claim and never lost one while alive.
    assert [s for s in summaries if unaccounted(s) or s["stale"]] == []
    assert stats["claims_left_by_drains_that_exited"] == 0, stats
    if rounds >= 20:  # the faults were really injected, and left claims behind
        assert stats["killed_by_test"] >= rounds // 2, stats
        assert stats["claims_in_handler"] and stats["claims_unwritten"], stats

    figures("kills", rounds=rounds, cleanup_drains=cleanup, processes=stats["processes"],
            kills_sent=stats["kills_sent"],
            kills=stats["killed_by_test"] + stats["killed_by_kill_on_job"],
            by_test=stats["killed_by_test"], by_kill_on_job=stats["killed_by_kill_on_job"],
            test_kill_in_handler=stats["test_kill_in_handler"],
            test_kill_before_finishing_write=stats["test_kill_before_finishing_write"],
            test_kill_elsewhere=stats["test_kill_elsewhere"],
            claims_lost_in_handler=stats["claims_in_handler"],
            claims_lost_unwritten=stats["claims_unwritten"],
            claims_lost_unstarted=stats["claims_unstarted"],
            charged_by_janitor=ledger.reasons[audit.LEASE_EXPIRED],
            refunded_by_janitor=ledger.lost_claims,
            uncharged_reruns=ledger.uncharged_executions, jobs=jobs,
            executions=ledger.executions, done=statuses["done"], failed=statuses["failed"],
            lost=lost, seconds=round(elapsed, 1))
