"""Batch handlers' pure rules: the return protocol's per-item outcomes, the grouping of ready
jobs into a batch, each item's end from the batch's, the batch claims' turns and looks, and
the decorator's checks."""

from __future__ import annotations

from collections import deque
from datetime import UTC, datetime

import pytest

import pgdrain
from pgdrain import BatchResult, ConfigError, Discard, Snooze
from pgdrain.batch_store import BatchClaim
from pgdrain.batches import BatchItemFailed, BatchReportError, item_outcomes
from pgdrain.drain.batches import (
    BATCH_BUSY_SECONDS,
    BATCH_LOOK_SECONDS,
    BatchClaims,
    BatchCommitted,
    item_ends,
    look_after,
    take_group,
)
from pgdrain.drain.outcomes import COMMITTED, Ended
from pgdrain.errors import HandlerTimeout
from pgdrain.models import Job
from pgdrain.registry import Handler, Registry

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def job(job_id: int, job_type: str = "index-docs", **fields) -> Job:
    return Job(job_id, job_type, {}, 1, 3, "default", 0, NOW, NOW, NOW, NOW, f"t{job_id}",
               **fields)


JOBS = [job(1), job(2), job(3)]


# --- the return protocol ---


def test_none_is_every_item_done():
    assert [(o.job.id, o.result, o.error) for o in item_outcomes(JOBS, None)] == [
        (1, None, None), (2, None, None), (3, None, None)]


def test_a_mapping_is_each_named_items_result():
    outcomes = item_outcomes(JOBS, {1: "a", 3: {"n": 3}})
    assert [(o.result, o.error) for o in outcomes] == [("a", None), (None, None),
                                                        ({"n": 3}, None)]


def test_failures_fail_their_items_alone_with_their_error():
    boom = ValueError("boom")
    outcomes = item_outcomes(JOBS, BatchResult(results={1: "ok"},
                                               failures={2: boom, 3: "no shard"}))
    assert outcomes[0].result == "ok" and outcomes[0].error is None
    assert outcomes[1].error is boom
    assert isinstance(outcomes[2].error, BatchItemFailed)
    assert str(outcomes[2].error) == "no shard"


def test_a_snooze_or_discard_may_be_one_items_error():
    outcomes = item_outcomes(JOBS, BatchResult(failures={1: Snooze(5), 2: Discard("spam")}))
    assert isinstance(outcomes[0].error, Snooze) and isinstance(outcomes[1].error, Discard)
    assert outcomes[2].error is None


@pytest.mark.parametrize(("value", "says"), [
    (BatchResult(failures={99: "x"}), "failures name 99, not a job id of this batch"),
    ({42: "x"}, "results name 42"),
    (BatchResult(results={1: "x"}, failures={1: "y"}), "both done (a result) and failed"),
    (["done"], "not list"),
    ("ok", "not str"),
    ({True: "x"}, "results name True"),
])
def test_a_report_that_is_not_of_this_batch_is_the_batchs_error(value, says):
    with pytest.raises(BatchReportError, match=says.replace("(", r"\(").replace(")", r"\)")):
        item_outcomes(JOBS, value)


# --- grouping ---


def test_a_batch_takes_the_ready_jobs_of_its_type_up_to_its_size():
    handler = Handler("index-docs", print, batch_size=3)
    ready = deque([job(2), job(3, "other"), job(4), job(5), job(6)])
    group = take_group(ready, job(1), handler)
    assert [j.id for j in group] == [1, 2, 4]
    assert [j.id for j in ready] == [3, 5, 6]


def test_a_job_whose_claim_was_lost_runs_alone_and_a_broken_payload_is_left_out():
    handler = Handler("index-docs", print, batch_size=10)
    ready = deque([job(2, lost_claims=1), job(3, payload_error="bad"), job(4)])
    assert [j.id for j in take_group(ready, job(1), handler)] == [1, 4]
    assert [j.id for j in ready] == [2, 3]
    assert [j.id for j in take_group(ready, job(9, lost_claims=1), handler)] == [9]
    assert [j.id for j in ready] == [2, 3]


# --- each item's end ---

HANDLER = Handler("index-docs", print, batch_size=10)


def ended(**fields) -> Ended:
    return Ended(JOBS[0], HANDLER, 1.0, 0.5, **fields)


def test_raising_ends_every_item_with_the_error():
    error = RuntimeError("down")
    ends = item_ends(ended(error=error), HANDLER, JOBS)
    assert [(e.job.id, e.error) for e in ends] == [(1, error), (2, error), (3, error)]
    assert all(e.handler is HANDLER and e.duration == 0.5 for e in ends)


def test_a_timeout_ends_every_item_timed_out():
    ends = item_ends(ended(timed_out=2.0, error=HandlerTimeout("x")), HANDLER, JOBS)
    assert [e.timed_out for e in ends] == [2.0, 2.0, 2.0]


