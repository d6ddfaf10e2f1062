"""Scenario 4: deadlines.

100 runs (RELIABILITY_RUNS, or times RELIABILITY_SCALE), shared by four drain processes, each
in a queue of its own and doing its runs one after another as warm invocations. A run enqueues
0-6 jobs of random duration, then invokes the function with a context that has a random
0.3-3 s left; the drain's safety margin is 0.2 s. Three quarters of the jobs are of a type with
a 0.4 s time budget and last 0-300 ms (raising 10 % of the time); the others have a 0.15 s
budget and last 200-300 ms, so the time limit stops every one of them. Both types are the
recording handler (recording_jobs.record), registered by drain_loop.py with those budgets: the
module's own ``record`` type has a 10 s budget, which never fits in these contexts.

Checked for every run:

- the function returned before the context's deadline (time left at return > 0);
- handler work stayed within the deadline minus the margin: every execution the run started
  ended (``executions.ended_at``) or was stopped by its time limit (the drain's HandlerTimeout
  entry, written right after the stop) by then, within TOLERANCE for scheduling noise;
- nothing was left running by the drain that returned: no job of its queue is ``running``
  after the return, every execution the run started ended or was stopped before the return,
  and the run started exactly as many executions as it claimed jobs it did not hand back
  (``claimed - released``), so the released jobs never started;
- its summary accounts for every claim, and no claim was lost (``stale`` 0).

The drain keeps its margin to record outcomes and return: its return may fall inside the margin
(after a job stopped at deadline minus margin, the error is still written). How far into the
margin it went is reported, and bounded by RECORDING_ALLOWANCE.
"""

from __future__ import annotations

import time

PROCESSES = 4
MARGIN = 0.2
TOLERANCE = 0.05
RECORDING_ALLOWANCE = 0.1
JOB_TYPES = {"record-fit": 0.4, "record-overrun": 0.15}
# One handler at a time, on the drain's thread, where the time limit (SIGALRM) interrupts a
# sleep or a blocking read at once: that is what lets every execution end by the deadline
# minus the margin. On worker threads (PGDRAIN_CONCURRENCY > 1) a blocking call is left only
# when it returns, and a handler still running past its limit is a runaway, recorded as timed
# out and counted ``abandoned`` if it outlives the drain (tests/integration/
# test_drain_concurrency.py).
ENV = {"PGDRAIN_SAFETY_MARGIN_SECONDS": str(MARGIN), "PGDRAIN_LEASE_SECONDS": "10",
       "PGDRAIN_BATCH_SIZE": "5", "PGDRAIN_CONCURRENCY": "1"}


def _plan(rng, queue: str, runs: int) -> dict:
    plan = {"queue": queue, "job_types": JOB_TYPES, "runs": []}
    for _ in range(runs):
        jobs = []
        for _ in range(rng.randint(0, 6)):
            if rng.random() < 0.75:
                jobs.append({"job_type": "record-fit",
                             "payload": {"seconds": round(rng.uniform(0, 0.3), 3), "fail": 0.1}})
            else:
                jobs.append({"job_type": "record-overrun",
                             "payload": {"seconds": round(rng.uniform(0.2, 0.3), 3)}})
        plan["runs"].append({"time_left": round(rng.uniform(0.3, 3.0), 3), "jobs": jobs})
    return plan


def _executions(sql) -> list[dict]:
    """Every execution with its end: ``ended_at``, or the drain's HandlerTimeout entry for that
    attempt (``cut``); epoch seconds by the database's clock."""
    return sql("""
        SELECT e.job_id, e.attempt, e.pid, e.outcome,
               extract(epoch FROM e.started_at)::float8 AS started,
               extract(epoch FROM e.ended_at)::float8 AS ended,
               (SELECT extract(epoch FROM (x->>'at')::timestamptz)::float8
                FROM jsonb_array_elements(j.errors) AS x
                WHERE (x->>'attempt')::int = e.attempt
                  AND x->>'error' LIKE 'HandlerTimeout%' LIMIT 1) AS cut
        FROM executions e JOIN jobs j ON j.id = e.job_id
        ORDER BY e.id""")


