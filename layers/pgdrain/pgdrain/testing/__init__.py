"""Testing helpers for your own test suite: run jobs inline through the real drain, assert
what was enqueued, and move the queue's clock without sleeping.

    import pgdrain.testing as pgt

    def test_signup_sends_the_welcome_email(pgdrain_conn):
        signup(pgdrain_conn, "sarah@example.com")
        pgt.assert_enqueued(pgdrain_conn, "send-email", {"to": "sarah@example.com"})
        drained = pgt.drain_all(pgdrain_conn)
        assert drained.counts == {"done": 1}

The pytest fixtures (``pgdrain_database``, ``pgdrain_conn``) come from the ``pgdrain_pytest``
plugin, loaded by pytest when pgdrain is installed. Never imported by the Lambda functions.
"""

from __future__ import annotations

from .assertions import assert_enqueued, enqueued, refute_enqueued
from .clock import Advanced, advance, schedule_rewinds
from .drains import (
    Drained,
    DrainFailed,
    JobNotRun,
    JobRun,
    NotSettled,
    drain_all,
    outcome_of,
    run_job,
)
from .target import NoDatabaseUrl, OpenTransaction, remember
from .target import testing_connect as connect

__all__ = [
    "Advanced",
    "DrainFailed",
    "Drained",
    "JobNotRun",
    "JobRun",
    "NoDatabaseUrl",
    "NotSettled",
    "OpenTransaction",
    "advance",
    "assert_enqueued",
    "connect",
    "drain_all",
    "enqueued",
    "outcome_of",
    "refute_enqueued",
    "remember",
    "run_job",
    "schedule_rewinds",
]
