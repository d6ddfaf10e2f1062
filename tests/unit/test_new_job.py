"""Validation of jobs before they are inserted: each error names its field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from pgdrain.enqueue import new_job
from pgdrain.errors import InvalidJobError


def test_defaults():
    job = new_job("send-email", {"to": "sarah@example.com"})
    assert job.job_type == "send-email"
    assert job.payload_json == '{"to":"sarah@example.com"}'
    assert (job.queue, job.priority, job.max_attempts) == ("default", 0, 3)
    assert (job.run_at, job.delay_seconds, job.dedupe_key) == (None, 0.0, None)


def test_missing_payload_is_an_empty_object():
    assert new_job("ping").payload_json == "{}"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"job_type": ""}, "job_type: must be a non-empty string"),
        ({"job_type": 7}, "job_type: must be a non-empty string"),
        ({"job_type": "x" * 201}, "job_type: must be at most 200 characters"),
        ({"job_type": "a\x00b"}, "job_type: must not contain NUL"),
        ({"payload": {"n": float("nan")}}, "payload: must be JSON-serialisable"),
        ({"payload": {"f": object()}}, "payload: must be JSON-serialisable"),
        ({"payload": {"s": "a\x00"}}, "payload: must not contain NUL"),
        ({"queue": ""}, "queue: must be a non-empty string"),
        ({"priority": 1.5}, "priority: must be an integer"),
        ({"priority": True}, "priority: must be an integer"),
        ({"priority": 40000}, "priority: must be between -32768 and 32767"),
        ({"max_attempts": 0}, "max_attempts: must be between 1"),
        ({"run_at": "2030-01-01"}, "run_at: must be a datetime"),
        ({"run_at": datetime(2030, 1, 1)}, "run_at: must carry a timezone"),
        ({"run_at": datetime(2030, 1, 1, tzinfo=UTC), "delay_seconds": 5}, "not both"),
        ({"delay_seconds": -1}, "delay_seconds: must be between 0"),
        ({"delay_seconds": float("inf")}, "delay_seconds: must be between 0"),
        ({"delay_seconds": "5"}, "delay_seconds: must be a number"),
        ({"dedupe_key": ""}, "dedupe_key: must be a non-empty string"),
        ({"dedupe_key": "k" * 501}, "dedupe_key: must be at most 500 characters"),
        ({"queue": "a\ud800"}, "queue: must be valid Unicode"),
        ({"dedupe_key": "\udfff"}, "dedupe_key: must be valid Unicode"),
        ({"payload": {"s": "\ud800"}}, "payload: must be valid Unicode"),
        ({"run_at": datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5)))},
         "run_at: is out of range"),
    ],
)
def test_invalid_fields_are_named(kwargs, message):
    kwargs = {"job_type": "send-email", **kwargs}
    with pytest.raises(InvalidJobError) as raised:
        new_job(**kwargs)
    assert message in str(raised.value)


def test_an_escaped_backslash_before_u0000_is_not_a_nul():
    assert new_job("x", {"path": "C:\\u0000"}).payload_json == '{"path":"C:\\\\u0000"}'


def test_batch_index_is_reported():
    with pytest.raises(InvalidJobError, match=r"^jobs\[3\]\.priority: must be an integer"):
        new_job("x", priority="high", index=3)
