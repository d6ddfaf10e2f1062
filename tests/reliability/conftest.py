"""The reliability suite: the real drain function in separate processes against real PostgreSQL.

Each drain process runs ``drain_loop.py``, which invokes ``functions/drain/app.py``'s
``lambda_handler`` repeatedly (warm invocations of one container) and writes one JSON line per
invocation. Jobs are of the ``record`` type (recording_jobs.py), which records every execution
(job id, attempt, pid, start, end, outcome) in the ``executions`` table, so the tests can check
what ran against what the queue and the drains say.

Sizes: ``RELIABILITY_SCALE`` multiplies them (default 1, sized for CI on two cores; the soak
runs e.g. ``RELIABILITY_SCALE=10``). ``RELIABILITY_SEED`` replays the tests' own random choices
(the handlers' random failures and the processes' interleaving are not reproducible). Each
scenario prints one line of figures, starting with ``RELIABILITY``; see them with ``-s``.
(``PGDRAIN_*`` variables cannot carry these: the root conftest removes them.)
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.drains import KEEP_HISTORY_SECONDS

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "drain_loop.py"


def _executions_ddl() -> str:
    # Read, not imported: importing the job module would register its "record" handler in this
    # process's REGISTRY, which the other tests' loaded functions share.
    tree = ast.parse((HERE / "recording_jobs.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["EXECUTIONS_DDL"]:
            return ast.literal_eval(node.value)
    raise LookupError("recording_jobs.py defines no EXECUTIONS_DDL")


EXECUTIONS_DDL = _executions_ddl()

SCALE = float(os.environ.get("RELIABILITY_SCALE") or 1)

# Who died when: a drain process killed (by a test, or by a kill_on job) between born_after and
# died_by (database clock). An execution left open (ended_at NULL) by a process that died is a
# killed execution; the next attempt of its job must start after died_by.
DEATHS_DDL = """
CREATE TABLE IF NOT EXISTS drain_deaths (
    pid         int NOT NULL,
    born_after  timestamptz NOT NULL,
    died_by     timestamptz NOT NULL
)
"""

# What every drain process gets, as a deployed function would; tests override per scenario.
DRAIN_ENV = {
    "PGDRAIN_JOBS": "tests.reliability.recording_jobs",
    "PGDRAIN_BATCH_SIZE": "50",
    # The drain refuses a lease that does not outlast the context's time left.
    "PGDRAIN_LEASE_SECONDS": "120",
    # Quick retries, so that a scenario's retries come due within seconds.
    "PGDRAIN_BACKOFF_BASE_SECONDS": "0.05",
    "PGDRAIN_BACKOFF_CAP_SECONDS": "0.5",
    # The ledger is checked against the jobs' rows: done ones are kept.
    "PGDRAIN_RETENTION_SECONDS": str(KEEP_HISTORY_SECONDS),
    "POWERTOOLS_LOG_LEVEL": "WARNING",
    "POWERTOOLS_SERVICE_NAME": "pgdrain-reliability",
    "POWERTOOLS_METRICS_NAMESPACE": "pgdrain-reliability",
}

SUMMARY_COUNTS = ("reclaimed", "claimed", "done", "retried", "failed", "released", "snoozed",
                  "stale", "reclaimed_failed", "purged")
OUTCOMES = ("done", "retried", "failed", "released", "snoozed", "stale")


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.reliability)


def _scaled(default: int, name: str | None = None) -> int:
    if name and os.environ.get(f"RELIABILITY_{name}"):
        return int(os.environ[f"RELIABILITY_{name}"])
    return max(1, round(default * SCALE))


def _totals(summaries: Iterable[dict[str, Any]]) -> Counter:
    total: Counter = Counter({name: 0 for name in SUMMARY_COUNTS})
    for summary in summaries:
        total.update({name: summary[name] for name in SUMMARY_COUNTS})
    return total


def _unaccounted(summary: dict[str, Any]) -> int:
    return summary["claimed"] - sum(summary[outcome] for outcome in OUTCOMES)


def _figures(scenario: str, **values: Any) -> str:
    line = f"RELIABILITY {scenario}: " + ", ".join(f"{k}={v}" for k, v in values.items())
    print(line)
    return line


@pytest.fixture
def scaled():
    """``scaled(default, "NAME")``: a size, ``RELIABILITY_NAME`` if set, else ``default`` times
    RELIABILITY_SCALE."""
    return _scaled


@pytest.fixture
def add_up():
    """``add_up(summaries)``: the drains' summary counts added up (a Counter)."""
    return _totals


