"""What the console reads (pgdrain.browse) on a real table: the queues at a glance (every count
capped), pages of jobs matching filters (keyset-paged, a window of ids at a time, within a time
budget), the ids and counts a bulk action takes, the last hour by minute and the last failures;
and the plans of the statements behind them on a table of 120,000 jobs: no sequential scan of
jobs, and no count reading past its cap. What is still open is marked so (xfail, "open: ...")."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from pgdrain import browse
from pgdrain.browse import JobFilter, JobPage
from pgdrain.db import connect, with_database
from pgdrain.sql import QUERIES

OFFSETS = ("run_at", "created_at", "finished_at", "expires_at", "cancel_requested_at")
"""Columns given to ``add`` as seconds from now (negative: in the past)."""


def add(sql: Any, job_type: str = "export", **values: Any) -> int:
    """Insert one job and return its id: ``values`` by column (``id`` chosen, JSON columns as
    Python values, the OFFSETS columns as seconds from now)."""
    columns, expressions, params = ["job_type"], [":job_type"], {"job_type": job_type}
    for name, value in values.items():
        columns.append(name)
        if name in OFFSETS:
            expressions.append(f"now() + make_interval(secs => :{name}::float8)")
        elif name in ("payload", "errors"):
            expressions.append(f":{name}::jsonb")
            value = json.dumps(value)
        else:
            expressions.append(f":{name}")
        params[name] = value
    overriding = " OVERRIDING SYSTEM VALUE" if "id" in values else ""
    return sql(f"INSERT INTO jobs ({', '.join(columns)}){overriding} "
               f"VALUES ({', '.join(expressions)}) RETURNING id", **params)[0]["id"]


def add_many(sql: Any, ids: range | list[int], **columns: str) -> list[int]:
    """Insert a job at each id given; ``columns`` are SQL expressions of ``i`` (the id)."""
    names = ", ".join(["id", "job_type", *columns])
    exprs = ", ".join(["i", "'export'", *columns.values()])
    sql(f"INSERT INTO jobs ({names}) OVERRIDING SYSTEM VALUE "
        f"SELECT {exprs} FROM unnest(:ids::bigint[]) AS i", ids=list(ids))
    return sorted(ids, reverse=True)


class Ticking:
    """A fake clock: each reading is ``step`` seconds after the one before."""

    def __init__(self, step: float):
        self.step, self.now = step, 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def every_page(conn: Any, match: JobFilter, **options: Any) -> list[JobPage]:
    """job_page from the newest id on, each page from where the one before stopped."""
    pages = [browse.job_page(conn, match, **options)]
    while pages[-1].next_before is not None:
        assert len(pages) < 1000, "the pages never end"
        pages.append(browse.job_page(conn, match, before=pages[-1].next_before, **options))
    return pages


def page_ids(pages: list[JobPage]) -> list[int]:
    return [job["id"] for page in pages for job in page.jobs]


# --- the overview: queue_board ---------------------------------------------------------------

def by_queue(conn: Any, **options: Any) -> dict[str, dict[str, Any]]:
    return {row["queue"]: row for row in browse.board(conn, **options)}


def test_the_board_counts_each_queue_by_status(conn, sql):
    for _ in range(3):
        add(sql, queue="a", run_at=-60)                       # due
    add(sql, queue="a", priority=5, run_at=-600)              # due, the oldest, another priority
    # Past its expiry, or asked to stop: due as the index has it, until the janitor ends it.
    add(sql, queue="a", run_at=-60, expires_at=-10)
    add(sql, queue="a", run_at=-60, cancel_requested_at=-5)
    for _ in range(2):
        add(sql, queue="a", run_at=3600)                      # scheduled
    add(sql, queue="a", status="running")
    for _ in range(2):
        add(sql, queue="a", status="waiting", wait_signal="s")
    add(sql, queue="a", status="failed", finished_at=-1)
    add(sql, queue="a", status="done", finished_at=-1)
    add(sql, queue="a", status="cancelled", finished_at=-1)
    add(sql, queue="b", run_at=3600)                          # scheduled only: nothing due
    add(sql, queue="c", status="done", finished_at=-1)        # history only: not a row

    rows = browse.board(conn)
    assert [r["queue"] for r in rows] == ["a", "b"]
    a, b = rows
    assert {k: a[k] for k in ("due", "scheduled", "running", "waiting", "failed")} == {
        "due": 6, "scheduled": 2, "running": 1, "waiting": 2, "failed": 1}
    assert 600 <= a["oldest_due_seconds"] < 660
    assert {k: b[k] for k in ("due", "scheduled", "running", "waiting", "failed")} == {
        "due": 0, "scheduled": 1, "running": 0, "waiting": 0, "failed": 0}
    assert b["oldest_due_seconds"] == 0
    for row in rows:
        assert (row["paused_seconds"], row["max_running"], row["rate"]) == (None, None, None)
        assert set(row) == {"queue", "due", "scheduled", "running", "waiting", "failed",
                            "oldest_due_seconds", "paused_seconds", "max_running", "rate"}


@pytest.mark.parametrize(("values", "counted"), [
    ({"run_at": -1}, "due"),
    ({"run_at": 60}, "scheduled"),
    ({"status": "running"}, "running"),
    ({"status": "waiting", "parents_left": 1, "after_parents": "done"}, "waiting"),
    ({"status": "failed", "finished_at": -1}, "failed"),
], ids=["due", "scheduled", "running", "waiting", "failed"])
def test_the_board_finds_a_queue_from_any_live_status_alone(conn, sql, values, counted):
    add(sql, queue="other", status="done", finished_at=-1)
    add(sql, queue="only", **values)
    [row] = browse.board(conn)
    assert row["queue"] == "only"
    assert {k for k in ("due", "scheduled", "running", "waiting", "failed") if row[k]} == \
        {counted}


def test_the_board_lists_the_queues_that_have_settings_and_no_jobs(conn, sql):
    sql("INSERT INTO pgdrain_queues (queue, paused_at) VALUES ('paused', now() - "
        "interval '90 seconds')")
    sql("INSERT INTO pgdrain_queues (queue, max_running) VALUES ('capped', 5)")
    sql("INSERT INTO pgdrain_queues (queue, rate_limit, rate_period) VALUES ('rated', 10, 1), "
        "('slow', 3, 60)")
    sql("INSERT INTO pgdrain_queues (queue, paused_at) VALUES ('resumed', NULL)")
    add(sql, queue="capped", run_at=-1)  # a queue with settings and jobs is one row

    rows = by_queue(conn)
    assert sorted(rows) == ["capped", "paused", "rated", "resumed", "slow"]
    assert 90 <= rows["paused"]["paused_seconds"] < 150
    assert (rows["capped"]["max_running"], rows["capped"]["due"]) == (5, 1)
    assert rows["rated"]["rate"] == "10/s"
    assert rows["slow"]["rate"] == "3/min"
    assert rows["resumed"]["paused_seconds"] is None
    for name in ("paused", "rated", "slow", "resumed"):
        assert [rows[name][k] for k in ("due", "scheduled", "running", "waiting", "failed",
                                        "oldest_due_seconds")] == [0, 0, 0, 0, 0, 0]


def test_each_count_of_the_board_stops_at_the_cap(conn, sql):
    add_many(sql, range(1, 5), queue="'a'", run_at="now() - interval '1 minute'")
    add_many(sql, range(5, 9), queue="'a'", priority="1", run_at="now() - interval '1 minute'")
    add_many(sql, range(9, 15), queue="'a'", run_at="now() + interval '1 hour'")
    add_many(sql, range(15, 20), queue="'a'", status="'running'")
    add_many(sql, range(20, 25), queue="'a'", status="'waiting'", wait_signal="'s'")
    add_many(sql, range(25, 30), queue="'a'", status="'failed'", finished_at="now()")

    [row] = browse.board(conn, cap=3)
    assert [row[k] for k in ("due", "scheduled", "running", "waiting", "failed")] == [3] * 5
    [row] = browse.board(conn)
    assert [row[k] for k in ("due", "scheduled", "running", "waiting", "failed")] == \
        [8, 6, 5, 5, 5]


def test_the_board_lists_at_most_most_queues_in_name_order(conn, sql):
    add(sql, queue="e", run_at=-1)
    add(sql, queue="d", status="failed", finished_at=-1)
    add(sql, queue="c", status="running")
    add(sql, queue="b", status="waiting", wait_signal="s")
    sql("INSERT INTO pgdrain_queues (queue, max_running) VALUES ('a', 1)")
    assert [r["queue"] for r in browse.board(conn)] == ["a", "b", "c", "d", "e"]
    assert [r["queue"] for r in browse.board(conn, most_queues=3)] == ["a", "b", "c"]
    assert [r["queue"] for r in browse.board(conn, most_queues=1)] == ["a"]


def test_a_queue_with_many_priorities_hides_no_other_queue(conn, sql):
    for priority in range(3):
        add(sql, queue="a", priority=priority, run_at=-1)
    add(sql, queue="b", run_at=-1)
    rows = browse.board(conn, most_queues=2)
    assert [(r["queue"], r["due"]) for r in rows] == [("a", 3), ("b", 1)]


def test_the_board_of_an_empty_table_is_empty(conn):
    assert browse.board(conn) == []


# --- pages of jobs: job_page ------------------------------------------------------------------

def test_a_page_of_an_empty_table(conn):
    assert browse.id_range(conn) == (None, None)
    assert browse.job_page(conn, JobFilter()) == JobPage([], None, None)
    assert browse.job_page(conn, JobFilter(status="failed"), before=10) == \
        JobPage([], None, None)


def test_id_range_is_the_lowest_and_highest_id(conn, sql):
    add_many(sql, [7, 40, 12])
    assert browse.id_range(conn) == (7, 40)


def test_a_page_is_newest_first_and_says_where_the_next_starts(conn, sql):
    ids = [add(sql) for _ in range(7)]
    first = browse.job_page(conn, JobFilter(), limit=5)
    assert [j["id"] for j in first.jobs] == ids[::-1][:5]
    assert (first.next_before, first.searched_down_to) == (ids[2], None)
    second = browse.job_page(conn, JobFilter(), before=first.next_before, limit=5)
    assert [j["id"] for j in second.jobs] == ids[1::-1]
    assert (second.next_before, second.searched_down_to) == (None, None)
    # A page that ends exactly at the lowest id has no next one either.
    assert browse.job_page(conn, JobFilter(), before=ids[2], limit=2).next_before is None
    # Nothing below the lowest id; a start above the highest is the newest page.
    assert browse.job_page(conn, JobFilter(), before=ids[0]) == JobPage([], None, None)
    assert browse.job_page(conn, JobFilter(), before=ids[-1] + 1000, limit=5) == first


def test_a_page_row_holds_what_the_jobs_page_shows(conn, sql):
    error = "Traceback (most recent call last):\n" + "x" * 400
    failed = add(sql, status="failed", attempts=3, finished_at=-1, last_error=error,
                 tenant="t", ordering_key="k", dedupe_key="d", queue="q", priority=2)
    signal = add(sql, status="waiting", wait_signal="order:1")
    parents = add(sql, status="waiting", parents_left=2, after_parents="done")
    rows = {j["id"]: j for j in browse.job_page(conn, JobFilter()).jobs}
    assert set(rows[failed]) == {
        "id", "job_type", "queue", "status", "priority", "attempts", "max_attempts", "run_at",
        "created_at", "updated_at", "finished_at", "tenant", "ordering_key", "dedupe_key",
        "last_error", "waits_for", "tags"}
    assert rows[failed]["tags"] == []
    assert rows[failed]["last_error"] == error[:300]
    assert (rows[failed]["tenant"], rows[failed]["ordering_key"], rows[failed]["dedupe_key"],
            rows[failed]["queue"], rows[failed]["priority"], rows[failed]["attempts"]) == \
        ("t", "k", "d", "q", 2, 3)
    assert rows[failed]["waits_for"] is None
    assert rows[signal]["waits_for"] == "signal order:1"
    assert rows[parents]["waits_for"] == "2 parent(s)"


@pytest.fixture
def assorted(sql) -> dict[str, int]:
    """One job per filter, each matching it alone (``plain`` matches none of them)."""
    return {
        "plain": add(sql),
        "failed": add(sql, status="failed", finished_at=-1),
        "signal": add(sql, status="waiting", wait_signal="order:1"),
        "parents": add(sql, status="waiting", parents_left=1, after_parents="done"),
        "typed": add(sql, job_type="report"),
        "queued": add(sql, queue="emails"),
        "tenant": add(sql, tenant="acme"),
        "ordered": add(sql, ordering_key="customer-1"),
        "deduped": add(sql, dedupe_key="invoice-1"),
        "old": add(sql, created_at=-7200, run_at=-7200),
        "percent": add(sql, payload={"to": "Ann%Lee_x@Example.com"}),
        "lookalike": add(sql, payload={"to": "annXleeYx@example.com"}),
    }


FILTERS = {
    "status": (JobFilter(status="failed"), {"failed"}),
    "status waiting": (JobFilter(status="waiting"), {"signal", "parents"}),
    "waiting for a signal": (JobFilter(waiting_for="signal"), {"signal"}),
    "waiting for parents": (JobFilter(waiting_for="parents"), {"parents"}),
    "job type": (JobFilter(job_type="report"), {"typed"}),
    "queue": (JobFilter(queue="emails"), {"queued"}),
    "tenant": (JobFilter(tenant="acme"), {"tenant"}),
    "ordering key": (JobFilter(ordering_key="customer-1"), {"ordered"}),
    "dedupe key": (JobFilter(dedupe_key="invoice-1"), {"deduped"}),
    "older than": (JobFilter(older_than_seconds=3600), {"old"}),
    "search, any case": (JobFilter(search="EXAMPLE.COM"), {"percent", "lookalike"}),
    "search, % and _ are plain": (JobFilter(search="ann%lee_x"), {"percent"}),
    "search, a lone %": (JobFilter(search="%"), {"percent"}),
    "search, a lone _": (JobFilter(search="_"), {"percent"}),
    "search, no match": (JobFilter(search="nobody"), set()),
}


@pytest.mark.parametrize("name", FILTERS)
def test_each_filter_alone_selects_its_jobs(conn, assorted, name):
    match, expected = FILTERS[name]
    found = browse.job_page(conn, match).jobs
    assert {j["id"] for j in found} == {assorted[k] for k in expected}
    assert [j["id"] for j in found] == sorted((j["id"] for j in found), reverse=True)


def test_newer_than_selects_all_but_the_old(conn, assorted):
    found = browse.job_page(conn, JobFilter(newer_than_seconds=3600)).jobs
    assert {j["id"] for j in found} == set(assorted.values()) - {assorted["old"]}


def test_filters_together_select_what_all_of_them_select(conn, sql):
    both = add(sql, queue="emails", tenant="acme", status="failed", finished_at=-1)
    add(sql, queue="emails", tenant="acme")
    add(sql, queue="emails", status="failed", finished_at=-1)
    add(sql, tenant="acme", status="failed", finished_at=-1)
    found = browse.job_page(conn, JobFilter(queue="emails", tenant="acme", status="failed"))
    assert [j["id"] for j in found.jobs] == [both]


def test_the_statuses_narrow_within_the_status(conn, sql):
    pending, failed = add(sql), add(sql, status="failed", finished_at=-1)
    add(sql, status="running")
    add(sql, status="done", finished_at=-1)
    add(sql, status="waiting", wait_signal="s")

    def ids(match: JobFilter) -> set[int]:
        return {j["id"] for j in browse.job_page(conn, match).jobs}

    assert ids(JobFilter(statuses=("pending", "failed"))) == {pending, failed}
    assert ids(JobFilter(status="failed", statuses=("pending", "failed"))) == {failed}
    assert ids(JobFilter(status="done", statuses=("pending", "failed"))) == set()
    assert ids(JobFilter(statuses=())) == set()
    assert JobFilter(statuses=("failed",)).given() == {}


def test_pages_cover_every_match_once_through_many_windows(conn, sql):
    # 60 jobs at every fifth id from 1,000; a window of 23 ids holds 4 or 5 of them.
    ids = add_many(sql, range(1000, 1300, 5), status="CASE WHEN i % 3 = 0 THEN 'failed' "
                   "ELSE 'pending' END")
    for match, expected in ((JobFilter(), ids),
                            (JobFilter(status="failed"), [i for i in ids if i % 3 == 0])):
        for limit in (1, 7, 50, 100):
            pages = every_page(conn, match, limit=limit, window=23, seconds=60)
            assert page_ids(pages) == expected, (match, limit)
            assert all(len(p.jobs) == limit for p in pages[:-1])
            assert all(p.searched_down_to is None for p in pages)
            assert all(p.next_before is not None for p in pages[:-1])


def test_a_page_moves_its_window_down_until_it_is_full(conn, sql):
    # Matches far apart: the first page's windows find nothing until id 100.
    add_many(sql, range(1, 501), tenant="CASE WHEN i IN (100, 50, 3) THEN 'rare' END")
    page = browse.job_page(conn, JobFilter(tenant="rare"), limit=2, window=10, seconds=60)
    assert ([j["id"] for j in page.jobs], page.next_before) == ([100, 50], 50)
    page = browse.job_page(conn, JobFilter(tenant="rare"), before=50, limit=2, window=10,
                           seconds=60)
    assert ([j["id"] for j in page.jobs], page.next_before) == ([3], None)


def test_a_page_out_of_time_says_how_far_down_it_looked_and_the_next_goes_on(conn, sql):
    # 300 ids, windows of 20: a page has time for three windows (a reading a second, 2.5 s).
    add_many(sql, range(1, 301), payload="CASE WHEN i IN (230, 7) THEN '{\"n\": \"needle\"}' "
             "ELSE '{}' END::jsonb")
    match = JobFilter(search="needle")
    first = browse.job_page(conn, match, window=20, seconds=2.5, clock=Ticking(1.0))
    assert first.jobs == [] and first.searched_down_to == first.next_before == 241
    second = browse.job_page(conn, match, before=first.next_before, window=20, seconds=2.5,
                             clock=Ticking(1.0))
    assert [j["id"] for j in second.jobs] == [230]
    assert second.searched_down_to == second.next_before == 181
    pages = every_page(conn, match, window=20, seconds=2.5, clock=Ticking(1.0))
    assert page_ids(pages) == [230, 7]
    assert pages[-1].searched_down_to is None and pages[-1].next_before is None
    assert all(p.searched_down_to == p.next_before for p in pages[:-1])
    # With no time limit, one page finds both.
    assert [j["id"] for j in browse.job_page(conn, match, window=20, seconds=60).jobs] == \
        [230, 7]


def test_a_full_page_or_the_table_s_end_is_never_cut_short_for_time(conn, sql):
    add_many(sql, range(1, 41))
    cut = browse.job_page(conn, JobFilter(), limit=5, window=3, seconds=0.0,
                          clock=Ticking(10.0))
    assert [j["id"] for j in cut.jobs] == [40, 39, 38]  # the first window, then out of time
    assert cut.searched_down_to == cut.next_before == 38
    full = browse.job_page(conn, JobFilter(), limit=3, window=3, seconds=0.0,
                           clock=Ticking(10.0))
    assert ([j["id"] for j in full.jobs], full.next_before, full.searched_down_to) == \
        ([40, 39, 38], 38, None)
    last = browse.job_page(conn, JobFilter(), before=3, window=3, seconds=0.0,
                           clock=Ticking(10.0))
    assert ([j["id"] for j in last.jobs], last.next_before, last.searched_down_to) == \
        ([2, 1], None, None)


# --- a bulk action's jobs: matching_ids, count_matching ------------------------------------------

def test_matching_ids_are_those_up_to_upto_newest_first_in_batches(conn, sql):
    ids = add_many(sql, range(10, 400, 3), status="CASE WHEN i % 2 = 0 THEN 'failed' "
                   "ELSE 'pending' END")
    upto = 301
    retry = replace(JobFilter(), statuses=("failed",))
    batches = list(browse.matching_ids(conn, retry, upto=upto, batch=4, window=25))
    assert [i for b in batches for i in b] == [i for i in ids if i <= upto and i % 2 == 0]
    assert all(1 <= len(b) <= 4 for b in batches)
    everything = list(browse.matching_ids(conn, JobFilter(), upto=upto, batch=1000))
    assert everything == [[i for i in ids if i <= upto]]
    assert list(browse.matching_ids(conn, JobFilter(), upto=5)) == []
    assert list(browse.matching_ids(conn, JobFilter(queue="nowhere"), upto=upto)) == []


def test_matching_ids_of_an_empty_table(conn):
    assert list(browse.matching_ids(conn, JobFilter(), upto=100)) == []
    assert browse.count_matching(conn, JobFilter(), upto=100) == (0, True)


FAR_APART = [1, 2, browse.WINDOW_IDS + 10, 2 * browse.WINDOW_IDS + 20, 3 * browse.WINDOW_IDS]
"""Three windows of WINDOW_IDS, one batch each: (3W, 2W + 20), (W + 10), (2, 1)."""


def test_count_matching_counts_everything_up_to_upto_in_time(conn, sql):
    add_many(sql, FAR_APART, status="'failed'")
    upto = FAR_APART[-1]
    add(sql, id=upto + 1, status="failed", finished_at=-1)  # after upto
    assert browse.count_matching(conn, JobFilter(status="failed"), upto=upto) == (5, True)
    assert browse.count_matching(conn, JobFilter(status="failed"), upto=upto,
                                 clock=Ticking(0.0)) == (5, True)
    assert browse.count_matching(conn, JobFilter(status="pending"), upto=upto) == (0, True)


def test_count_matching_out_of_time_is_an_at_least(conn, sql):
    add_many(sql, FAR_APART)
    upto = FAR_APART[-1]
    # A reading a second: the first batch spends the time, or the second does.
    for seconds in (1.0, 1.5):
        counted, complete = browse.count_matching(conn, JobFilter(), upto=upto,
                                                  seconds=seconds, clock=Ticking(1.0))
        assert not complete and 1 <= counted < 5


def test_a_count_whose_last_batch_spends_the_time_is_complete(conn, sql):
    add_many(sql, FAR_APART)
    assert browse.count_matching(conn, JobFilter(), upto=FAR_APART[-1], seconds=2.5,
                                 clock=Ticking(1.0)) == (5, True)


# --- the last hour: job_minutes, job_failures_recent ---------------------------------------------

def test_minutes_count_done_and_failed_per_minute_of_the_last_hour(conn, sql):
    [[at]] = conn.run("SELECT date_trunc('minute', now()) - interval '10 minutes' "
                      "+ interval '20 seconds'")
    earlier = at - timedelta(minutes=5)
    minute, minute_before = at.replace(second=0), earlier.replace(second=0)

    def finished(status: str, when: datetime, queue: str = "a", n: int = 1) -> None:
        for _ in range(n):
            sql("INSERT INTO jobs (job_type, queue, status, finished_at) "
                "VALUES ('export', :q, :s, :t)", q=queue, s=status, t=when)

    finished("done", at, n=2)
    finished("failed", at)
    finished("done", earlier, queue="b")
    finished("cancelled", at)                                    # neither done nor failed
    finished("done", at - timedelta(hours=2), n=3)               # over an hour ago
    finished("failed", at - timedelta(hours=2))
    add(sql, queue="a", status="running")
    sql("INSERT INTO pgdrain_done_counts (queue, job_type, minute, done) VALUES "
        "('a', 'export', :m, 5), ('a', 'report', :m, 1), ('c', 'export', :m, 4), "
        "('a', 'export', :m - interval '2 hours', 7)", m=minute)

    rows = [(r["minute"], r["done"], r["failed"]) for r in browse.minutes(conn)]
    assert rows == [(minute_before, 1, 0), (minute, 2 + 5 + 1 + 4, 1)]


def test_minutes_of_an_empty_hour(conn, sql):
    add(sql, status="done", finished_at=-7200)
    add(sql)
    assert browse.minutes(conn) == []


def test_recent_failures_are_the_last_to_fail_newest_first(conn, sql):
    # Failed in an order unlike their ids'.
    ago = [30, 5, 50, 1, 40, 20, 60, 10, 15, 25, 35, 45]
    ids = {seconds: add(sql, status="failed", finished_at=-seconds, attempts=3,
                        last_error=f"error {seconds}\n" + "y" * 500, queue=f"q{seconds}")
           for seconds in ago}
    add(sql, status="done", finished_at=0)
    add(sql, status="cancelled", finished_at=0)
    found = browse.recent_failures(conn, limit=10)
    assert [f["id"] for f in found] == [ids[s] for s in sorted(ago)[:10]]
    first = found[0]
    assert set(first) == {"id", "job_type", "queue", "attempts", "finished_at", "last_error"}
    assert (first["queue"], first["attempts"], first["job_type"]) == ("q1", 3, "export")
    assert first["last_error"] == ("error 1\n" + "y" * 500)[:300]
    assert [f["id"] for f in browse.recent_failures(conn, limit=3)] == \
        [ids[s] for s in (1, 5, 10)]
    assert len(browse.recent_failures(conn)) == 10


# --- plans on a large table -------------------------------------------------------------------

ROWS = 120_000
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")

# A console's table: history (done in the last hour, failed with tracebacks, cancelled),
# running and waiting jobs, pending ones due and scheduled; 8 big queues and a small one, a
# third naming one of 50 tenants, a rare tenant, ordering and dedupe keys on some.
FILL = f"""
INSERT INTO jobs (job_type, queue, status, run_at, created_at, finished_at, attempts,
                  lease_expires_at, last_error, tenant, ordering_key, dedupe_key, wait_signal,
                  payload, tags, meta)
