"""Enqueueing: fields, batches, dedupe, and joining the caller's transaction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pg8000.dbapi
import pytest

import pgdrain
from pgdrain.db import Session, parse_database_url


def test_enqueue_stores_every_field(conn):
    run_at = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    result = pgdrain.enqueue(conn, "generate-export", {"format": "csv", "rows": [1, 2]},
                             queue="exports", priority=-5, max_attempts=7, run_at=run_at,
                             dedupe_key="export-42")
    assert result.created
    job = pgdrain.get_job(conn, result.id)
    assert job["job_type"] == "generate-export"
    assert job["payload"] == {"format": "csv", "rows": [1, 2]}
    assert (job["status"], job["attempts"], job["max_attempts"]) == ("pending", 0, 7)
    assert (job["queue"], job["priority"], job["dedupe_key"]) == ("exports", -5, "export-42")
    assert job["run_at"] == run_at
    assert job["errors"] == [] and job["last_error"] is None


def test_delay_is_measured_on_the_database_clock(conn, sql):
    result = pgdrain.enqueue(conn, "x", delay_seconds=3600)
    [row] = sql("SELECT run_at - now() AS wait FROM jobs WHERE id = :id", id=result.id)
    assert timedelta(minutes=59) < row["wait"] <= timedelta(hours=1)
    assert pgdrain.claim(conn, batch_size=10, lease_seconds=60) == []


def test_batch_returns_ids_in_input_order(conn):
    results = pgdrain.enqueue_many(conn, [{"job_type": f"t{i}", "payload": {"i": i}}
                                          for i in range(50)])
    assert [r.created for r in results] == [True] * 50
    assert [pgdrain.get_job(conn, r.id)["payload"]["i"] for r in results] == list(range(50))


def test_one_invalid_job_inserts_nothing(conn, sql):
    jobs = [{"job_type": "ok"}, {"job_type": "ok", "priority": "urgent"}]
    with pytest.raises(pgdrain.InvalidJobError, match=r"jobs\[1\]\.priority"):
        pgdrain.enqueue_many(conn, jobs)
    with pytest.raises(pgdrain.InvalidJobError, match=r"jobs\[0\]: unknown field\(s\): kind"):
        pgdrain.enqueue_many(conn, [{"job_type": "x", "kind": "y"}])
    with pytest.raises(pgdrain.InvalidJobError, match=r"jobs\[0\]\.job_type: is required"):
        pgdrain.enqueue_many(conn, [{"payload": {}}])
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 0


def test_live_dedupe_key_returns_the_existing_job(conn):
    first = pgdrain.enqueue(conn, "send-email", {"to": "a"}, dedupe_key="welcome-1")
    again = pgdrain.enqueue(conn, "send-email", {"to": "a"}, dedupe_key="welcome-1")
    assert again == pgdrain.EnqueueResult(first.id, created=False)


def test_dedupe_within_one_batch_and_mixed_with_new_jobs(conn, sql):
    existing = pgdrain.enqueue(conn, "x", dedupe_key="old")
    results = pgdrain.enqueue_many(conn, [
        {"job_type": "a"},
        {"job_type": "b", "dedupe_key": "old"},
        {"job_type": "c", "dedupe_key": "new"},
        {"job_type": "d", "dedupe_key": "new"},
        {"job_type": "e"},
    ])
    assert [r.created for r in results] == [True, False, True, False, True]
    assert results[1].id == existing.id
    assert results[3].id == results[2].id
    types = {r["id"]: r["job_type"] for r in sql("SELECT id, job_type FROM jobs")}
    assert [types[r.id] for r in results] == ["a", "x", "c", "c", "e"]
    assert len(types) == 4


def test_dedupe_key_is_free_again_once_the_job_is_finished(conn):
    first = pgdrain.enqueue(conn, "x", dedupe_key="k")
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    again = pgdrain.enqueue(conn, "x", dedupe_key="k")
    assert again == pgdrain.EnqueueResult(first.id, created=False)  # running is still live
    pgdrain.complete(conn, [job])
    later = pgdrain.enqueue(conn, "x", dedupe_key="k")
    assert later.created and later.id != first.id


class _Interleaved(Session):
    """A session that runs ``hooks[query]()`` right after each run of that catalogue query:
    another client's work, landing in the instant between two of this enqueue's statements."""

    def __init__(self, conn, **hooks):
        super().__init__(conn)
        self.hooks = hooks

    def rows(self, query, /, **params):
        result = super().rows(query, **params)
        if query in self.hooks:
            self.hooks[query]()
        return result


def _finish_holder(other, key):
    def finish():
        [holder] = pgdrain.claim(other, batch_size=1, lease_seconds=60)
        assert holder.dedupe_key == key
        assert pgdrain.complete(other, [holder]).ids == (holder.id,)
    return finish


def _times(n, hook):
    calls = []

    def run():
        if len(calls) < n:
            calls.append(hook())
    return run


def test_a_key_whose_holder_finishes_before_the_lookup_is_inserted_anew(conn, connect_to, sql):
    holder = pgdrain.enqueue(conn, "x", dedupe_key="k").id
    session = _Interleaved(conn, job_enqueue_batch=_times(1, _finish_holder(connect_to(), "k")))
    results = pgdrain.enqueue_many(session, [{"job_type": "x", "dedupe_key": "k"},
                                             {"job_type": "x"}])
    assert [r.created for r in results] == [True, True]
    rows = sql("SELECT id, status FROM jobs WHERE dedupe_key = 'k' ORDER BY id")
    assert [(r["id"], r["status"]) for r in rows] == [(holder, "done"),
                                                      (results[0].id, "pending")]
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 3


def test_a_key_whose_holder_is_replaced_before_the_lookup_returns_the_new_holder(
        conn, connect_to):
    pgdrain.enqueue(conn, "x", dedupe_key="k")
    other = connect_to()
    finish = _finish_holder(other, "k")
    replacement = []

    def finish_and_replace():
        finish()
        replacement.append(pgdrain.enqueue(other, "x", dedupe_key="k").id)

    session = _Interleaved(conn, job_enqueue_batch=_times(1, finish_and_replace))
    [result] = pgdrain.enqueue_many(session, [{"job_type": "x", "dedupe_key": "k"}])
    assert result == pgdrain.EnqueueResult(replacement[0], created=False)


def test_endless_churn_on_a_key_gives_up_and_the_transaction_leaves_nothing(
        conn, connect_to, sql):
    # Every insert finds a holder; every lookup finds it gone; every re-insert a new one.
    other = connect_to()
    pgdrain.enqueue(other, "x", dedupe_key="k")
    session = _Interleaved(
        conn, job_enqueue_batch=_finish_holder(other, "k"),
        job_get_live_by_dedupe_keys=lambda: pgdrain.enqueue(other, "x", dedupe_key="k"))
    before = sql("SELECT count(*) AS n FROM jobs WHERE dedupe_key IS NULL")[0]["n"]
    with pytest.raises(pgdrain.DedupeContention, match="retry it"), session.transaction():
        pgdrain.enqueue_many(session, [{"job_type": "x"},
                                       {"job_type": "x", "dedupe_key": "k"}])
    assert sql("SELECT count(*) AS n FROM jobs WHERE dedupe_key IS NULL")[0]["n"] == before


def test_churn_that_ends_in_the_last_round_still_enqueues(conn, connect_to, sql):
    # Four rounds of a holder finishing and another taking the key, then the key stays free:
    # the fifth and last round's insert takes it.
    other = connect_to()
    pgdrain.enqueue(other, "x", dedupe_key="k")
    session = _Interleaved(
        conn, job_enqueue_batch=_times(5, _finish_holder(other, "k")),
        job_get_live_by_dedupe_keys=_times(
            4, lambda: pgdrain.enqueue(other, "x", dedupe_key="k")))
    [result] = pgdrain.enqueue_many(session, [{"job_type": "x", "dedupe_key": "k"}])
    assert result.created
    rows = sql("SELECT id FROM jobs WHERE dedupe_key = 'k' AND status = 'pending'")
    assert [r["id"] for r in rows] == [result.id]


def test_rolled_back_transaction_leaves_no_job(conn, connect_to, sql):
    sql("CREATE TABLE users (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text)")
    app = connect_to()
    app.run("BEGIN")
    app.run("INSERT INTO users (email) VALUES ('sarah@example.com')")
    pgdrain.enqueue(app, "send-email", {"to": "sarah@example.com"})
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 0  # not visible before commit
    app.run("ROLLBACK")
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 0
    assert sql("SELECT count(*) AS n FROM users")[0]["n"] == 0

    app.run("BEGIN")
    app.run("INSERT INTO users (email) VALUES ('sarah@example.com')")
    pgdrain.enqueue(app, "send-email", {"to": "sarah@example.com"})
    app.run("COMMIT")
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 1
    assert sql("SELECT count(*) AS n FROM users")[0]["n"] == 1


def test_dbapi_connection_joins_the_callers_transaction(database_url, conn, sql):
    params = parse_database_url(database_url)
    app = pg8000.dbapi.connect(user=params.user, password=params.password,
                               host=params.host or "localhost", port=params.port,
                               database=params.database, unix_sock=params.unix_sock,
                               ssl_context=False if params.unix_sock else None)
    batch = [{"job_type": "send-email", "payload": {"note": "100% :colons: ok"}},
             {"job_type": "sync-crm", "dedupe_key": "crm-42"}]
    try:
        pgdrain.enqueue_many(app, batch)
        app.rollback()
        assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 0

        results = pgdrain.enqueue_many(app, batch)
        again = pgdrain.enqueue(app, "sync-crm", dedupe_key="crm-42")
        app.commit()
    finally:
        app.close()
    assert again == pgdrain.EnqueueResult(results[1].id, created=False)
    assert pgdrain.get_job(conn, results[0].id)["payload"] == {"note": "100% :colons: ok"}


def test_int_subclasses_are_sent_as_their_numbers(conn, sql):
    import enum

    class Priority(enum.IntEnum):
        HIGH = -1

    job = pgdrain.enqueue(conn, "x", priority=Priority.HIGH, max_attempts=Priority.HIGH + 3)
    assert sql("SELECT priority, max_attempts FROM jobs")[0] == {"priority": -1,
                                                                 "max_attempts": 2}
    assert pgdrain.get_job(conn, type("Id", (int,), {})(job.id))["id"] == job.id