@pytest.fixture
def unaccounted():
    """``unaccounted(summary)``: claimed jobs a drain that returned does not account for; 0
    when each claim has exactly one outcome (done, retried, failed, released, snoozed,
    stale)."""
    return _unaccounted


@pytest.fixture
def figures():
    """``figures(scenario, **values)``: print the scenario's one-line summary (see it with -s)
    and return it."""
    return _figures


@dataclass
class Drain:
    """One drain process (drain_loop.py) and its output files."""

    process: subprocess.Popen
    out: Path
    log: Path
    kill_sent: bool = False
    ready_at: float | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def records(self) -> list[dict[str, Any]]:
        """The JSON lines written so far (a line cut short by a kill is skipped)."""
        if not self.out.exists():
            return []
        records = []
        for line in self.out.read_text().splitlines():
            with suppress(json.JSONDecodeError):
                records.append(json.loads(line))
        return records

    def summaries(self) -> list[dict[str, Any]]:
        return [r["summary"] for r in self.records() if "summary" in r]

    def runs(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if "run" in r]

    def poll_ready(self) -> bool:
        """Whether the process has started invoking the function (``ready_at`` is then the
        monotonic time this was first seen)."""
        if self.ready_at is None:
            if self.out.exists() and self.out.read_text().startswith('{"ready"'):
                self.ready_at = time.monotonic()
            elif self.process.poll() is not None:
                raise AssertionError(f"drain {self.pid} exited before it was ready:\n"
                                     f"{self.output()}")
        return self.ready_at is not None

    def kill(self) -> None:
        """SIGKILL, as Lambda does at its timeout (a process that already ended is unharmed)."""
        self.kill_sent = True
        self.process.send_signal(signal.SIGKILL)

    def wait(self, timeout: float = 300) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"drain {self.pid} still running after {timeout} s:\n"
                                 f"{self.output()}") from None

    @property
    def killed(self) -> bool:
        return self.process.returncode == -signal.SIGKILL

    def output(self, tail: int = 4000) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-tail:]


class DrainSet(list[Drain]):
    """Drain processes started together."""

    def wait_ready(self, timeout: float = 60) -> None:
        """Block until every process is about to invoke the function (see ``ready_at``)."""
        deadline = time.monotonic() + timeout
        while not all([drain.poll_ready() for drain in self]):
            if time.monotonic() > deadline:
                raise AssertionError(f"drains not ready after {timeout} s")
            time.sleep(0.002)

    def wait_all(self, timeout: float = 300, *, allow_killed: bool = False) -> None:
        """Wait for every process; each must exit 0 (or die by SIGKILL, if allowed)."""
        deadline = time.monotonic() + timeout
        for drain in self:
            code = drain.wait(max(deadline - time.monotonic(), 1))
            if code != 0 and not (allow_killed and drain.killed):
                raise AssertionError(f"drain {drain.pid} exited with {code}:\n{drain.output()}")

    def summaries(self) -> list[dict[str, Any]]:
        return [summary for drain in self for summary in drain.summaries()]

    def totals(self) -> Counter:
        return _totals(self.summaries())


@pytest.fixture
def seed() -> int:
    """The seed of the test's own random choices (RELIABILITY_SEED replays one)."""
    value = int(os.environ.get("RELIABILITY_SEED") or random.randrange(2**32))
    print(f"RELIABILITY_SEED={value}")  # shown with the output of a failed test
    return value


@pytest.fixture
def rng(seed: int) -> random.Random:
    return random.Random(seed)


@pytest.fixture
def recording_db(database_url: str, sql) -> str:
    """This test's database, with the ``executions`` and ``drain_deaths`` tables."""
    sql(EXECUTIONS_DDL)
    sql(DEATHS_DDL)
    return database_url


