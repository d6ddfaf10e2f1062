"""The drain's rules, against the in-memory store (tests/support/fake_store.py): no PostgreSQL,
no Lambda. The same rules are exercised end to end in tests/functions/test_drain_function.py;
the contract test keeps the fake honest (tests/integration/test_store_contract.py)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import pytest

import pgdrain
from pgdrain.completer import WINDOW_SECONDS
from pgdrain.db import NoTimeLeft
from pgdrain.drain import drain
from pgdrain.errors import ConfigError, DatabaseUnavailable
from pgdrain.policy import Backoff
from pgdrain.registry import Registry
from tests.support.drains import KEEP_HISTORY_SECONDS
from tests.support.fake_store import FakeStore

# One handler at a time on the drain's thread (the concurrent loop: test_drain_concurrent.py).
SETTINGS = pgdrain.Settings(safety_margin_seconds=0.5, backoff=Backoff(2, 60, jitter=0),
                            retention_seconds=KEEP_HISTORY_SECONDS, concurrency=1, batch_size=10)


def clock(seconds: float) -> Callable[[], float]:
    """A ``time_left`` that runs down with real time from ``seconds``."""
    deadline = time.monotonic() + seconds
    return lambda: deadline - time.monotonic()


@pytest.fixture
def registry() -> Registry:
    registry = Registry()

    @pgdrain.job("ok", registry=registry)
    def ok(job):
        pass

    @pgdrain.job("boom", registry=registry)
    def boom(job):
        raise RuntimeError("boom")

    return registry


def run(store: FakeStore, registry: Registry, seconds: float = 60, **changes):
    settings = dataclasses.replace(SETTINGS, **changes)
    return drain(store, registry, settings, time_left=clock(seconds))


def test_janitor_then_claims_until_empty(registry):
    store = FakeStore()
    ids = [store.add("ok") for _ in range(25)]
    summary = run(store, registry)
    assert (summary.claimed, summary.done, summary.stopped) == (25, 25, "empty")
    assert store.calls[:5] == ["open", "take_slot", "janitor", "vacuum_if_due",
                               "enqueue_scheduled"]
    # The first claim takes what one slot can start; once jobs have shown their pace, fast
    # ones come in full batches (PGDRAIN_BATCH_SIZE, 10 here), each written in one
    # statement; then a last empty claim, and the drain's slot is given back.
    assert store.calls[5:] == ["claim", "finish_many"] * 4 + ["claim", "give_back_slot"]
    assert [store.status(i) for i in ids] == [("done", 1)] * 25


def test_a_drain_with_no_free_slot_returns_at_once(registry):
    store = FakeStore(slots_taken={0, 1})
    store.add("ok")
    summary = run(store, registry, max_drains=2)
    assert (summary.stopped, summary.claimed) == ("busy", 0)
    assert store.calls == ["open", "take_slot"]


def test_max_jobs_stops_the_drain(registry):
    store = FakeStore()
    for _ in range(5):
        store.add("ok")
    summary = run(store, registry, max_jobs=3)
    assert (summary.claimed, summary.done, summary.stopped) == (3, 3, "max_jobs")


def test_a_failure_is_retried_with_backoff_then_failed(registry):
    store = FakeStore()
    ident = store.add("boom", max_attempts=2)
    assert run(store, registry).retried == 1
    job = store.jobs[ident]
    assert store.status(ident) == ("pending", 1)
    assert (job["run_at"] - store.now).total_seconds() == 2  # base 2 s, no jitter
    job["run_at"] = store.now
    assert run(store, registry).failed == 1
    assert store.status(ident) == ("failed", 2)
    assert job["last_error"] == "RuntimeError: boom"


def test_a_job_with_no_handler_fails_at_once(registry):
    store = FakeStore()
    unknown = store.add("nobody-handles-this")
    summary = run(store, registry)
    assert (summary.failed, store.status(unknown)) == (1, ("failed", 1))
    assert "no handler registered for job_type 'nobody-handles-this'" in \
        store.jobs[unknown]["last_error"]


def test_per_type_policy_retry_on_and_backoff():
    registry = Registry()

    @pgdrain.job("picky", registry=registry, retry_on=TimeoutError,
                 backoff=lambda attempt, error: 42.0)
    def picky(job):
        raise TimeoutError if job.payload["retry"] else KeyError("bad")

    store = FakeStore()
    retried = store.add("picky", {"retry": True})
    failed = store.add("picky", {"retry": False})
    summary = run(store, registry)
    assert (summary.retried, summary.failed) == (1, 1)
    assert (store.jobs[retried]["run_at"] - store.now).total_seconds() == 42
    assert store.status(failed) == ("failed", 1)  # KeyError is not worth a retry


def test_snooze_gives_the_attempt_back_and_discard_fails():
    registry = Registry()

    @pgdrain.job("later", registry=registry)
    def later(job):
        raise pgdrain.Snooze(30)

    @pgdrain.job("never", registry=registry)
    def never(job):
        raise pgdrain.Discard("no such customer")

    store = FakeStore()
    snoozed, discarded = store.add("later"), store.add("never")
    summary = run(store, registry)
    assert (summary.snoozed, summary.failed) == (1, 1)
    assert store.status(snoozed) == ("pending", 0)
    assert (store.jobs[snoozed]["run_at"] - store.now).total_seconds() == 30
    assert store.status(discarded) == ("failed", 1)


def test_a_slow_job_is_recorded_before_the_next_starts():
    # The done window: outcomes wait to be written together, but never longer than
    # WINDOW_SECONDS after their job started; a job that ran that long is written at once.
    registry, seen = Registry(), []
    store = FakeStore()

    @pgdrain.job("slow", registry=registry)
    def slow(job):
        seen.append([store.status(i)[0] for i in sorted(store.jobs)])
        time.sleep(WINDOW_SECONDS * 1.5)

    for _ in range(3):
        store.add("slow")
    run(store, registry)
    # Slow jobs are claimed one by one (one slot, and their pace gives no time to run more
    # while a claim is on its way): none waits claimed behind another.
    assert seen == [["running", "pending", "pending"], ["done", "running", "pending"],
                    ["done", "done", "running"]]


def test_fast_jobs_share_one_write():
    registry, seen = Registry(), []
    store = FakeStore()

    @pgdrain.job("fast", registry=registry)
    def fast(job):
        seen.append(store.calls.count("finish_many"))

    for _ in range(5):
        store.add("fast")
    run(store, registry)
    # The first job comes alone (its pace unknown) and is written at the end of its claim;
    # the other four, claimed together, share one write.
    assert seen == [0, 1, 1, 1, 1] and store.calls.count("finish_many") == 2


def test_a_lost_claim_makes_the_write_stale(registry):
    registry = Registry()
    store = FakeStore()

    @pgdrain.job("lost", registry=registry)
    def lost(job):
        # Meanwhile the janitor of another drain reclaimed it and someone claimed it again.
        store.jobs[job.id]["lease_token"] = "someone-else"

    ident = store.add("lost")
    summary = run(store, registry)
    assert (summary.done, summary.stale) == (0, 1)
    assert store.status(ident) == ("running", 1)  # the other claim's, untouched


def test_the_first_job_runs_cut_short_and_later_ones_are_released():
    registry, started = Registry(), []

    @pgdrain.job("long", registry=registry, timeout=300)
    def long(job):
        started.append(job.id)

    store = FakeStore()
    first, second = store.add("long"), store.add("long")
    # 3 s left, 0.5 s margin: 2.5 s usable, far from 300. The first job runs with what is left
    # (it would otherwise block the queue for ever); the second then gets at least half of
    # 2.5 s (also less than its budget), so it runs too.
    summary = run(store, registry, seconds=3)
    assert started == [first, second] and summary.done == 2


def test_a_job_that_does_not_fit_after_the_first_is_released_uncharged():
    registry = Registry()

    @pgdrain.job("short", registry=registry, timeout=1)
    def short(job):
        time.sleep(0.6)

    @pgdrain.job("medium", registry=registry, timeout=2)
    def medium(job):
        pass

    store = FakeStore()
    first = store.add("short", priority=0)
    second = store.add("medium", priority=1)
    # 2.9 s left, 0.5 margin: 2.4 usable. The first (1 s budget) runs for 0.6 s; 1.8 s are
    # then left for a 2 s budget, which the function could give (it is not cut short): it is
    # released for an invocation of its own.
    summary = run(store, registry, seconds=2.9)
    assert (summary.done, summary.released, summary.stopped) == (1, 1, "deadline")
    assert store.status(first) == ("done", 1)
    assert store.status(second) == ("pending", 0)  # its attempt given back


def test_a_handler_over_its_time_limit_is_retried_as_timed_out():
    registry = Registry()

    @pgdrain.job("stuck", registry=registry, timeout=0.2)
    def stuck(job):
        time.sleep(5)

    store = FakeStore()
    ident = store.add("stuck")
    summary = run(store, registry)
    assert summary.retried == 1
    assert store.jobs[ident]["last_error"] == "HandlerTimeout: stuck timed out after 0.2 s"


def test_a_database_failure_ends_the_drain_with_a_summary(registry):
    store = FakeStore()
    for _ in range(3):
        store.add("ok")
    # open, janitor, vacuum_if_due pass; the claim fails.
    store._step = _failing_at(store, "claim", DatabaseUnavailable("the connection was lost"))
    summary = run(store, registry)
    assert (summary.stopped, summary.error) == ("database_error", "the connection was lost")
    assert store.calls[-1] == "discard"


def test_no_time_left_for_a_statement_is_the_deadline_not_an_error(registry):
    store = FakeStore()
    store.add("ok")
    store._step = _failing_at(store, "claim", NoTimeLeft("no time left"))
    summary = run(store, registry)
    assert (summary.stopped, summary.error) == ("deadline", None)


def test_a_failed_write_hands_back_nothing_it_did_not_run(registry):
    # The batch's write fails: the error ends the drain; nothing is charged or marked done
    # that was not recorded, and the claims come back through the janitor.
    store = FakeStore()
    ids = [store.add("ok") for _ in range(3)]
    store._step = _failing_at(store, "finish_many", DatabaseUnavailable("gone"))
    summary = run(store, registry)
    assert summary.stopped == "database_error" and summary.done == 0
    # The first claim (one job) could not be written; the others were never claimed.
    assert [store.status(i) for i in ids] == [("running", 1), ("pending", 0), ("pending", 0)]


def test_a_job_with_a_lost_claim_is_claimed_alone_first(registry):
    store = FakeStore()
    plain = store.add("ok", priority=-5)
    suspect = store.add("ok", lost_claims=1)
    order = []
    original = store.claim_alone

    def claim_alone(**kwargs):
        job = original(**kwargs)
        order.append(("alone", job.id if job else None))
        return job

    store.claim_alone = claim_alone
    summary = run(store, registry)
    assert summary.done == 2
    assert order == [("alone", suspect), ("alone", None)]
    assert store.calls.index("claim_alone") < store.calls.index("claim")
    assert store.status(plain) == ("done", 1)


def test_the_janitor_refunds_a_claim_that_never_started(registry):
    store = FakeStore()
    ident = store.add("ok")
    store.claim(batch_size=1, lease_seconds=10, queues=None)  # a drain that died at once
    store.now = store.now.replace(year=2031)
    summary = run(store, registry)
    assert (summary.reclaimed, summary.reclaimed_refunded, summary.done) == (1, 1, 1)
    assert store.status(ident) == ("done", 1)  # one attempt: the lost claim was not charged


def test_queues_limit_what_is_claimed(registry):
    store = FakeStore()
    mine, other = store.add("ok", queue="emails"), store.add("ok", queue="exports")
    run(store, registry, queues=("emails",))
    assert (store.status(mine), store.status(other)) == (("done", 1), ("pending", 0))


def test_an_explicit_lease_must_outlast_the_function(registry):
    with pytest.raises(ConfigError, match="must be longer than the function timeout"):
        run(FakeStore(), registry, seconds=1000, lease_seconds=900)


def test_the_lease_is_the_invocations_time_plus_a_minute():
    registry, leases = Registry(), []

    @pgdrain.job("lease", registry=registry)
    def lease(job):
        leases.append((job.lease_expires_at - job.claimed_at).total_seconds())

    store = FakeStore()
    store.add("lease")
    run(store, registry, seconds=120)
    assert leases == [180.0]
    store.add("lease")
    run(store, registry, seconds=120, lease_seconds=600)
    assert leases == [180.0, 600.0]


def _failing_at(store: FakeStore, name: str, error: BaseException):
    """``store._step`` raising ``error`` the first time operation ``name`` runs."""
    step = store._step

    def failing(called: str) -> None:
        step(called)
        if called == name and not getattr(failing, "fired", False):
            failing.fired = True
            raise error

    return failing


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_rate_that_frees_in_time_is_waited_for_not_polled(registry, concurrency):
    """Only rate-limited work: the drain sleeps until the window frees, claims once more, and
    stops when nothing is held back any longer: two controlled claims, not a loop of them."""
    store = FakeStore(controlled=True, rate_holds=[0.05])
    summary = run(store, registry, 10, concurrency=concurrency)
    assert summary.stopped == "empty"
    assert store.calls.count("claim_controlled") == 2


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_rate_that_frees_too_late_stops_the_drain_early(registry, concurrency):
    store = FakeStore(controlled=True, rate_holds=[30.0])
    started = time.monotonic()
    summary = run(store, registry, 10, concurrency=concurrency)
    assert summary.stopped == "rate_limited"
    assert store.calls.count("claim_controlled") == 1
    assert time.monotonic() - started < 5  # it returned, not slept or polled to its deadline


def test_a_rated_type_with_nothing_due_keeps_the_drain_on_the_plain_claim(registry):
    """Declaring rate= costs the drain a look for the type's due jobs, not a controlled claim
    (and its row lock) on every claim."""
    pgdrain.job("rated", registry=registry, rate="5/min")(lambda job: None)
    store = FakeStore()
    for _ in range(3):
        store.add("ok")
    summary = run(store, registry)
    assert (summary.done, summary.stopped) == (3, "empty")
    assert "claim_controlled" not in store.calls
    assert store.calls.count("rated_due") == 1  # once at the first claim, then not within 1 s


def test_a_rated_type_with_jobs_due_claims_through_the_controlled_claim(registry):
    pgdrain.job("rated", registry=registry, rate="5/min")(lambda job: None)
    store = FakeStore(rate_holds=[0.05])
    summary = run(store, registry, 10)
    assert summary.stopped == "empty"
    assert store.calls.count("rated_due") == 1
    # Held, waited for, claimed again (nothing due any more: back to the plain claim).
    assert store.calls.count("claim_controlled") == 2
