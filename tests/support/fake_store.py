"""An in-memory stand-in for the drain's store, with the same guards as the SQL.

Jobs are dicts; every claim stamps a fresh lease token and every finishing write is applied
only while the job is ``running`` under that token, as ``job_finish_batch`` does. The contract
test (tests/integration/test_store_contract.py) runs the same story against this and against
PostgreSQL, so the two cannot drift apart unnoticed. Time is a fake clock the test advances.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pgdrain.fanout import Ledger
from pgdrain.flow_values import ControlledClaim
from pgdrain.models import Finish, JanitorResult, Job, Outcome, Written
from pgdrain.policy import DEFAULT_POLICY, Fail, Refund, after_lost_lease


@dataclass
class FakeStore:
    """What ``pgdrain.drain`` needs of a store; ``calls`` records each operation's name."""

    now: datetime = field(default_factory=lambda: datetime(2030, 1, 1, tzinfo=UTC))
    jobs: dict[int, dict[str, Any]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    fail_next: list[BaseException] = field(default_factory=list)
    """Errors the next operations raise, one each (a database failure, a timeout)."""
    connected: bool = False
    slots_taken: set[int] = field(default_factory=set)
    """Drain slots held (by this drain, or set by a test as other drains')."""
    controlled: bool = False
    """What the janitor says of caps and rates: True, and the drain runs claim_controlled."""
    rate_holds: list[float] = field(default_factory=list)
    launches: Ledger = field(init=False)
    """Drains launched and not yet started (drain_slot_reserve's ledger), on the fake clock."""
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    # --- the test's side ---------------------------------------------------------------------

    def add(self, job_type: str, payload: Any = None, *, max_attempts: int = 3,
            priority: int = 0, lost_claims: int = 0, delay: float = 0.0,
            queue: str = "default") -> int:
        ident = next(self._ids)
        self.jobs[ident] = {
            "id": ident, "job_type": job_type, "payload": {} if payload is None else payload,
            "status": "pending", "attempts": 0, "max_attempts": max_attempts,
            "priority": priority, "run_at": self.now + timedelta(seconds=delay),
            "created_at": self.now, "queue": queue, "lease_token": None,
            "lease_expires_at": None, "lost_claims": lost_claims, "started": False,
            "errors": [], "last_error": None}
        return ident

    def status(self, ident: int) -> tuple[str, int]:
        return self.jobs[ident]["status"], self.jobs[ident]["attempts"]

    def _step(self, name: str) -> None:
        self.calls.append(name)
        if self.fail_next:
            raise self.fail_next.pop(0)

    # --- the drain's side --------------------------------------------------------------------

    def open(self, deadline: float) -> None:
        self._step("open")
        self.connected = True

    def discard(self) -> None:
        self.calls.append("discard")
        self.connected = False

    def janitor(self, settings: Any, registry: Any) -> JanitorResult:
        self._step("janitor")
        reclaimed = failed = refunded = 0
        for job in self.jobs.values():
            if job["status"] != "running" or job["lease_expires_at"] > self.now:
                continue
            handler = registry.get(job["job_type"])
            decision = after_lost_lease(job["attempts"], job["max_attempts"], settings.backoff,
                                        started=job["started"],
                                        policy=handler.policy if handler else DEFAULT_POLICY)
            token = job["lease_token"]
            if isinstance(decision, Refund):
                self._apply(Finish(job["id"], token, Outcome.REFUND))
                refunded += 1
            elif isinstance(decision, Fail):
                self._apply(Finish(job["id"], token, Outcome.FAIL, error="lease expired"))
                failed += 1
                continue
            else:
                self._apply(Finish(job["id"], token, Outcome.RETRY, decision.delay_seconds,
                                   "lease expired"))
            reclaimed += 1
        alone = any(j["status"] == "pending" and j["lost_claims"] for j in self.jobs.values())
        return JanitorResult(ran=True, reclaimed=reclaimed, failed=failed, refunded=refunded,
                             alone_due=alone, controlled=self.controlled)

    def vacuum_if_due(self, settings: Any) -> bool:
        self._step("vacuum_if_due")
        return False

    def enqueue_scheduled(self, registry: Any, stored_due: bool = False) -> int:
        self._step("enqueue_scheduled")
        return 0

    def sync_controls(self, jobs: Any, progress: Any) -> set[int]:
        self._step("sync_controls")
        return set()

    def job_states(self, ids: Any) -> dict[int, str]:
        self._step("job_states")
        return {}

    def job_parents(self, ids: Any) -> dict[int, dict[int, tuple[str, str | None]]]:
        self._step("job_parents")
        return {}

    def save_checkpoints(self, jobs: Any, states: Any) -> set[int]:
        self._step("save_checkpoints")
        return {j.id for j in jobs}

    def claim(self, *, batch_size: int, lease_seconds: float,
              queues: Sequence[str] | None, fair: bool = False,
              by_queue: bool = False) -> list[Job]:
        self._step("claim")
        due = self._due(queues, alone=False)
        return [self._claim(j, lease_seconds, started=False) for j in due[:batch_size]]

    def claim_controlled(self, *, batch_size: int, lease_seconds: float,
                         queues: Sequence[str] | None) -> ControlledClaim:
        """No caps here (tests of caps and rates run on PostgreSQL); ``rate_holds`` scripts
        what a rate limit answers: the seconds until it frees, one answer per claim."""
        self._step("claim_controlled")
        return ControlledClaim([], self.rate_holds.pop(0) if self.rate_holds else None)

    def tenanted(self) -> bool:
        self._step("tenanted")
        return False

    def rated_due(self, queues: Sequence[str] | None) -> bool:
        self._step("rated_due")
        return bool(self.rate_holds)

    def claim_alone(self, *, lease_seconds: float, queues: Sequence[str] | None) -> Job | None:
        self._step("claim_alone")
        due = self._due(queues, alone=True)
        return self._claim(due[0], lease_seconds, started=True) if due else None

    def _due(self, queues: Sequence[str] | None, *, alone: bool) -> list[dict[str, Any]]:
        """Due pending jobs in claim order; with ``alone``, those with a lost claim (which
        the batch claim leaves alone)."""
        return sorted((j for j in self.jobs.values()
                       if j["status"] == "pending" and j["run_at"] <= self.now
                       and bool(j["lost_claims"]) is alone
                       and (not queues or j["queue"] in queues)),
                      key=lambda j: (j["priority"], j["run_at"], j["id"]))

    def _claim(self, job: dict[str, Any], lease_seconds: float, *, started: bool) -> Job:
        job.update(status="running", attempts=job["attempts"] + 1, started=started,
                   lease_token=str(uuid.uuid4()),
                   lease_expires_at=self.now + timedelta(seconds=lease_seconds))
        return Job(id=job["id"], job_type=job["job_type"], payload=job["payload"],
                   attempts=job["attempts"], max_attempts=job["max_attempts"],
                   queue=job["queue"], priority=job["priority"], run_at=job["run_at"],
                   created_at=job["created_at"], claimed_at=self.now,
                   lease_expires_at=job["lease_expires_at"], lease_token=job["lease_token"],
                   lost_claims=job["lost_claims"])

    def finish_many(self, finishes: Sequence[Finish]) -> Written:
        self._step("finish_many")
        changed = [f.id for f in finishes if self._apply(f)]
        return Written(ids=tuple(changed),
                       stale=tuple(f.id for f in finishes if f.id not in changed))

    def _apply(self, finish: Finish) -> bool:
        """``job_finish_batch`` for one row: guarded by the claim."""
        job = self.jobs.get(finish.id)
        if job is None or job["status"] != "running" or job["lease_token"] != finish.lease_token:
            return False
        outcome = finish.outcome
        if finish.forget and job.get("dedupe_key") is None:
            del self.jobs[finish.id]  # job_complete_forget_batch: done rows not kept
            return True
        job["status"] = {"done": "done", "fail": "failed"}.get(outcome.value, "pending")
        if outcome in (Outcome.SNOOZE, Outcome.RELEASE, Outcome.REFUND):
            job["attempts"] = max(job["attempts"] - 1, 0)
        if outcome is Outcome.REFUND:
            job["lost_claims"] += 1
        if outcome in (Outcome.RETRY, Outcome.SNOOZE):
            job["run_at"] = self.now + timedelta(seconds=finish.delay_seconds)
        if outcome in (Outcome.RETRY, Outcome.FAIL):
            job["last_error"] = finish.error
            job["errors"].append({"attempt": job["attempts"], "error": finish.error})
        job.update(lease_token=None, lease_expires_at=None, started=False)
        return True

    def session(self) -> Any:
        raise NotImplementedError("transactional handlers need PostgreSQL")

    def lend(self, deadline: float) -> Any:
        raise NotImplementedError("transactional handlers need PostgreSQL")

    def give_back(self, session: Any, *, broken: bool) -> None:
        raise NotImplementedError("transactional handlers need PostgreSQL")

    def __post_init__(self) -> None:
        self.launches = Ledger(lambda: self.now.timestamp())

    def take_slot(self, slots: int) -> int | None:
        self._step("take_slot")
        self.launches.arrived()
        free = [s for s in range(slots) if s not in self.slots_taken]
        if not free:
            return None
        self.slots_taken.add(free[0])
        return free[0]

    def give_back_slot(self, slot: int) -> None:
        self._step("give_back_slot")
        self.slots_taken.discard(slot)

    def drains_running(self) -> int:
        return len(self.slots_taken)

    def reserve_launches(self, wanted: int, slots: int) -> int:
        self.calls.append("reserve_launches")
        return self.launches.reserve(wanted, slots, len(self.slots_taken))

    def unreserve_launches(self, count: int) -> None:
        self.calls.append("unreserve_launches")
        self.launches.unreserve(count)

    def due(self, *, limit: int, queues: Sequence[str] | None, by_queue: bool = False) -> int:
        self.calls.append("due")
        return min(limit, len(self._due(queues, alone=False)) + len(self._due(queues, alone=True)))
