"""Tags and metadata (issue 28): enqueued with the library, stored exactly as given (NULL when
unused), shown by get_job and the list, handed to the handler as job.tags and job.meta, and
filtered on through their partial indexes."""

from __future__ import annotations

from typing import Any

import pytest

import pgdrain
from pgdrain import browse, store
from pgdrain.browse import JobFilter


def test_tags_and_meta_round_trip_exactly(conn):
    tags = ["Billing", "customer:42", "a/b@c+d=e.f_g-h", "Billing"]
    meta = {"source": "  Signup ", "n": 3, "nested": {"é": [1, None, True]}}
    result = pgdrain.enqueue(conn, "email", {"to": "x"}, tags=tags, meta=meta)
    job = pgdrain.get_job(conn, result.id)
    assert job["tags"] == ["Billing", "customer:42", "a/b@c+d=e.f_g-h"]  # once, in order
    assert job["meta"] == meta


def test_a_job_without_them_stores_null_and_shows_empty(conn, sql):
    plain = pgdrain.enqueue(conn, "email", {}).id
    empty = pgdrain.enqueue(conn, "email", {}, tags=[], meta={}).id
    rows = sql("SELECT tags, meta FROM jobs WHERE id = ANY(:ids) ORDER BY id",
               ids=[plain, empty])
    assert rows == [{"tags": None, "meta": None}] * 2
    job = pgdrain.get_job(conn, plain)
    assert (job["tags"], job["meta"]) == ([], {})


def test_plain_sql_inserts_still_work(conn, sql):
    [row] = sql("INSERT INTO jobs (job_type, payload) VALUES ('x', '{}') RETURNING id")
    assert pgdrain.get_job(conn, row["id"])["tags"] == []


@pytest.mark.parametrize(("options", "message"), [
    ({"tags": "billing"}, "tags: must be a list"),
    ({"tags": [""]}, "1 to 64 characters"),
    ({"tags": ["x" * 65]}, "1 to 64 characters"),
    ({"tags": ["has space"]}, "is not a tag"),
    ({"tags": ["-flag"]}, "is not a tag"),
    ({"tags": ["a,b"]}, "is not a tag"),
    ({"tags": ["café"]}, "is not a tag"),
    ({"tags": [3]}, "must be a string"),
    ({"tags": [f"t{i}" for i in range(17)]}, "at most 16 tags"),
    ({"meta": ["a"]}, "meta: must be a JSON object"),
    ({"meta": {"k": "x" * 5000}}, "the limit is 4,096"),
    ({"meta": {"k": float("nan")}}, "JSON-serialisable"),
    ({"meta": {"k": "a\x00b"}}, "NUL"),
])
def test_bad_tags_or_meta_are_refused_and_nothing_is_inserted(conn, sql, options, message):
    with pytest.raises(pgdrain.InvalidJobError, match=message):
        pgdrain.enqueue_many(conn, [{"job_type": "ok"}, {"job_type": "x", **options}])
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == 0


def test_a_batch_mixes_jobs_with_and_without_them(conn, sql):
    results = pgdrain.enqueue_many(conn, [
        {"job_type": "a", "tags": ["one", "two"]},
        {"job_type": "b"},
        {"job_type": "c", "meta": {"k": 1}, "dedupe_key": "c-1"},
    ])
    rows = sql("SELECT tags, meta FROM jobs ORDER BY id")
    assert [r["tags"] for r in rows] == [["one", "two"], None, None]
    assert [r["meta"] for r in rows] == [None, None, {"k": 1}]
    assert [r.created for r in results] == [True] * 3


def test_the_handler_gets_job_tags_and_meta(conn):
    pgdrain.enqueue(conn, "a", tags=["x", "y"], meta={"who": "me"})
    pgdrain.enqueue(conn, "b")
    jobs = {j.job_type: j for j in pgdrain.claim(conn, batch_size=10, lease_seconds=60)}
    assert (jobs["a"].tags, jobs["a"].meta) == (["x", "y"], {"who": "me"})
    assert (jobs["b"].tags, jobs["b"].meta) == ([], {})


