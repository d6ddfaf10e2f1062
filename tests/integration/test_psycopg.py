"""The library's calls on a psycopg 3 connection, in the caller's transaction (the README says
enqueue works on one): enqueue, enqueue_many with dedupe keys, ordering keys, tenants and
delays, cancel, get_job, requeue_failed, and every text stored exactly as given. pgdrain runs
its statements on the caller's connection and leaves the commit to the caller."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pgdrain
from pgdrain import store
from pgdrain.db import parse_database_url, sqlstate
from pgdrain.hooks import HOOK_JOB_TYPE
from tests.reliability.test_text_roundtrip import FUZZ, TRICKY, _expected, _stored, _valid, jobs

psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def app(database_url: str) -> Iterator[object]:
    """The application's own psycopg 3 connection (not in autocommit: psycopg's default)."""
    params = parse_database_url(database_url)
    host = params.host or params.unix_sock.rsplit("/", 1)[0]  # libpq takes the socket's dir
    connection = psycopg.connect(user=params.user, password=params.password, host=host,
                                 port=params.port, dbname=params.database)
    try:
        yield connection
    finally:
        connection.close()


def test_enqueue_commits_with_the_callers_transaction_or_not_at_all(app, sql):
    kept = pgdrain.enqueue(app, "send-email", {"to": "sarah@example.com"},
                           dedupe_key="welcome-sarah", priority=-1, max_attempts=5)
    assert sql("SELECT count(*) AS n FROM jobs") == [{"n": 0}]  # not committed yet
    app.commit()
    dropped = pgdrain.enqueue(app, "send-email", {"to": "tom@example.com"})
    app.rollback()
    assert dropped.created
    [row] = sql("SELECT id, job_type, payload, dedupe_key, priority, max_attempts FROM jobs")
    assert row == {"id": kept.id, "job_type": "send-email", "payload": {"to": "sarah@example.com"},
                   "dedupe_key": "welcome-sarah", "priority": -1, "max_attempts": 5}
    # A live duplicate answers its id, on psycopg as on pg8000.
    assert pgdrain.enqueue(app, "send-email", {}, dedupe_key="welcome-sarah") == \
        pgdrain.EnqueueResult(kept.id, False)
    app.commit()


def test_enqueue_many_with_keys_orderings_tenants_and_delays(app, sql):
    at = datetime.now(UTC) + timedelta(hours=1)
    results = pgdrain.enqueue_many(app, [
        {"job_type": "sync-crm", "payload": {"n": 1}, "dedupe_key": "b", "ordering_key": "c-42",
         "tenant": "acme"},
        {"job_type": "sync-crm", "payload": {"n": 2}, "dedupe_key": "a", "delay_seconds": 60},
        {"job_type": "sync-crm", "payload": {"n": 3}, "dedupe_key": "b"},  # b's again
        {"job_type": "report", "run_at": at, "tenant": "globex", "ordering_key": "c-42"},
        {"job_type": "report", "ttl_seconds": 600, "queue": "slow"},
    ])
    app.commit()
    assert [r.created for r in results] == [True, True, False, True, True]
    assert results[2].id == results[0].id
    rows = {r["id"]: r for r in sql(
        "SELECT id, payload, dedupe_key, ordering_key, tenant, queue, "
        "run_at > now() + interval '50 seconds' AS later, run_at AS run_at, "
        "expires_at IS NOT NULL AS expires FROM jobs")}
    first, second, _, fourth, fifth = (rows[r.id] for r in results)
    assert (first["payload"], first["ordering_key"], first["tenant"], first["later"]) == (
        {"n": 1}, "c-42", "acme", False)
    assert (second["dedupe_key"], second["ordering_key"], second["tenant"],
            second["later"]) == ("a", None, None, True)
    assert (fourth["tenant"], fourth["ordering_key"]) == ("globex", "c-42")
    assert abs((fourth["run_at"] - at).total_seconds()) < 0.001
    assert (fifth["queue"], fifth["expires"]) == ("slow", True)
    assert len(rows) == 4


def test_unique_windows_and_debounce_hold_their_key_in_the_callers_transaction(app, sql):
    first = pgdrain.enqueue(app, "report", {"n": 1}, dedupe_key="daily", unique_for=3600)
    assert pgdrain.enqueue(app, "report", {"n": 2}, dedupe_key="daily", unique_for=3600) == \
        pgdrain.EnqueueResult(first.id, False)
    burst = [pgdrain.enqueue(app, "sync-crm", {"n": n}, dedupe_key="c-42", debounce=30)
             for n in range(3)]
    app.commit()
    assert {r.id for r in burst} == {burst[0].id}
    [row] = sql("SELECT payload, run_at > now() + interval '20 seconds' AS later FROM jobs "
                "WHERE id = :id", id=burst[0].id)
    assert row == {"payload": {"n": 2}, "later": True}


def test_an_invalid_batch_inserts_nothing(app, sql):
    with pytest.raises(pgdrain.InvalidJobError, match=r"jobs\[1\]"):
        pgdrain.enqueue_many(app, [{"job_type": "ok"}, {"job_type": "ok", "priority": "high"}])
    app.commit()
    assert sql("SELECT count(*) AS n FROM jobs") == [{"n": 0}]


def test_cancel_get_job_and_requeue_in_the_callers_transaction(app, conn, sql):
    pending = pgdrain.enqueue(conn, "send-email", {"to": "a@example.com"}).id
    running = pgdrain.enqueue(conn, "send-email", {"to": "b@example.com"}, priority=-1).id
    failed = pgdrain.enqueue(conn, "sync-crm", max_attempts=1).id
    [claimed] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    assert claimed.id == running
    sql("UPDATE jobs SET status = 'failed', last_error = 'boom', finished_at = now() "
        "WHERE id = :id", id=failed)

    assert pgdrain.cancel(app, [pending, running, failed, 10**9]) == {
        pending: "cancelled", running: "cancel_requested", failed: "already_failed",
        10**9: "not_found"}
    view = pgdrain.get_job(app, pending)
    assert view is not None and (view["status"], view["payload"]) == (
        "cancelled", {"to": "a@example.com"})
    assert pgdrain.requeue_failed(app, ids=[failed]) == [failed]
    app.rollback()  # all of it was the caller's: nothing changed
    assert sql("SELECT id, status FROM jobs ORDER BY id") == [
        {"id": pending, "status": "pending"}, {"id": running, "status": "running"},
        {"id": failed, "status": "failed"}]

    pgdrain.cancel(app, [pending])
    assert pgdrain.requeue_failed(app, job_type="sync-crm") == [failed]
    app.commit()
    after = pgdrain.get_job(app, failed)
    assert after is not None and (after["status"], after["attempts"]) == ("pending", 0)
    assert pgdrain.get_job(app, pending)["status"] == "cancelled"  # type: ignore[index]
    assert pgdrain.get_job(app, 10**9) is None
    app.commit()


def test_a_failure_written_on_psycopg_enqueues_its_hook_in_the_same_transaction(app, conn,
                                                                               sql):
    store.declare_hooked_types(conn, ["sync-crm"])  # as a drain with the hook does
    job_id = pgdrain.enqueue(conn, "sync-crm").id
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    assert pgdrain.fail(app, job, "gave up")
    app.rollback()
    assert sql("SELECT job_type, status FROM jobs ORDER BY id") == [
        {"job_type": "sync-crm", "status": "running"}]
    assert pgdrain.fail(app, job, "gave up")
    app.commit()
    assert sql("SELECT job_type, status, payload->>'job_id' AS of FROM jobs ORDER BY id") == [
        {"job_type": "sync-crm", "status": "failed", "of": None},
        {"job_type": HOOK_JOB_TYPE, "status": "pending", "of": str(job_id)}]


def test_a_server_error_on_psycopg_has_its_sqlstate(app):
    with pytest.raises(psycopg.Error) as caught:
        app.execute("SELECT 1/0")
    assert sqlstate(caught.value) == "22012"
    app.rollback()


@pytest.mark.parametrize("text", [t for t in TRICKY if _valid(t)])
def test_tricky_strings_round_trip_on_psycopg(app, sql, text):
    result = pgdrain.enqueue(app, text, {text: text}, queue=text, dedupe_key=text)
    app.commit()
    assert _stored(sql, result.id) == {"job_type": text, "queue": text, "dedupe_key": text,
                                       "payload": {text: text}}
    [batch] = pgdrain.enqueue_many(app, [{"job_type": text, "queue": text,
                                          "ordering_key": text, "tenant": text}])
    app.commit()
    [row] = sql("SELECT ordering_key, tenant FROM jobs WHERE id = :id", id=batch.id)
    assert row == {"ordering_key": text, "tenant": text}


def test_arbitrary_text_round_trips_on_psycopg_in_its_transaction(app, sql):
    @FUZZ
    @given(job=jobs, batch=st.lists(jobs, min_size=1, max_size=5))
    def check(job, batch):
        sql("DELETE FROM jobs")
        result = pgdrain.enqueue(app, job["job_type"], job["payload"], queue=job["queue"],
                                 dedupe_key=job.get("dedupe_key"))
        app.commit()
        assert _stored(sql, result.id) == _expected(job)
        sql("DELETE FROM jobs")
        results = pgdrain.enqueue_many(app, batch)
        app.commit()
        seen: dict[str, int] = {}
        for item, done in zip(batch, results, strict=True):
            key = item.get("dedupe_key")
            if key is not None and key in seen:  # an earlier item of the batch holds it
                assert (done.id, done.created) == (seen[key], False)
                continue
            assert done.created and _stored(sql, done.id) == _expected(item)
            if key is not None:
                seen[key] = done.id

    check()
