"""Dependencies (``depends_on``, ``after``) against PostgreSQL: a child waits for its parents
and reads their results; a graph is enqueued in one call, refused whole when it names an
unknown parent or forms a cycle; a parent that fails or is cancelled cancels the children
that needed it done, transitively, and requeueing it brings them back; a callback
(``after="finished"``) runs exactly once when its last parents finish in different drains at
once, and sees every parent's end; a parent's result outlives its row."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path

import pytest

import pgdrain
from pgdrain.db import connect
from pgdrain.errors import InvalidJobError
from pgdrain.registry import Registry
from tests.support.drains import run_drain

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
FAN_IN_EXAMPLE = re.search(r"<!-- fan-in-example -->\n```python\n(.*?)```", README,
                           re.DOTALL)[1]

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


class Recorder:
    """Job types that record their runs: ``step`` returns its payload's ``value`` (or fails
    when ``fail`` is set: enqueue it with max_attempts=1), ``collect`` returns what it saw of
    its parents."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.runs: list[tuple[str, object]] = []
        self.seen: dict[int, dict[str, object]] = {}
        self.lock = threading.Lock()

        @pgdrain.job("step", max_attempts=1, registry=self.registry)
        def step(job: pgdrain.Job) -> object:
            with self.lock:
                self.runs.append(("step", job.payload.get("value")))
            if job.payload.get("fail"):
                raise RuntimeError(f"step {job.payload.get('value')} failed")
            return job.payload.get("value")

        @pgdrain.job("collect", max_attempts=1, registry=self.registry)
        def collect(job: pgdrain.Job) -> dict:
            seen = {"parents": job.parents, "results": job.parent_results}
            with self.lock:
                self.runs.append(("collect", job.id))
                self.seen[job.id] = seen
            ends = list(job.parents.values())
            return {end: ends.count(end) for end in sorted(set(ends))}

    def drain_all(self, database_url: str, rounds: int = 10, **settings) -> None:
        for _ in range(rounds):
            summary = run_drain(database_url, self.registry, **settings)
            if not summary.claimed:
                return


def _status(sql, ident: int) -> dict:
    return sql("SELECT status, last_error, parents_left FROM jobs WHERE id = :id", id=ident)[0]


def test_a_child_waits_for_its_parent_then_reads_its_result(database_url, conn, sql):
    recorder = Recorder()
    parent = pgdrain.enqueue(conn, "step", {"value": "exported"})
    child = pgdrain.enqueue(conn, "collect", {}, depends_on=[parent.id])
    assert (child.created, child.due) == (True, False)
    assert _status(sql, child.id) == {"status": "waiting", "last_error": None,
                                      "parents_left": 1}
    # The claim never takes a waiting job.
    assert [j.id for j in pgdrain.claim(conn, batch_size=10, lease_seconds=60)] == [parent.id]
    sql("UPDATE jobs SET status = 'pending', lease_token = NULL WHERE id = :id", id=parent.id)
    recorder.drain_all(database_url)
    assert recorder.runs == [("step", "exported"), ("collect", child.id)]
    assert recorder.seen[child.id] == {"parents": {parent.id: "done"},
                                       "results": {parent.id: "exported"}}
    assert _status(sql, child.id)["status"] == "done"


def test_a_graph_in_one_batch_by_name_and_by_index_runs_in_order(database_url, conn, sql):
    recorder = Recorder()
    results = pgdrain.enqueue_many(conn, [
        {"job_type": "step", "payload": {"value": "a"}, "name": "a"},
        {"job_type": "step", "payload": {"value": "b"}, "depends_on": ["a"]},
        {"job_type": "step", "payload": {"value": "c"}, "depends_on": [{"index": 0}]},
        {"job_type": "collect", "depends_on": [{"index": 1}, {"index": 2}]},
    ])
    assert [r.due for r in results] == [True, False, False, False]
    recorder.drain_all(database_url, concurrency=4)
    order = [value for kind, value in recorder.runs if kind == "step"]
    assert order[0] == "a" and sorted(order[1:]) == ["b", "c"]
    assert recorder.runs[-1] == ("collect", results[3].id)
    assert recorder.seen[results[3].id]["results"] == {results[1].id: "b", results[2].id: "c"}


@pytest.mark.parametrize(("batch", "message"), [
    ([{"job_type": "step", "name": "a", "depends_on": ["b"]},
      {"job_type": "step", "name": "b", "depends_on": ["a"]}], "form a cycle"),
    ([{"job_type": "step", "name": "a", "depends_on": ["a"]}], "cannot depend on itself"),
    ([{"job_type": "step", "depends_on": ["nobody"]}], "no job of this batch is named"),
    ([{"job_type": "step", "depends_on": [{"index": 5}]}], "is not in this batch"),
    ([{"job_type": "step"}, {"job_type": "step", "depends_on": [987654]}],
     "parent job 987654 does not exist"),
    ([{"job_type": "step", "name": "x"}, {"job_type": "step", "name": "x"}], "unique"),
    ([{"job_type": "step", "depends_on": [True]}], "not true or false"),
    ([{"job_type": "step", "after": "finished"}], "needs depends_on"),
    ([{"job_type": "step", "depends_on": [1], "after": "maybe"}], "must be one of"),
    ([{"job_type": "step", "depends_on": [1], "dedupe_key": "k"}], "not with dedupe_key"),
], ids=["cycle", "itself", "unknown name", "unknown index", "unknown id", "name twice",
        "a boolean", "after alone", "bad after", "dedupe key"])
