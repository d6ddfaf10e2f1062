"""Trace context from enqueue to run, against PostgreSQL through the real drain: the enqueue
keeps the caller's sampled context with the job (and nothing for an untraced caller), and
the drain runs the job in that trace: an X-Ray segment sent to a daemon stand-in on
127.0.0.1, and an OpenTelemetry span that is the enqueuer's child and links the drain's."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

import pgdrain
from pgdrain.registry import Registry
from tests.support.drains import run_drain

ROOT = "1-5759e988-bd862e3fe1be46a994272793"
SAMPLED = f"Root={ROOT};Parent=53995c3f42cd8ad8;Sampled=1"


@pytest.fixture
def daemon(monkeypatch) -> Iterator[socket.socket]:
    """An X-Ray daemon stand-in: a UDP socket on 127.0.0.1 the drain is pointed at."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    monkeypatch.setenv("AWS_XRAY_DAEMON_ADDRESS", f"127.0.0.1:{sock.getsockname()[1]}")
    yield sock
    sock.close()


def _segments(sock: socket.socket, count: int) -> list[dict[str, Any]]:
    found = []
    for _ in range(count):
        header, _, body = sock.recv(65536).partition(b"\n")
        assert json.loads(header) == {"format": "json", "version": 1}
        found.append(json.loads(body))
    sock.settimeout(0.2)
    with pytest.raises(TimeoutError):
        sock.recv(65536)  # and no more
    return found


def test_an_enqueue_keeps_its_callers_sampled_trace_and_nothing_otherwise(conn, sql,
                                                                          monkeypatch):
    monkeypatch.delenv("_X_AMZN_TRACE_ID", raising=False)
    plain = pgdrain.enqueue(conn, "t", {})
    monkeypatch.setenv("_X_AMZN_TRACE_ID", SAMPLED.replace("Sampled=1", "Sampled=0"))
    unsampled = pgdrain.enqueue(conn, "t", {})
    monkeypatch.setenv("_X_AMZN_TRACE_ID", SAMPLED)
    traced = pgdrain.enqueue_many(conn, [{"job_type": "t"}, {"job_type": "u"}])
    rows = {r["id"]: r["trace_context"] for r in sql("SELECT id, trace_context FROM jobs")}
    assert rows[plain.id] is None and rows[unsampled.id] is None
    assert [rows[r.id] for r in traced] == [{"xray": SAMPLED}] * 2
    assert pgdrain.get_job(conn, traced[0].id)["trace_context"] == {"xray": SAMPLED}


@pytest.mark.parametrize("concurrency", [1, 4], ids=["on the drain's thread", "on workers"])
def test_the_drain_sends_each_traced_job_as_a_segment_of_its_enqueuers_trace(
        database_url, conn, daemon, monkeypatch, concurrency):
    registry = Registry()

    @pgdrain.job("traced", registry=registry)
    def handler(job: pgdrain.Job) -> None:
        if job.payload.get("fail"):
            raise ValueError("bad row 12")

    monkeypatch.setenv("_X_AMZN_TRACE_ID", SAMPLED)
    good = pgdrain.enqueue(conn, "traced", {})
    bad = pgdrain.enqueue(conn, "traced", {"fail": True})
    monkeypatch.delenv("_X_AMZN_TRACE_ID")
    untraced = pgdrain.enqueue(conn, "traced", {})
    summary = run_drain(database_url, registry, concurrency=concurrency)
    assert (summary.done, summary.retried) == (2, 1)
    segments = {s["annotations"]["job_id"]: s for s in _segments(daemon, 2)}
    assert set(segments) == {good.id, bad.id}  # the untraced job sent nothing
    assert untraced.id not in segments
    for segment in segments.values():
        assert (segment["trace_id"], segment["parent_id"]) == (ROOT, "53995c3f42cd8ad8")
        assert [s["name"] for s in segment["subsegments"]] == ["queued", "run"]
    assert "fault" not in segments[good.id]
    assert segments[bad.id]["fault"] is True
    assert segments[bad.id]["subsegments"][1]["cause"]["exceptions"][0]["message"] == \
        "bad row 12"


