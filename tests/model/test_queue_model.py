"""The queue against its model (machine.py), at random: a bounded run in every ``make test``;
``make soak-model`` (PGDRAIN_MODEL_EXAMPLES, PGDRAIN_MODEL_STEPS) runs it long."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.model.machine import STATS, QueueModel

EXAMPLES = int(os.environ.get("PGDRAIN_MODEL_EXAMPLES") or 100)
STEPS = int(os.environ.get("PGDRAIN_MODEL_STEPS") or 10)
PHASES = ([Phase.generate] if os.environ.get("PGDRAIN_MODEL_SHRINK") == "0" else
          [p for p in Phase if p is not Phase.explain])
"""PGDRAIN_MODEL_SHRINK=0 reports a failure as found, unshrunk (shrinking re-runs drains).
Never the explain phase: once a failure is found it traces every line the test runs
(sys.settrace), drains included, which made a failing run look like a hang for an hour."""


@pytest.mark.parametrize("retention_seconds", [0, 10**9], ids=["as shipped", "history kept"])
def test_the_queue_keeps_to_its_model(model_url, retention_seconds):
    QueueModel.url, QueueModel.retention_seconds = model_url, retention_seconds
    run_state_machine_as_test(QueueModel, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None,
        phases=PHASES,
        suppress_health_check=list(HealthCheck)))
    print("MODEL " + ", ".join(f"{name}={n}" for name, n in sorted(STATS.items())))