@pytest.fixture
def drains(recording_db: str, tmp_path: Path) -> Iterator[Any]:
    """Start drain processes: ``drains(n, timeout=..., until=..., plan=..., **env)``.

    Each process runs drain_loop.py (invocations in a loop until the queue is empty or idle,
    or a plan). Keyword arguments in upper case are environment variables over DRAIN_ENV.
    Every process still alive at the end of the test is killed.
    """
    started: list[Drain] = []

    def start(count: int = 1, *, timeout: float = 60, until: str = "empty",
              max_invocations: int = 10_000, max_seconds: float = 300,
              plans: list[dict[str, Any]] | None = None, **env: str) -> DrainSet:
        group = DrainSet()
        for index in range(count):
            number = len(started)
            out = tmp_path / f"drain-{number}.jsonl"
            log = tmp_path / f"drain-{number}.log"
            command = [sys.executable, str(DRIVER), "--out", str(out),
                       "--timeout", str(timeout), "--until", until,
                       "--max-invocations", str(max_invocations),
                       "--max-seconds", str(max_seconds)]
            if plans is not None:
                plan_file = tmp_path / f"plan-{number}.json"
                plan_file.write_text(json.dumps(plans[index]))
                command += ["--plan", str(plan_file)]
            with open(log, "wb") as log_file:
                process = subprocess.Popen(
                    command, stdout=log_file, stderr=subprocess.STDOUT, cwd=HERE.parents[1],
                    env={**os.environ, **DRAIN_ENV, "DATABASE_URL": recording_db, **env})
            drain = Drain(process, out, log)
            started.append(drain)
            group.append(drain)
        return group

    yield start
    for drain in started:
        if drain.process.poll() is None:
            drain.process.kill()
        drain.process.wait()


@dataclass
class Ledger:
    """The jobs table checked against the executions table, attempt by attempt."""

    problems: list[str] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)
    """Why attempts ended without success: handler raised, timed out, lease expired."""
    jobs: int = 0
    statuses: Counter = field(default_factory=Counter)
    attempts: int = 0
    executions: int = 0
    open_executions: int = 0
    uncharged_executions: int = 0
    """Executions in claims a dead drain lost before recording the job's start: the janitor
    gave the attempt back, so the same attempt number ran again."""
    lost_claims: int = 0
    """The jobs' lost_claims summed: claims refunded by the janitor (some never started)."""


# The reasons an attempt did not succeed, as the ``errors`` entries begin.
LEASE_EXPIRED = "lease expired"
RAISED = "RuntimeError: injected failure"
TIMED_OUT = "HandlerTimeout"
# How far before its time limit a stopped handler's own end record may lie (clock reads and
# the record's round trip).
LIMIT_NOISE = 0.1


def _ended_at_its_limit(execution: dict[str, Any], error: str) -> bool:
    """A handler stopped by its time limit while it wrote its own end: the end committed on
    the server, the reply never read (the limit interrupts the read). Its record says
    ``returned``, but it did not return in time, and the drain rightly recorded the timeout:
    such an end lies at the limit, within scheduling noise."""
    limit = re.search(r"timed out after ([0-9.e+-]+) s", error)
    if limit is None or execution["ended_at"] is None:
        return False
    ran = (execution["ended_at"] - execution["started_at"]).total_seconds()
    return ran >= float(limit.group(1)) - LIMIT_NOISE


def _reason(error: str) -> str:
    for reason in (LEASE_EXPIRED, RAISED, TIMED_OUT):
        if error.startswith(reason):
            return reason
    return error


@pytest.fixture
def audit(sql):
    """Table-wide checks shared by the scenarios; see the methods."""
    return Audit(sql)


