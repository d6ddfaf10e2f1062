"""Expiry (expires_at, ttl_seconds) against PostgreSQL: a job not started by its expiry is
never claimed, and the janitor ends it failed with the error `expired`; bad values are
refused at enqueue and insert nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import pgdrain
from pgdrain import Settings


def test_an_expired_job_never_starts_and_the_janitor_fails_it(conn, sql):
    late = pgdrain.enqueue(conn, "send-code", {"to": "x"}, ttl_seconds=60).id
    fresh = pgdrain.enqueue(conn, "send-code", ttl_seconds=3600).id
    forever = pgdrain.enqueue(conn, "send-code").id
    sql("UPDATE jobs SET expires_at = now() - interval '1 second' WHERE id = :id", id=late)
    claimed = pgdrain.claim(conn, batch_size=10, lease_seconds=60)
    assert sorted(j.id for j in claimed) == [fresh, forever]  # never the expired one
    assert pgdrain.get_job(conn, late)["status"] == "pending"
    result = pgdrain.run_janitor(conn, Settings())
    assert result.expired == 1
    job = pgdrain.get_job(conn, late)
    assert (job["status"], job["last_error"], job["attempts"]) == ("failed", "expired", 0)
    assert job["errors"][0]["error"] == "expired" and job["finished_at"] is not None


def test_a_job_not_yet_due_expires_too(conn, sql):
    ident = pgdrain.enqueue(conn, "send-code", delay_seconds=30, ttl_seconds=60).id
    sql("UPDATE jobs SET expires_at = now() - interval '1 second' WHERE id = :id", id=ident)
    assert pgdrain.run_janitor(conn, Settings()).expired == 1
    assert pgdrain.get_job(conn, ident)["status"] == "failed"


def test_expires_at_and_ttl_are_stored_by_the_databases_clock(conn, sql):
    at = datetime.now(UTC) + timedelta(hours=1)
    by_time = pgdrain.enqueue(conn, "a", expires_at=at).id
    by_ttl = pgdrain.enqueue(conn, "a", ttl_seconds=90).id
    rows = {r["id"]: r for r in sql(
        "SELECT id, expires_at, EXTRACT(EPOCH FROM expires_at - created_at) AS ttl FROM jobs")}
    assert rows[by_time]["expires_at"] == at
    assert 89 < float(rows[by_ttl]["ttl"]) <= 90.5


def test_a_job_taken_before_its_expiry_runs_to_the_end(conn, sql):
    # Expiry is about starting late: a claimed job is not stopped when its time passes.
    ident = pgdrain.enqueue(conn, "send-code", ttl_seconds=60).id
    [job] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    sql("UPDATE jobs SET expires_at = now() - interval '1 second' WHERE id = :id", id=ident)
    assert pgdrain.run_janitor(conn, Settings()).expired == 0
    assert pgdrain.complete(conn, [job]).ids == (ident,)


@pytest.mark.parametrize(("options", "field", "words"), [
    ({"ttl_seconds": 0}, "ttl_seconds", "more than 0 and more than delay_seconds"),
    ({"ttl_seconds": 10, "delay_seconds": 20}, "ttl_seconds", "would expire before it is due"),
    ({"ttl_seconds": -1}, "ttl_seconds", "must be between 0"),
    ({"ttl_seconds": "soon"}, "ttl_seconds", "must be a number"),
    ({"expires_at": datetime(2030, 1, 1)}, "expires_at", "must carry a timezone"),
    ({"expires_at": datetime(2030, 1, 1, tzinfo=UTC), "ttl_seconds": 5}, "expires_at",
     "not both"),
    ({"expires_at": datetime(2030, 1, 1, tzinfo=UTC),
      "run_at": datetime(2031, 1, 1, tzinfo=UTC)}, "expires_at", "must be after run_at"),
])
def test_bad_expiry_is_refused_and_nothing_is_inserted(conn, sql, options, field, words):
    with pytest.raises(pgdrain.InvalidJobError, match=words) as caught:
        pgdrain.enqueue(conn, "send-code", **options)
    assert caught.value.field == field
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 0