SELECT 'type-' || (i % 6), CASE WHEN i % 5000 = 11 THEN 'queue-small' ELSE 'queue-' || (i % 8) END,
       s.status,
       CASE WHEN s.status = 'pending' AND s.r >= 700 THEN now() + (i % 86400) * interval '1 s'
            ELSE t.at END,
       t.at,
       CASE WHEN s.status IN ('done', 'failed', 'cancelled') THEN t.at END,
       CASE WHEN s.status IN ('done', 'failed', 'running') THEN 1 ELSE 0 END,
       CASE WHEN s.status = 'running' THEN now() + interval '16 minutes' END,
       CASE WHEN s.status = 'failed' THEN 'Traceback (most recent call last):' || chr(10)
                                          || '  boom ' || i END,
       CASE WHEN i % 20000 = 7 THEN 'tenant-rare' WHEN i % 3 = 0 THEN 'tenant-' || (i % 50)
            END,
       CASE WHEN i % 20 = 1 THEN 'customer-' || (i % 500) END,
       CASE WHEN i % 50 = 3 THEN 'dedupe-' || i END,
       CASE WHEN s.status = 'waiting' THEN 'order:' || i END,
       jsonb_build_object('to', 'user-' || i || '@example.com'),
       CASE WHEN i % 10000 = 9 THEN ARRAY['rare', 'batch-' || (i % 7)]
            WHEN i % 4 = 0 THEN ARRAY['common', 'batch-' || (i % 7)] END,
       CASE WHEN i % 10000 = 9 THEN jsonb_build_object('customer', 'rare')
            WHEN i % 4 = 0 THEN jsonb_build_object('customer', 'c-' || (i % 100)) END
