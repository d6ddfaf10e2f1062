"""The drain function with a batch handler among the job modules: the scheduled event drains
a batch type's jobs in calls of its batch_size, and the summary counts items."""

from __future__ import annotations

import pgdrain
from pgdrain.registry import REGISTRY
from pgdrain_dev.context import LambdaContext
from tests.support.functions import load_event


def test_the_scheduled_drain_runs_batches_and_counts_their_items(load_function, conn,
                                                                 monkeypatch):
    # Registered for this test only (the job modules' registry is the process's).
    monkeypatch.setattr(REGISTRY, "_handlers", dict(REGISTRY._handlers))
    calls = []

    @pgdrain.job("test-index-docs", batch_size=3, timeout=5, backoff=lambda a, e: 60)
    def index_docs(jobs):
        calls.append([job.id for job in jobs])
        return pgdrain.BatchResult(results={jobs[0].id: "indexed"},
                                   failures={job.id: "shard down" for job in jobs
                                             if job.payload.get("bad")})

    ids = [r.id for r in pgdrain.enqueue_many(conn, [{"job_type": "test-index-docs",
                                                      "payload": {"bad": n == 4}}
                                                     for n in range(5)])]
    app = load_function("drain")
    summary = app.lambda_handler(load_event("drain_schedule.json"), LambdaContext())
    assert calls == [ids[:3], ids[3:]]
    assert (summary["claimed"], summary["done"], summary["retried"]) == (5, 4, 1)
    assert pgdrain.get_job(conn, ids[0])["result"] == "indexed"
    assert pgdrain.get_job(conn, ids[4])["last_error"] == "BatchItemFailed: shard down"