def test_deadlines(drains, audit, sql, rng, scaled, unaccounted, figures):
    runs = scaled(100, "RUNS")
    share = [runs // PROCESSES + (i < runs % PROCESSES) for i in range(PROCESSES)]
    plans = [_plan(rng, f"deadline-{i}", share[i]) for i in range(PROCESSES)]
    started = time.monotonic()
    group = drains(PROCESSES, plans=plans, **ENV)
    group.wait_all(timeout=120 + 5 * runs)
    elapsed = time.monotonic() - started

    executions = _executions(sql)
    by_pid: dict[int, list[dict]] = {}
    for execution in executions:
        by_pid.setdefault(execution["pid"], []).append(execution)

    problems = []
    records = []
    closest = float("-inf")  # how near handler work came to deadline minus margin (s after it)
    for drain, plan in zip(group, plans, strict=True):
        runs_done = drain.runs()
        assert len(runs_done) == len(plan["runs"]), drain.output()
        mine = by_pid.get(drain.pid, [])
        claimed_by_runs = 0
        for run in runs_done:
            records.append(run)
            summary = run["summary"]
            name = f"drain {drain.pid} run {run['run']} ({run['time_left']} s left)"
            if run["remaining"] <= 0:
                problems.append(f"{name}: returned {-run['remaining']:.3f} s after its deadline")
            if run["remaining"] < MARGIN - RECORDING_ALLOWANCE:
                problems.append(f"{name}: returned with {run['remaining']:.3f} s left, more "
                                f"than {RECORDING_ALLOWANCE} s into its {MARGIN} s margin")
            if unaccounted(summary) or summary["stale"]:
                problems.append(f"{name}: summary does not add up: {summary}")
            if run["running_after"]:
                problems.append(f"{name}: {run['running_after']} jobs still running")
            inside = [e for e in mine if run["start_db"] <= e["started"] <= run["returned_db"]]
            claimed_by_runs += len(inside)
            if len(inside) != summary["claimed"] - summary["released"]:
                problems.append(f"{name}: {len(inside)} executions for {summary}")
            limit = run["deadline_db"] - MARGIN + TOLERANCE
            for e in inside:
                end = e["ended"] if e["ended"] is not None else e["cut"]
                if end is None:
                    problems.append(f"{name}: execution {e} neither ended nor was stopped")
                    continue
                closest = max(closest, end - (run["deadline_db"] - MARGIN))
                if end > limit:
                    problems.append(f"{name}: execution {e} ran {end - limit + TOLERANCE:.3f} s "
                                    f"past deadline minus margin")
                elif end > run["returned_db"]:
                    problems.append(f"{name}: execution {e} ended after the drain returned")
        if claimed_by_runs != len(mine):
            problems.append(f"drain {drain.pid}: {len(mine) - claimed_by_runs} executions "
                            f"outside its runs")

    assert problems == []
    ledger = audit.ledger(allow_timeouts=True)
    assert ledger.problems == []
    assert ledger.statuses["running"] == 0
    assert audit.overlaps() == []
    assert audit.beyond_max_attempts() == []

    summaries = [r["summary"] for r in records]
    stopped = {reason: sum(s["stopped"] == reason for s in summaries)
               for reason in ("deadline", "empty", "max_jobs")}
    cut = sum(e["ended"] is None for e in executions)
    if runs >= 50:  # the scenario exercised what it is about
        assert stopped["deadline"] and stopped["empty"] and cut, (stopped, cut)
        assert sum(s["released"] for s in summaries), "no run handed jobs back"
    remaining = [r["remaining"] for r in records]
    figures("deadlines", runs=len(records), processes=PROCESSES, margin=MARGIN,
            time_left="0.3-3.0", jobs=ledger.jobs, executions=len(executions),
            stopped_by_time_limit=cut, released=sum(s["released"] for s in summaries),
            stopped_deadline=stopped["deadline"], stopped_empty=stopped["empty"],
            min_left_at_return=round(min(remaining), 3),
            returns_inside_margin=sum(r < MARGIN for r in remaining),
            max_margin_used=round(max(0.0, MARGIN - min(remaining)), 3),
            latest_handler_end_after_deadline_minus_margin=round(closest, 3),
            left_running=0, lost=0, seconds=round(elapsed, 1))