FROM generate_series(1, {ROWS}) AS i,
     LATERAL (SELECT now() - ({ROWS} - i) * interval '30 ms') AS t(at),
     LATERAL (SELECT (i * 7919) % 1000) AS p(r),
     LATERAL (SELECT p.r, CASE WHEN p.r < 350 THEN 'done' WHEN p.r < 390 THEN 'failed'
                               WHEN p.r < 393 THEN 'running' WHEN p.r < 396 THEN 'waiting'
                               WHEN p.r < 400 THEN 'cancelled' ELSE 'pending' END)
             AS s(r, status)
"""


@pytest.fixture(scope="module")
def large(server_url: str, template_database: str) -> Any:
    """A connection to a database of this module's own holding the table, analyzed."""
    name = f"pgdrain_browse_{uuid.uuid4().hex[:12]}"
    admin = connect(server_url)
    admin.run(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    conn = connect(with_database(server_url, name))
    try:
        conn.run(FILL)
        conn.run("INSERT INTO pgdrain_queues (queue, paused_at) VALUES ('queue-7', now())")
        conn.run("INSERT INTO pgdrain_done_counts (queue, job_type, minute, done) "
                 "SELECT 'queue-0', 'type-0', date_trunc('minute', now()) - m * interval '1 min', "
                 "10 FROM generate_series(0, 59) AS m")
        conn.run("VACUUM ANALYZE")
        yield conn
    finally:
        conn.close()
        admin.run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def window(conn: Any) -> dict[str, str]:
    """The newest window of ids, as job_page reads it first."""
    [[high]] = conn.run("SELECT max(id) FROM jobs")
    return {"before_id": str(high + 1), "floor_id": str(high + 1 - browse.WINDOW_IDS)}


MATCH_NONE = {f: "NULL" for f in JobFilter().params()}
PLANS: dict[str, tuple[str, dict[str, str]]] = {
    "the board": ("queue_board", {"cap": "10000", "most_queues": "200",
                                  "most_priorities": "32"}),
    "the minutes": ("job_minutes", {}),
    "the last failures": ("job_failures_recent", {"limit": "10"}),
    "the id range": ("job_id_range", {}),
    "a page, no filter": ("job_page", {**MATCH_NONE, "limit": "50"}),
    "a page, status": ("job_page", {**MATCH_NONE, "status": "'failed'", "limit": "50"}),
    "a page, a rare tenant": ("job_page", {**MATCH_NONE, "tenant": "'tenant-rare'",
                                           "limit": "50"}),
    "a page, a queue and a type": ("job_page", {**MATCH_NONE, "queue": "'queue-3'",
                                                "job_type": "'type-1'", "limit": "50"}),
    "a page, a dedupe key": ("job_page", {**MATCH_NONE, "dedupe_key": "'dedupe-1003'",
                                          "limit": "50"}),
    "a page, waiting for a signal": ("job_page", {**MATCH_NONE, "waiting_for": "'signal'",
                                                  "limit": "50"}),
    "a page, a search": ("job_page", {**MATCH_NONE, "search": "'nobody'", "limit": "50"}),
    "a page, older than": ("job_page", {**MATCH_NONE, "older_than_seconds": "600",
                                        "limit": "50"}),
    "a page, a rare tag": ("job_page", {**MATCH_NONE, "tags": "'{rare}'", "limit": "50"}),
    "a page, a common tag": ("job_page", {**MATCH_NONE, "tags": "'{common,batch-3}'",
                                          "limit": "50"}),
    "a page, a meta match": ("job_page", {**MATCH_NONE, "meta": "'{\"customer\": \"rare\"}'",
                                          "limit": "50"}),
    "a bulk cancel's ids by tag": ("job_page_ids", {
        **MATCH_NONE, "statuses": "'{pending,running,waiting}'", "tags": "'{rare}'",
        "limit": "10000"}),
    "a bulk retry's ids": ("job_page_ids", {**MATCH_NONE, "statuses": "'{failed}'",
                                            "queue": "'queue-3'", "limit": "10000"}),
}


def explained(conn: Any, name: str, params: dict[str, str]) -> list[dict[str, Any]]:
    """The nodes of the statement's plan (EXPLAIN, FORMAT JSON) with these parameters as
    literals: the plan the console gets, its statements being unnamed (planned with their
    values each time)."""
    text = _PARAM.sub(lambda m: params[m[1]], QUERIES[name])
    [[[plan]]] = conn.run("EXPLAIN (FORMAT JSON) " + text)

    def walk(node: dict[str, Any]) -> list[dict[str, Any]]:
        return [node, *(n for child in node.get("Plans", []) for n in walk(child))]

    return walk(plan["Plan"])


OPEN_PLANS: dict[str, str] = {}


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=OPEN_PLANS[c]))
    if c in OPEN_PLANS else c for c in PLANS])
