"""Which trace context an enqueue keeps (pgdrain.trace_context) and the X-Ray segment the drain
sends for a job (pgdrain.job_spans): pure rules, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pgdrain.job_spans import daemon_address, xray_segment
from pgdrain.models import Job
from pgdrain.trace_context import capture, traceparent, xray_header

ROOT = "1-5759e988-bd862e3fe1be46a994272793"
SAMPLED = f"Root={ROOT};Parent=53995c3f42cd8ad8;Sampled=1"
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_sampled_xray_header_with_a_parent_is_kept_in_one_form():
    assert xray_header(SAMPLED) == SAMPLED
    assert xray_header(f"Root={ROOT};Parent=53995c3f42cd8ad8;Sampled=1;Lineage=a:1") == SAMPLED


@pytest.mark.parametrize("header", [
    None, "", f"Root={ROOT};Parent=53995c3f42cd8ad8;Sampled=0",  # not sampled: shows nothing
    f"Root={ROOT};Sampled=1",  # no parent to hang under
    f"Root={ROOT};Parent=53995c3f42cd8ad8;Sampled=?",
    "Root=1-xyz;Parent=53995c3f42cd8ad8;Sampled=1", "x" * 300,
])
def test_other_xray_headers_are_not_kept(header):
    assert xray_header(header) is None


def test_a_sampled_traceparent_is_kept_and_others_are_not():
    assert traceparent(PARENT) == PARENT
    assert traceparent(PARENT.upper()) == PARENT
    assert traceparent(PARENT[:-2] + "00") is None  # not sampled
    assert traceparent("00-" + "0" * 32 + "-b7ad6b7169203331-01") is None
    assert traceparent("ff" + PARENT[2:]) is None
    assert traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331") is None


def test_capture_prefers_the_functions_own_trace_and_keeps_the_requests_traceparent():
    env = {"_X_AMZN_TRACE_ID": SAMPLED}
    other = f"Root={ROOT};Parent=1111111111111111;Sampled=1"
    assert capture({"x-amzn-trace-id": other, "traceparent": PARENT, "tracestate": "a=1"},
                   env) == {"xray": SAMPLED, "traceparent": PARENT, "tracestate": "a=1"}
    assert capture({"x-amzn-trace-id": other}, {}) == {"xray": other}


def test_nothing_is_captured_from_an_untraced_caller():
    assert capture(None, {}) is None
    assert capture({"x-amzn-trace-id": SAMPLED.replace("Sampled=1", "Sampled=0")},
                   {"_X_AMZN_TRACE_ID": "garbage"}) is None


@pytest.mark.parametrize(("value", "address"), [
    ("127.0.0.1:2000", ("127.0.0.1", 2000)),
    ("tcp:127.0.0.1:2000 udp:127.0.0.1:2001", ("127.0.0.1", 2001)),
    ("[::1]:2000", ("::1", 2000)),
    (None, None), ("", None), ("nonsense", None), ("127.0.0.1:0", None),
])
def test_the_daemon_address_is_read_as_the_sdk_reads_it(value, address):
    assert daemon_address(value) == address


def _job(attempts: int = 1) -> Job:
    now = datetime.now(UTC)
    return Job(id=7, job_type="send email!", payload={}, attempts=attempts, max_attempts=3,
               queue="mail", priority=0, run_at=now - timedelta(seconds=2),
               created_at=now - timedelta(seconds=10), claimed_at=now,
               lease_expires_at=now, lease_token="t", trace_context=None)


def test_the_segment_hangs_under_the_enqueuer_and_shows_the_wait_and_the_run():
    job = _job()
    started = job.claimed_at.timestamp()
    segment = xray_segment(job, SAMPLED, started, started + 0.5, None,
                           "Root=1-00000000-000000000000000000000001;Parent=aa;Sampled=1")
    assert (segment["trace_id"], segment["parent_id"]) == (ROOT, "53995c3f42cd8ad8")
    assert segment["name"] == "pgdrain send email_"
    queued, run = segment["subsegments"]
    assert queued["name"] == "queued" and run["name"] == "run"
    assert queued["start_time"] == pytest.approx(job.created_at.timestamp())
    assert queued["end_time"] == run["start_time"] == started
    assert segment["annotations"] == {"job_id": 7, "job_type": "send email!",
                                      "queue": "mail", "attempt": 1,
                                      "drain_trace_id": "1-00000000-000000000000000000000001"}
    assert "fault" not in segment and len({segment["id"], queued["id"], run["id"]}) == 3


def test_a_retry_waits_from_when_it_became_due_and_an_error_is_a_fault():
    job = _job(attempts=2)
    started = job.claimed_at.timestamp()
    segment = xray_segment(job, SAMPLED, started, started + 1, ValueError("bad row"), None)
    queued, run = segment["subsegments"]
    assert queued["start_time"] == pytest.approx(job.run_at.timestamp())
    assert segment["fault"] and run["fault"]
    assert run["cause"]["exceptions"][0]["type"] == "ValueError"
    assert run["cause"]["exceptions"][0]["message"] == "bad row"
    assert "drain_trace_id" not in segment["annotations"]