def test_a_bad_graph_is_refused_whole(conn, sql, batch, message):
    with pytest.raises(InvalidJobError, match=message) as refused:
        pgdrain.enqueue_many(conn, batch)
    assert refused.value.field in ("depends_on", "name", "after")
    assert sql("SELECT count(*) AS n FROM jobs") == [{"n": 0}]
    assert sql("SELECT count(*) AS n FROM job_edges") == [{"n": 0}]


def test_a_failed_parent_cancels_what_needed_it_and_a_callback_still_runs(database_url, conn,
                                                                         sql):
    recorder = Recorder()
    results = pgdrain.enqueue_many(conn, [
        {"job_type": "step", "payload": {"value": 1}, "name": "ok"},
        {"job_type": "step", "payload": {"value": 2, "fail": True}, "name": "bad",
         "max_attempts": 1},
        {"job_type": "step", "payload": {"value": 3}, "name": "child", "depends_on": ["bad"]},
        {"job_type": "step", "payload": {"value": 4}, "name": "grandchild",
         "depends_on": ["child", "ok"]},
        {"job_type": "collect", "depends_on": ["ok", "bad", "child"], "after": "finished"},
    ])
    ok, bad, child, grandchild, callback = (r.id for r in results)
    recorder.drain_all(database_url)
    assert _status(sql, child) == {"status": "cancelled", "parents_left": 0,
                                   "last_error": f"parent job {bad} ended failed"}
    assert _status(sql, grandchild)["last_error"] == f"parent job {child} ended cancelled"
    assert sorted(v for kind, v in recorder.runs if kind == "step") == [1, 2]
    assert recorder.seen[callback]["parents"] == {ok: "done", bad: "failed",
                                                  child: "cancelled"}
    assert recorder.seen[callback]["results"] == {ok: 1}
    assert sql("SELECT result FROM jobs WHERE id = :id", id=callback)[0]["result"] == {
        "cancelled": 1, "done": 1, "failed": 1}

    # Requeued, the failed parent brings back the children its end cancelled; this time
    # it succeeds and they run.
    sql("UPDATE jobs SET payload = '{\"value\": 2}' WHERE id = :id", id=bad)
    assert pgdrain.requeue_failed(conn, ids=[bad]) == [bad]
    assert _status(sql, child) == {"status": "waiting", "parents_left": 1, "last_error": None}
    assert _status(sql, grandchild)["status"] == "waiting"
    recorder.drain_all(database_url)
    assert {_status(sql, i)["status"] for i in (bad, child, grandchild)} == {"done"}


def test_cancelling_a_parent_or_a_waiting_child(conn, sql):
    parent = pgdrain.enqueue(conn, "step", {"value": 1})
    first = pgdrain.enqueue(conn, "step", {}, depends_on=[parent.id])
    second = pgdrain.enqueue(conn, "step", {}, depends_on=[parent.id])
    assert pgdrain.cancel(conn, [second.id]) == {second.id: "cancelled"}
    assert pgdrain.cancel(conn, [parent.id]) == {parent.id: "cancelled"}
    assert _status(sql, first.id) == {"status": "cancelled", "parents_left": 0,
                                      "last_error": f"parent job {parent.id} ended cancelled"}
    # The child cancelled by hand was not the parent's to cancel, and stays as it was.
    assert _status(sql, second.id) == {"status": "cancelled", "parents_left": 1,
                                       "last_error": None}


def test_a_child_of_a_parent_that_already_ended(conn, sql):
    done = pgdrain.enqueue(conn, "step", {})
    failed = pgdrain.enqueue(conn, "step", {})
    sql("UPDATE jobs SET status = 'done', result = '\"r\"' WHERE id = :id", id=done.id)
    sql("UPDATE jobs SET status = 'failed' WHERE id = :id", id=failed.id)
    ready = pgdrain.enqueue(conn, "collect", {}, depends_on=[done.id])
    needed = pgdrain.enqueue(conn, "collect", {}, depends_on=[done.id, failed.id])
    callback = pgdrain.enqueue(conn, "collect", {}, depends_on=[done.id, failed.id],
                               after="finished")
    assert (ready.due, callback.due) == (True, True)
    assert _status(sql, ready.id)["status"] == "pending"
    assert _status(sql, needed.id)["last_error"] == f"parent job {failed.id} ended failed"
    assert _status(sql, callback.id)["status"] == "pending"