def test_no_console_statement_reads_jobs_by_a_sequential_scan(large, case):
    name, params = PLANS[case]
    if name in ("job_page", "job_page_ids"):
        params = {**params, **window(large)}
    found = explained(large, name, params)
    shape = ", ".join(f"{n['Node Type']} {n.get('Index Name') or n.get('Relation Name') or ''}"
                      .strip() for n in found)
    assert not [n for n in found if n["Node Type"] == "Seq Scan"
                and n.get("Relation Name") == "jobs"], f"{name} ({case}): {shape}"


def rows_read(conn: Any, name: str, params: dict[str, str]) -> list[tuple[str, float]]:
    """Each read of jobs in the statement's run (EXPLAIN ANALYZE): the index or table, and the
    entries it read per loop (kept, then filtered out)."""
    text = _PARAM.sub(lambda m: params[m[1]], QUERIES[name])
    [[[plan]]] = conn.run("EXPLAIN (ANALYZE, FORMAT JSON) " + text)

    def walk(node: dict[str, Any]) -> list[dict[str, Any]]:
        return [node, *(n for child in node.get("Plans", []) for n in walk(child))]

    return [(n.get("Index Name") or n["Relation Name"],
             n["Actual Rows"] + n.get("Rows Removed by Filter", 0)
             + n.get("Rows Removed by Index Recheck", 0))
            for n in walk(plan["Plan"]) if n.get("Actual Loops")
            and (n.get("Relation Name") == "jobs" or n.get("Index Name", "").startswith("jobs_"))]