class Audit:
    LEASE_EXPIRED = LEASE_EXPIRED
    RAISED = RAISED
    TIMED_OUT = TIMED_OUT

    def __init__(self, sql):
        self.sql = sql

    def now(self) -> Any:
        return self.sql("SELECT clock_timestamp() AS now")[0]["now"]

    def statuses(self) -> Counter:
        return Counter({r["status"]: r["n"] for r in self.sql(
            "SELECT status, count(*) AS n FROM jobs GROUP BY status")})

    def expire_leases(self) -> int:
        """Time passes: every lease runs out (call only when no drain process is alive)."""
        return len(self.sql("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
                            "WHERE status = 'running' RETURNING id"))

    def quiesce(self, timeout: float = 30) -> None:
        """Wait until no other session is connected to this database: a killed drain's server
        session may still finish the statement it was running, and must before the test looks.
        """
        deadline = time.monotonic() + timeout
        while self.sql("""
                SELECT count(*) AS n FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid()
                  AND backend_type = 'client backend'""")[0]["n"]:
            if time.monotonic() > deadline:
                raise AssertionError(f"sessions of dead drains still open after {timeout} s")
            time.sleep(0.005)

    def record_death(self, pid: int, born_after: Any, died_by: Any) -> None:
        self.sql("INSERT INTO drain_deaths VALUES (:pid, :born, :died)",
                 pid=pid, born=born_after, died=died_by)

    def overlaps(self) -> list[dict[str, Any]]:
        """Consecutive executions of a job (by attempt) where the later one started before the
        earlier one ended. An execution left open (``ended_at`` NULL) ended, at the latest,
        when its time limit stopped it (the drain's HandlerTimeout entry for that attempt,
        written right after the stop) or when the test saw its killed process dead
        (drain_deaths.died_by); one left open otherwise never ended, and overlaps whatever
        follows it."""
        return self.sql("""
            WITH ordered AS (
                SELECT e.*, lead(e.attempt) OVER w AS next_attempt,
                       lead(e.started_at) OVER w AS next_started
                FROM executions e
                WINDOW w AS (PARTITION BY e.job_id ORDER BY e.attempt, e.started_at, e.id)
            ), bounded AS (
                SELECT o.*, COALESCE(o.ended_at, (
                           SELECT (x->>'at')::timestamptz
                           FROM jobs j, jsonb_array_elements(j.errors) AS x
                           WHERE j.id = o.job_id AND (x->>'attempt')::int = o.attempt
                             AND x->>'error' LIKE 'HandlerTimeout%'), (
                           SELECT d.died_by FROM drain_deaths d
                           WHERE d.pid = o.pid
                             AND o.started_at BETWEEN d.born_after AND d.died_by)) AS ended_by
                FROM ordered o
                WHERE o.next_started IS NOT NULL
            )
            SELECT job_id, attempt, pid, started_at, ended_at, ended_by, next_attempt,
                   next_started
            FROM bounded
            WHERE ended_by IS NULL OR next_started < ended_by
            ORDER BY job_id, attempt
            LIMIT 20""")

    def open_executions_of_live_processes(self) -> list[dict[str, Any]]:
        """Executions that never ended in a process that was not killed."""
        return self.sql("""
            SELECT e.* FROM executions e
            WHERE e.ended_at IS NULL AND NOT EXISTS (
                SELECT 1 FROM drain_deaths d
                WHERE d.pid = e.pid AND e.started_at BETWEEN d.born_after AND d.died_by)
            ORDER BY e.id LIMIT 20""")

    def beyond_max_attempts(self) -> list[dict[str, Any]]:
        return self.sql("""
            SELECT j.id, j.attempts, j.max_attempts, max(e.attempt) AS executed
            FROM jobs j LEFT JOIN executions e ON e.job_id = j.id
            GROUP BY j.id
            HAVING j.attempts > j.max_attempts OR max(e.attempt) > j.max_attempts
                OR max(e.attempt) > j.attempts
            ORDER BY j.id LIMIT 20""")

    # C901: one check per invariant of the ledger, each a branch; kept in one place to be read
    # as the list of what the reliability suite promises.
    def ledger(self, *, allow_timeouts: bool = False) -> Ledger:  # noqa: C901
        """Check every attempt of every job against its record.

        A job's attempts 1..attempts each ran at most once (one execution row) as a charged
        attempt, and each left exactly one trace: the last attempt of a ``done`` job returned
        and wrote done; every other attempt has exactly one entry in ``errors`` saying why it
        did not succeed:

        - ``RuntimeError: injected failure`` — its execution raised;
        - ``HandlerTimeout`` (only if ``allow_timeouts``) — its execution was stopped by the
          time limit, so it has no end;
        - ``lease expired`` (the janitor's entry) — its execution is missing (claimed, never
          started), open (killed in the handler) or ended but its outcome never written
          (killed before the finishing write). An open execution must have this entry.

        A ``failed`` job used all its attempts (no handler here discards).

        Besides, an attempt number may have run more than once, but only in claims that a
        drain lost by dying before it recorded the job's start: the janitor refunded those
        (``lost_claims``), so the attempt ran again. Every such earlier execution must be one
        a killed process left open or unrecorded (``drain_deaths``), and a job has at most as
        many as its ``lost_claims``.
        """
        ledger = Ledger()
        executions: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for row in self.sql("""
                SELECT e.job_id, e.attempt, e.started_at, e.ended_at, e.outcome, EXISTS (
                    SELECT 1 FROM drain_deaths d
                    WHERE d.pid = e.pid AND e.started_at BETWEEN d.born_after AND d.died_by
                ) AS in_a_killed_process
                FROM executions e ORDER BY e.started_at, e.id"""):
            executions.setdefault((row["job_id"], row["attempt"]), []).append(row)
            ledger.executions += 1
            ledger.open_executions += row["ended_at"] is None
        problems = ledger.problems
        for job in self.sql("SELECT id, status, attempts, max_attempts, errors, lost_claims "
                            "FROM jobs ORDER BY id"):
            ledger.jobs += 1
            ledger.statuses[job["status"]] += 1
            ledger.attempts += job["attempts"]
            ledger.lost_claims += job["lost_claims"]
            jid, attempts = job["id"], job["attempts"]
            uncharged = 0
            entries: dict[int, list[str]] = {}
            for entry in job["errors"]:
                entries.setdefault(entry["attempt"], []).append(entry["error"])
            if set(entries) - set(range(1, attempts + 1)):
                problems.append(f"job {jid}: errors for attempts {sorted(entries)} beyond its "
                                f"{attempts} attempts")
            if job["status"] == "failed" and attempts != job["max_attempts"]:
                problems.append(f"job {jid}: failed after {attempts} of "
                                f"{job['max_attempts']} attempts")
            for attempt in range(1, attempts + 1):
                ran = executions.get((jid, attempt), [])
                *refunded, execution = ran or [None]
                for earlier in refunded:
                    uncharged += 1
                    if not earlier["in_a_killed_process"]:
                        problems.append(f"job {jid}: attempt {attempt} ran again after "
                                        f"{earlier}, which no lost claim explains")
                errors = entries.get(attempt, [])
                succeeded = job["status"] == "done" and attempt == attempts
                if succeeded:
                    if errors or execution is None or execution["outcome"] != "returned":
                        problems.append(f"job {jid}: done on attempt {attempt}, but errors "
                                        f"{errors}, execution {execution}")
                    continue
                if len(errors) != 1:
                    problems.append(f"job {jid}: attempt {attempt} has {len(errors)} error "
                                    f"entries (expected one): {errors}")
                    continue
                reason = _reason(errors[0])
                ledger.reasons[reason] += 1
                outcome = execution and execution["outcome"]
                ok = {
                    RAISED: outcome == "raised",
                    TIMED_OUT: allow_timeouts and execution is not None
                    and (outcome is None or _ended_at_its_limit(execution, errors[0])),
                    LEASE_EXPIRED: True,
                }.get(reason, False)
                if execution is not None and execution["ended_at"] is None:
                    ok = ok and reason in (LEASE_EXPIRED, TIMED_OUT)
                if not ok:
                    ran = execution and execution["ended_at"] and (
                        execution["ended_at"] - execution["started_at"]).total_seconds()
                    problems.append(f"job {jid}: attempt {attempt} recorded {errors[0]!r} but "
                                    f"its execution was {execution} (ran {ran} s)")
            if uncharged > job["lost_claims"]:
                problems.append(f"job {jid}: {uncharged} uncharged re-runs but only "
                                f"{job['lost_claims']} lost claims")
            ledger.uncharged_executions += uncharged
        known = {(j["id"], a) for j in self.sql("SELECT id, attempts FROM jobs")
                 for a in range(1, j["attempts"] + 1)}
        stray = sorted(set(executions) - known)
        if stray:
            problems.append(f"executions of attempts the jobs table does not count: {stray[:10]}")
        return ledger