def test_a_bad_report_ends_every_item_with_it():
    ends = item_ends(ended(result={7: "x"}), HANDLER, JOBS)
    assert all(isinstance(e.error, BatchReportError) for e in ends)


def test_a_committed_transaction_leaves_only_the_reported_failures():
    boom = ValueError("boom")
    ends = item_ends(ended(result=BatchCommitted({2: boom})), HANDLER, JOBS)
    assert [(e.result, e.error) for e in ends] == [(COMMITTED, None), (None, boom),
                                                    (COMMITTED, None)]


def test_each_item_gets_its_result():
    ends = item_ends(ended(result=BatchResult(results={3: "c"}, failures={1: "no"})),
                     HANDLER, JOBS)
    assert [e.result for e in ends] == [None, None, "c"]
    assert isinstance(ends[0].error, BatchItemFailed) and ends[1].error is None


# --- the batch claims ---


class FakeStore:
    def __init__(self, answers):
        self.answers = answers
        self.asked: list[tuple[str, int]] = []

    def claim_batch(self, *, job_type, batch_size, take, batch_window, lease_seconds, queues):
        self.asked.append((job_type, batch_size))
        return self.answers.get(job_type, BatchClaim([]))


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def claims(clock, **sizes):
    return BatchClaims({t.replace("_", "-"): Handler(t.replace("_", "-"), print, batch_size=n,
                                                     batch_window=5)
                        for t, n in sizes.items()}, clock)


def test_the_types_take_turns_and_a_ready_batch_is_returned():
    clock = Clock()
    store = FakeStore({"b": BatchClaim([job(1, "b")], -0.1)})
    batches = claims(clock, a=10, b=20)
    assert [j.id for j in batches.claim(store, room=1000, lease=60, queues=None)] == [1]
    assert store.asked == [("a", 10), ("b", 20)]
    # The room caps a batch.
    batches.claim(store, room=5, lease=60, queues=None)
    assert store.asked[2:] == [("b", 5)]


def test_a_type_with_nothing_due_is_looked_at_again_a_second_later_unless_every():
    clock = Clock()
    store = FakeStore({})
    batches = claims(clock, a=10)
    assert batches.claim(store, room=100, lease=60, queues=None) == []
    batches.claim(store, room=100, lease=60, queues=None)
    assert len(store.asked) == 1
    batches.claim(store, room=100, lease=60, queues=None, every=True)
    assert len(store.asked) == 2
    clock.now += BATCH_LOOK_SECONDS
    batches.claim(store, room=100, lease=60, queues=None)
    assert len(store.asked) == 3


def test_every_does_not_look_twice_in_one_claim():
    clock = Clock()
    store = FakeStore({})
    batches = claims(clock, a=10)
    batches.claim(store, room=100, lease=60, queues=None)
    batches.claim(store, room=100, lease=60, queues=None, every=True)
    assert len(store.asked) == 1


def test_an_open_window_says_when_it_closes():
    clock = Clock()
    store = FakeStore({"a": BatchClaim([], 3.0), "b": BatchClaim([], 0.5)})
    batches = claims(clock, a=10, b=10)
    assert batches.window_in() is None
    batches.claim(store, room=100, lease=60, queues=None)
    assert batches.window_in() == 0.5
    clock.now += 1.0
    assert batches.window_in() == 0.0


@pytest.mark.parametrize(("closes_in", "claimed", "after"), [
    (None, False, BATCH_LOOK_SECONDS), (0.3, False, 0.3), (30.0, False, BATCH_LOOK_SECONDS),
    (-1.0, False, BATCH_BUSY_SECONDS), (-1.0, True, 0.0)])
def test_when_a_type_is_looked_at_again(closes_in, claimed, after):
    assert look_after(closes_in, claimed) == after


# --- the decorator ---


def test_the_decorator_records_batch_size_and_window():
    registry = Registry()

    @pgdrain.job("index-docs", batch_size=100, batch_window=5, registry=registry)
    def index_docs(jobs):
        return None

    handler = registry.get("index-docs")
    assert (handler.batch_size, handler.batch_window) == (100, 5.0)
    assert registry.batch_types() == {"index-docs": handler}


@pytest.mark.parametrize(("options", "says"), [
    ({"batch_size": 0}, "batch_size must be an integer from 1 to 10,000"),
    ({"batch_size": 10_001}, "batch_size must be an integer"),
    ({"batch_size": True}, "batch_size must be an integer"),
    ({"batch_size": 10, "batch_window": -1}, "batch_window must be a number of seconds"),
    ({"batch_size": 10, "batch_window": 301}, "from 0 to 300"),
    ({"batch_window": 5}, "give batch_size= too"),
    ({"batch_size": 10, "resumable": True}, "cannot be resumable"),
])
def test_the_decorator_says_what_is_wrong(options, says):
    with pytest.raises(ConfigError, match=says):
        pgdrain.job("index-docs", registry=Registry(), **options)
