"""The drain's pure rooms on their own: the time budget, admission, the planner's numbers,
the summary's counts. No store, no clock but the one passed in."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import pgdrain
from pgdrain.drain import Count, DrainSummary, Pace, Stop, outcomes
from pgdrain.drain.admission import Verdict, admit
from pgdrain.drain.budget import MIN_CUT_SHORT_SECONDS, Budget, late
from pgdrain.drain.planner import claim_size, claims_ahead, rate_wait
from pgdrain.models import Job
from pgdrain.registry import Registry


def budget(usable: float = 10.0, smallest: float = 2.0) -> Budget:
    return Budget(margin=1.0, lease=60.0, usable=usable, smallest=smallest, io_deadline=0.0)


def test_the_first_job_may_start_with_a_second_left_later_ones_need_their_budget():
    assert budget().least_to_start(0) == MIN_CUT_SHORT_SECONDS
    assert budget().least_to_start(1) == 2.0
    # A budget longer than the function can give: half of what it could give, at least 1 s.
    assert budget(usable=3.0, smallest=30.0).least_to_start(1) == 1.5


def test_cut_short_is_for_the_first_job_and_for_budgets_the_function_never_gives():
    assert budget().cut_short(5.0, left=1.0, started=0)
    assert not budget().cut_short(5.0, left=0.9, started=0)
    assert not budget().cut_short(5.0, left=4.0, started=1)  # it fits in another invocation
    assert budget(usable=3.0).cut_short(30.0, left=1.5, started=1)
    assert not budget(usable=3.0).cut_short(30.0, left=1.4, started=1)


def test_a_rated_job_is_late_only_after_its_start_by():
    assert not late(None, 100.0) and not late(100.0, 100.0) and late(100.0, 100.1)


def _job(job_type: str, **changes) -> Job:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    return Job(id=1, job_type=job_type, payload={}, attempts=1, max_attempts=3,
               queue="default", priority=0, run_at=now, created_at=now, claimed_at=now,
               lease_expires_at=now, lease_token="token", **changes)


@pytest.fixture
def registry() -> Registry:
    registry = Registry()
    pgdrain.job("one-at-a-time", registry=registry, concurrency=1, timeout=5)(lambda job: None)
    return registry


def _admit(registry, job, **changes):
    given = {"default_timeout": 30.0, "budget": budget(), "left": 8.0, "started": 1,
             "of_type": 0, "late": False, **changes}
    return admit(job, registry, **given)


def test_admission_in_the_order_a_claimed_job_meets_it(registry):
    assert _admit(registry, _job("nobody")).verdict is Verdict.REFUSE
    assert "no handler registered for job_type 'nobody'" in str(
        _admit(registry, _job("nobody")).error)
    undecodable = _job("one-at-a-time", payload_error="bad JSON")
    assert str(_admit(registry, undecodable).error) == "undecodable payload: bad JSON"
    assert _admit(registry, _job("one-at-a-time"), of_type=1).verdict is Verdict.WAIT
    assert _admit(registry, _job("one-at-a-time"), late=True).verdict is Verdict.RELEASE
    assert _admit(registry, _job("one-at-a-time"), left=4.0).verdict is Verdict.TOO_LATE
    start = _admit(registry, _job("one-at-a-time"))
    assert (start.verdict, start.timeout, start.cut_short) == (Verdict.START, 5.0, False)
    first = _admit(registry, _job("one-at-a-time"), left=4.0, started=0)
    assert (first.verdict, first.timeout, first.cut_short) == (Verdict.START, 4.0, True)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_claim_grows_with_the_pace_within_the_batch_and_the_room():
    clock = Clock()
    pace = Pace(clock)
    assert claim_size(pace, room=100, free=1, batch_size=10, left=60) == 1  # pace unknown
    pace.start()
    for _ in range(10):
        pace.finish()
    clock.now = 0.01  # 1,000 jobs a second: 50 finish while a claim is on its way
    assert claim_size(pace, room=100, free=1, batch_size=10, left=60) == 10
    assert claim_size(pace, room=3, free=1, batch_size=10, left=60) == 3
    assert claims_ahead(pace, free=0, ready=10) and not claims_ahead(pace, free=0, ready=60)


def test_a_rate_is_waited_for_only_if_a_job_can_still_start_after_it():
    assert rate_wait(None, left=10, least_to_start=1) is None
    assert rate_wait(0.5, left=10, least_to_start=1) == pytest.approx(0.51)
    assert rate_wait(9.5, left=10, least_to_start=1) is None


def test_the_summary_counts_typed_and_says_why_it_stopped_in_plain_text():
    summary = DrainSummary()
    for count in Count:
        summary.add(count)
    summary.stopped = Stop.RATE_LIMITED
    counts = summary.as_dict()
    assert [counts[c.value] for c in Count] == [1] * len(Count)
    assert type(counts["stopped"]) is str and counts["stopped"] == "rate_limited"


def test_a_done_job_is_forgotten_only_when_done_rows_are_not_kept_and_it_has_nothing_to_keep():
    """PGDRAIN_RETENTION_SECONDS=0: the finish deletes the row (store: a dedupe key keeps it)."""
    job = _job("send")
    assert outcomes.done(job, None, 100, keep_done=False).forget is True
    assert outcomes.done(job, None, 100).forget is False  # kept: the default retention
    assert outcomes.done(job, {"sent": 1}, 100, keep_done=False).forget is False  # a result
    too_big = outcomes.done(job, "x" * 200, 100, keep_done=False)
    assert too_big.forget is False and too_big.error  # why the result is missing is kept


@pytest.mark.parametrize(("resumable", "saved", "outcome"), [
    (True, 1, pgdrain.Outcome.SNOOZE),    # got somewhere: continues, no attempt spent
    (True, 0, pgdrain.Outcome.RETRY),     # saved nothing in this run: an overrun as any
    (False, 0, pgdrain.Outcome.RETRY),
])
def test_a_resumable_run_that_saved_a_checkpoint_and_overran_continues(resumable, saved,
                                                                       outcome):
    registry = Registry()
    pgdrain.job("pages", resumable=resumable, registry=registry)(lambda job: None)
    job = _job("pages")
    job.control.checkpoints_saved = saved
    for ended in (outcomes.Ended(job, registry.get("pages"), 0.0, 2.0, timed_out=2.0),
                  outcomes.Ended(job, registry.get("pages"), 0.0, 2.0,
                                 error=pgdrain.HandlerTimeout("timed out after 2 s"))):
        settled = outcomes.settle(ended, result_max_bytes=100, backoff=pgdrain.Backoff())
        assert settled.finish is not None and settled.finish.outcome is outcome
        if outcome is pgdrain.Outcome.SNOOZE:
            assert settled.finish.delay_seconds == 0


def test_continue_is_a_snooze_of_nothing():
    settled = outcomes.settle(
        outcomes.Ended(_job("pages"), pgdrain.Handler("pages", lambda job: None), 0.0, 0.1,
                       error=pgdrain.Continue()),
        result_max_bytes=100, backoff=pgdrain.Backoff())
    assert settled.finish is not None and settled.finish.outcome is pgdrain.Outcome.SNOOZE
    assert settled.finish.delay_seconds == 0


def test_wait_for_is_a_wait_for_its_signal_that_spends_no_attempt():
    settled = outcomes.settle(
        outcomes.Ended(_job("order"), pgdrain.Handler("order", lambda job: None), 0.0, 0.1,
                       error=pgdrain.WaitFor("confirmed:7", timeout=90)),
        result_max_bytes=100, backoff=pgdrain.Backoff())
    finish = settled.finish
    assert finish is not None and finish.outcome is pgdrain.Outcome.WAIT
    assert (finish.signal, finish.delay_seconds) == ("confirmed:7", 90.0)


@pytest.mark.parametrize(("name", "timeout", "message"), [
    ("", 60, "name must be 1 to 500"), ("x" * 501, 60, "name must be 1 to 500"),
    ("a\x00", 60, "NUL"), (7, 60, "must be text"), ("ok", 0, "more than 0"),
    ("ok", -1, "more than 0"), ("ok", float("nan"), "more than 0"),
    ("ok", float("inf"), "at most"), ("ok", 11 * 365 * 86400, "at most"),
])
def test_a_wait_that_cannot_be_is_a_value_error_where_the_handler_builds_it(name, timeout,
                                                                          message):
    with pytest.raises(ValueError, match=message):
        pgdrain.WaitFor(name, timeout=timeout)


@pytest.mark.parametrize(("stored", "expected"), [
    ('{"name": "s", "received": true, "payload": [1], "at": "2026-12-04T15:00:00+00:00"}',
     pgdrain.Signal("s", True, [1], "2026-12-04T15:00:00+00:00")),
    ('{"name": "s", "received": false, "payload": null}', pgdrain.Signal("s", False)),
    ('"not an object"', None), ('{"received": true}', None), ("[1e999999]", None),
])
def test_what_a_wait_got_is_read_back_or_warned_about(stored, expected, caplog):
    from dataclasses import replace

    from pgdrain.drain.checkpoints import _signal

    signal = _signal(replace(_job("order"), wait_result=stored))
    assert signal == expected
    if expected is None:
        assert "what its wait for a signal got is not read" in caplog.text
    else:
        assert signal.timed_out is (not expected.received)


def test_a_resumable_type_cannot_be_transactional():
    with pytest.raises(pgdrain.ConfigError, match="resumable job saves checkpoints"):
        pgdrain.job("both", resumable=True, transactional=True, registry=Registry())(
            lambda job, conn: None)