def test_the_list_shows_and_filters_by_them(conn):
    first = pgdrain.enqueue(conn, "a", tags=["red", "big"], meta={"team": "ops", "n": 1}).id
    pgdrain.enqueue(conn, "a", tags=["red"], meta={"team": "dev"})
    pgdrain.enqueue(conn, "a")
    rows = store.list_jobs(conn, tags=["red", "big"])
    assert [(r["id"], r["tags"], r["meta"]) for r in rows] == [
        (first, ["red", "big"], {"team": "ops", "n": 1})]
    assert [r["id"] for r in store.list_jobs(conn, meta={"team": "ops"})] == [first]
    assert len(store.list_jobs(conn, tags=["red"])) == 2


def test_the_console_filter_matches_all_tags_and_meta_containment(conn):
    ids = [pgdrain.enqueue(conn, "a", tags=tags, meta=meta).id for tags, meta in (
        (["red", "big"], {"team": "ops", "region": "eu"}),
        (["red"], {"team": "ops"}),
        (None, {"team": "ops"}),
        (["big"], None),
    )]
    def found(match: JobFilter) -> list[int]:
        return sorted(j["id"] for j in browse.job_page(conn, match).jobs)

    assert found(JobFilter(tags=("red",))) == ids[:2]
    assert found(JobFilter(tags=("red", "big"))) == ids[:1]
    assert found(JobFilter(meta={"team": "ops"})) == ids[:3]
    assert found(JobFilter(meta={"team": "ops", "region": "eu"})) == ids[:1]
    assert found(JobFilter(tags=("big",), meta={"team": "ops"})) == ids[:1]
    assert found(JobFilter(tags=("Red",))) == []  # exact, case too
    page = browse.job_page(conn, JobFilter(tags=("big",)))
    assert {tuple(j["tags"]) for j in page.jobs} == {("red", "big"), ("big",)}


def hot_updates(conn: Any, sql: Any, **options: Any) -> tuple[int, int]:
    """The updates of one job's claim and finish, and how many of them were HOT."""
    sql("DELETE FROM jobs")
    pgdrain.enqueue(conn, "a", **options)
    sql("SELECT pg_stat_reset()")
    pgdrain.complete(conn, pgdrain.claim(conn, batch_size=1, lease_seconds=60))
    sql("SELECT pg_stat_force_next_flush()")
    [row] = sql("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                "WHERE relname = 'jobs'")
    return row["n_tup_upd"], row["n_tup_hot_upd"]


def test_the_drain_s_writes_on_a_tagged_job_are_as_hot_as_on_any(conn, sql):
    # The claim and the finish change neither tags nor meta, so their new indexes do not
    # make these updates any less HOT than a plain job's.
    plain = hot_updates(conn, sql)
    assert plain[0] >= 2
    assert hot_updates(conn, sql, tags=["x"], meta={"k": "v"}) == plain


def test_a_drained_handler_and_a_dead_letter_hook_see_them(database_url, conn):
    from pgdrain.registry import Registry
    from tests.support.drains import run_drain

    seen: list = []
    registry = Registry()

    def on_failed(job, error):
        seen.append(("hook", job["tags"], job["meta"]))

    def handler(job):
        seen.append(("run", job.tags, job.meta))
        raise pgdrain.Discard("no")

    pgdrain.job("tagged", on_failed=on_failed, registry=registry)(handler)
    pgdrain.enqueue(conn, "tagged", tags=["a", "b"], meta={"m": [1]})
    for _ in range(2):  # the job, then its hook's job
        run_drain(database_url, registry, backoff=pgdrain.Backoff(0, 0, jitter=0))
    assert seen == [("run", ["a", "b"], {"m": [1]}), ("hook", ["a", "b"], {"m": [1]})]