def test_each_read_of_the_board_stops_at_the_cap(large):
    # Every count reads at most :cap entries of its queue's own index range, whatever the
    # queue's size: beside 8 big queues, a small one is one short range too.
    reads = rows_read(large, "queue_board", {"cap": "100", "most_queues": "200",
                                             "most_priorities": "32"})
    assert reads and all(n <= 101 for _, n in reads), sorted(reads, key=lambda r: -r[1])[:5]


def test_the_board_counts_failed_jobs_through_their_index_by_queue(large):
    found = explained(large, "queue_board", PLANS["the board"][1])
    used = {n.get("Index Name") for n in found}
    assert {"jobs_failed_queue_idx", "jobs_running_idx", "jobs_waiting_idx",
            "jobs_pending_queue_idx"} <= used


def test_a_page_that_no_index_serves_reads_one_window_of_the_primary_key(large):
    # A filter of no index of its own costs the window, not the table.
    for case in ("a page, a rare tenant", "a page, a search"):
        name, params = PLANS[case]
        found = explained(large, name, {**params, **window(large)})
        scans = [n for n in found if n.get("Relation Name") == "jobs"]
        assert scans and all("id <" in n.get("Index Cond", "") + n.get("Recheck Cond", "")
                             for n in scans), (case, [(n["Node Type"], n.get("Index Name"),
                                                       n.get("Index Cond")) for n in scans])


def test_a_rare_tag_or_meta_is_read_through_its_index_within_the_window(large):
    # The partial GIN indexes serve the filters (with the window's id range), so a tag that
    # few jobs carry costs its few entries, not the window's 50,000 rows.
    for case, index in (("a page, a rare tag", "jobs_tags_idx"),
                        ("a page, a meta match", "jobs_meta_idx")):
        name, params = PLANS[case]
        reads = rows_read(large, name, {**params, **window(large)})
        assert index in {n for n, _ in reads}, (case, reads)
        assert all(n < 1000 for _, n in reads), (case, reads)