def test_a_parents_result_outlives_its_row(database_url, conn, sql):
    recorder = Recorder()
    parent = pgdrain.enqueue(conn, "step", {"value": {"rows": 10_000}})
    child = pgdrain.enqueue(conn, "collect", {}, depends_on=[parent.id])
    run_drain(database_url, recorder.registry, max_jobs=1, retention_seconds=0)
    # Done with nothing to keep, a parent is still kept done until the purge (its children's
    # edges record its end), then purged with the rest.
    assert _status(sql, parent.id)["status"] == "done"
    sql("DELETE FROM jobs WHERE id = :id", id=parent.id)
    recorder.drain_all(database_url, retention_seconds=0)
    assert recorder.seen[child.id]["results"] == {parent.id: {"rows": 10_000}}
    # The child gone too, its edges go with it.
    assert sql("SELECT count(*) AS n FROM job_edges") == [{"n": 0}]


def test_a_graph_enqueued_in_a_transaction_that_rolls_back_leaves_nothing(database_url, sql):
    app = connect(database_url)
    try:
        app.run("BEGIN")
        parent = pgdrain.enqueue(app, "step", {})
        pgdrain.enqueue(app, "step", {}, depends_on=[parent.id])
        app.run("ROLLBACK")
    finally:
        app.close()
    assert sql("SELECT count(*) AS n FROM jobs") == [{"n": 0}]
    assert sql("SELECT count(*) AS n FROM job_edges") == [{"n": 0}]


def test_a_callback_runs_exactly_once_when_its_parents_finish_in_drains_at_once(database_url,
                                                                                conn, sql):
    recorder = Recorder()
    parents = 300
    batch = [{"job_type": "step", "payload": {"value": i, "fail": i % 10 == 0},
              "max_attempts": 1} for i in range(parents)]
    batch.append({"job_type": "collect", "depends_on": [{"index": i} for i in range(parents)],
                  "after": "finished"})
    results = pgdrain.enqueue_many(conn, batch)
    callback = results[-1].id
    errors: list[BaseException] = []

    def drains() -> None:
        try:
            recorder.drain_all(database_url, batch_size=7)
        except BaseException as exc:  # re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=drains) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    recorder.drain_all(database_url)
    assert [v for kind, v in recorder.runs if kind == "collect"] == [callback]
    ends = recorder.seen[callback]["parents"]
    assert len(ends) == parents
    assert sorted(ends.values()).count("failed") == parents // 10
    row = sql("SELECT status, attempts, parents_left FROM jobs WHERE id = :id", id=callback)[0]
    assert row == {"status": "done", "attempts": 1, "parents_left": 0}


def test_the_readmes_fan_in_runs_as_written(database_url, conn, sql, monkeypatch):
    registry = Registry()

    def write_page(export_id: str, page: int) -> int:
        if page == 3:
            raise RuntimeError("the page's source is gone")
        return 100

    # As written, but registered in a registry of the test's own (the one change).
    monkeypatch.setattr(pgdrain, "job", lambda *a, **k: pgdrain.registry.job(
        *a, **k, registry=registry, max_attempts=1))
    names: dict = {"write_page": write_page}
    exec(FAN_IN_EXAMPLE, names)
    # Enqueueing reads the type's max_attempts from the registry it was declared in.
    monkeypatch.setattr(sys.modules["pgdrain.enqueue"], "REGISTRY", registry)
    report = names["start_export"](conn, "e-1", 8)
    for _ in range(10):
        if not run_drain(database_url, registry, concurrency=4).claimed:
            break
    row = sql("SELECT status, result FROM jobs WHERE id = :id", id=report)[0]
    assert row["status"] == "done"
    assert row["result"]["pages"] == 8 and row["result"]["rows"] == 700
    [failed] = row["result"]["failed_pages"]
    assert sql("SELECT payload FROM jobs WHERE id = :id", id=failed)[0]["payload"]["page"] == 3


def test_a_finishing_write_the_server_fails_on_a_deadlock_is_run_again(database_url, conn,
                                                                       sql, monkeypatch):
    """Two drains' batches of parents whose children interleave can lock those children in
    opposite orders; the server fails one statement (40P01), which changed nothing: the drain
    writes it again instead of leaving its jobs running until their leases expire."""
    from pgdrain import store
    from pgdrain.db import Connector
    from pgdrain.drain import PostgresStore
    from pgdrain.errors import QueryFailed
    from pgdrain.models import Finish

    parents = [pgdrain.enqueue(conn, "step").id for _ in range(2)]
    child = pgdrain.enqueue(conn, "collect", depends_on=parents).id
    drain_store = PostgresStore(Connector(lambda timeout=None: connect(database_url)), 0, ())
    real = store.finish_many
    calls: list[int] = []

    def deadlocked_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise QueryFailed("deadlock detected", "40P01")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "finish_many", deadlocked_once)
    try:
        claimed = drain_store.claim(batch_size=5, lease_seconds=60, queues=None)
        written = drain_store.finish_many([Finish.done(job) for job in claimed])
        assert sorted(written.ids) == sorted(parents) and len(calls) == 2
        assert _status(sql, child)["status"] == "pending"
        # Any other error is the caller's, as before.
        monkeypatch.setattr(store, "finish_many", lambda *a, **k: (_ for _ in ()).throw(
            QueryFailed("permission denied", "42501")))
        with pytest.raises(QueryFailed):
            drain_store.finish_many([Finish.done(claimed[0])])
    finally:
        drain_store.discard()