def test_a_job_runs_in_an_opentelemetry_span_under_its_enqueuers_span(database_url, conn,
                                                                       monkeypatch):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    monkeypatch.delenv("_X_AMZN_TRACE_ID", raising=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # The global provider can be set once per process: this test's own is used explicitly
    # where the test makes spans, and installed as the global one for the drain's.
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    tracer = provider.get_tracer("test")
    registry = Registry()

    @pgdrain.job("otel-job", registry=registry)
    def handler(job: pgdrain.Job) -> None:
        with trace.get_tracer("app").start_as_current_span("send the e-mail"):
            pass

    with tracer.start_as_current_span("POST /signup") as request:
        job = pgdrain.enqueue(conn, "otel-job", {})
    with tracer.start_as_current_span("drain") as drain_span:
        assert run_drain(database_url, registry, concurrency=1).done == 1
    spans = {s.name: s for s in exporter.get_finished_spans()}
    run = spans["pgdrain.job otel-job"]
    assert run.context.trace_id == request.get_span_context().trace_id
    assert run.parent.span_id == request.get_span_context().span_id
    assert [link.context.span_id for link in run.links] == [
        drain_span.get_span_context().span_id]
    assert run.attributes["messaging.message.id"] == str(job.id)
    assert spans["pgdrain.queued"].parent.span_id == request.get_span_context().span_id
    assert spans["send the e-mail"].parent.span_id == run.context.span_id


def test_a_job_a_traced_job_enqueues_joins_that_jobs_trace_not_the_drains(
        database_url, conn, daemon, monkeypatch, sql):
    registry = Registry()

    @pgdrain.job("parent-job", registry=registry, transactional=True)
    def parent(job: pgdrain.Job, tx: Any) -> None:
        pgdrain.enqueue(tx, "child-job", {})

    pgdrain.job("child-job", registry=registry)(lambda job: None)
    monkeypatch.setenv("_X_AMZN_TRACE_ID", SAMPLED)
    pgdrain.enqueue(conn, "parent-job", {})
    # The drain's own invocation is traced too (another trace): the child must not join it.
    monkeypatch.setenv("_X_AMZN_TRACE_ID",
                       "Root=1-00000000-000000000000000000000001;Parent=aaaaaaaaaaaaaaaa;"
                       "Sampled=1")
    assert run_drain(database_url, registry, concurrency=1).done == 2
    first, second = _segments(daemon, 2)
    parent_segment = first if first["annotations"]["job_type"] == "parent-job" else second
    child_segment = second if parent_segment is first else first
    run_id = parent_segment["subsegments"][-1]["id"]
    assert (child_segment["trace_id"], child_segment["parent_id"]) == (ROOT, run_id)
    assert parent_segment["annotations"]["drain_trace_id"] == \
        "1-00000000-000000000000000000000001"


def test_each_traced_item_of_a_batch_gets_its_segment_in_its_own_trace(
        database_url, conn, daemon, monkeypatch):
    registry = Registry()
    pgdrain.job("index-docs", batch_size=10, registry=registry)(lambda jobs: None)
    other = "Root=1-5759e988-00000000000000000000000f;Parent=1111111111111111;Sampled=1"
    monkeypatch.delenv("_X_AMZN_TRACE_ID", raising=False)
    untraced = pgdrain.enqueue(conn, "index-docs", {}).id  # the batch's first: no trace
    monkeypatch.setenv("_X_AMZN_TRACE_ID", SAMPLED)
    first = pgdrain.enqueue(conn, "index-docs", {}).id
    monkeypatch.setenv("_X_AMZN_TRACE_ID", other)
    second = pgdrain.enqueue(conn, "index-docs", {}).id
    monkeypatch.delenv("_X_AMZN_TRACE_ID")
    assert run_drain(database_url, registry).done == 3
    segments = {s["annotations"]["job_id"]: s for s in _segments(daemon, 2)}
    assert set(segments) == {first, second} and untraced not in segments
    assert (segments[first]["trace_id"], segments[first]["parent_id"]) == (
        ROOT, "53995c3f42cd8ad8")
    assert (segments[second]["trace_id"], segments[second]["parent_id"]) == (
        "1-5759e988-00000000000000000000000f", "1111111111111111")
