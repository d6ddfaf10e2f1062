"""One loop for every PGDRAIN_CONCURRENCY: what held for one slot holds for many, against
the in-memory store (tests/support/fake_store.py)."""

from __future__ import annotations

import dataclasses
import time

import pytest

import pgdrain
from pgdrain.drain import drain
from pgdrain.policy import Backoff
from pgdrain.registry import Registry
from tests.support.drains import KEEP_HISTORY_SECONDS
from tests.support.fake_store import FakeStore

SETTINGS = pgdrain.Settings(safety_margin_seconds=0.5, backoff=Backoff(2, 60, jitter=0),
                            retention_seconds=KEEP_HISTORY_SECONDS, batch_size=5)


class Events:
    """What an observer heard, in order: each job's outcome and each batch's end."""

    def __init__(self) -> None:
        self.heard: list[str] = []

    def job_finished(self, job, outcome, duration, error) -> None:
        self.heard.append(str(outcome))

    def batch_finished(self) -> None:
        self.heard.append("batch")


@pytest.mark.parametrize("concurrency", [1, 4])
def test_the_observer_hears_each_batch_end_after_its_outcomes(concurrency):
    # The drain function logs its "jobs done" line at each batch's end (aws.observer): the
    # concurrent loop used to never say a batch had ended.
    registry = Registry()
    pgdrain.job("ok", registry=registry)(lambda job: None)
    store, events = FakeStore(), Events()
    for _ in range(12):
        store.add("ok")
    deadline = time.monotonic() + 60
    summary = drain(store, registry, dataclasses.replace(SETTINGS, concurrency=concurrency),
                    time_left=lambda: deadline - time.monotonic(), observer=events)
    assert (summary.done, summary.stopped) == (12, "empty")
    assert events.heard.count("done") == 12
    assert "batch" in events.heard[events.heard.index("done"):]
    assert events.heard[-1] == "batch"


def test_the_summarys_stop_reason_is_a_plain_string():
    registry = Registry()
    deadline = time.monotonic() + 60
    summary = drain(FakeStore(), registry, SETTINGS,
                    time_left=lambda: deadline - time.monotonic())
    assert type(summary.as_dict()["stopped"]) is str
    assert summary.as_dict()["stopped"] == summary.stopped == "empty"
