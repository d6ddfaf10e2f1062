"""Tags and meta, checked without a database: what new_job keeps, what it refuses (and why),
and the filters a bulk action (pgdrain.bulk), the command line and the console build."""

from __future__ import annotations

import argparse

import pytest

import pgdrain
from pgdrain import bulk
from pgdrain.browse import JobFilter
from pgdrain.cli import bulk as cli_bulk
from pgdrain_console import filters


def test_new_job_keeps_tags_once_in_order_and_meta_as_compact_json():
    job = pgdrain.new_job("t", tags=["b", "A", "b", "a"], meta={"k": "é", "n": [1]})
    assert job.tags == ("b", "A", "a")
    assert job.meta_json == '{"k":"é","n":[1]}'


def test_no_tags_and_an_empty_meta_are_none():
    job = pgdrain.new_job("t", tags=[], meta={})
    assert (job.tags, job.meta_json) == (None, None)
    assert (pgdrain.new_job("t").tags, pgdrain.new_job("t").meta_json) == (None, None)


@pytest.mark.parametrize("tag", ["a", "0", "a" * 64, "customer:42", "x/y@z+w=v.u_t-s"])
def test_tags_that_are_accepted(tag):
    assert pgdrain.new_job("t", tags=[tag]).tags == (tag,)


@pytest.mark.parametrize("tag", ["", "a" * 65, " a", "a ", "a,b", "-a", "_a", "é", "a\nb",
                                 "a\x00"])
def test_tags_that_are_refused_name_the_field(tag):
    with pytest.raises(pgdrain.InvalidJobError) as caught:
        pgdrain.new_job("t", tags=[tag], index=3)
    assert caught.value.field == "tags" and caught.value.index == 3
    assert str(caught.value).startswith("jobs[3].tags: ")


def test_seventeen_distinct_tags_are_too_many_but_repeats_count_once():
    assert len(pgdrain.new_job("t", tags=[f"t{i % 16}" for i in range(40)]).tags) == 16
    with pytest.raises(pgdrain.InvalidJobError, match="at most 16 tags"):
        pgdrain.new_job("t", tags=[f"t{i}" for i in range(17)])


def test_meta_at_the_limit_is_kept_and_one_byte_more_refused():
    room = 4096 - len('{"k":""}')
    assert pgdrain.new_job("t", meta={"k": "x" * room}).meta_json is not None
    with pytest.raises(pgdrain.InvalidJobError, match="4,097 bytes"):
        pgdrain.new_job("t", meta={"k": "x" * (room + 1)})


def test_a_filter_from_values_checks_each_field():
    match = bulk.job_filter({"status": "failed", "tags": ["b", "a", "b"],
                             "meta": {"k": 1}, "queue": "q", "older_than_seconds": 60})
    assert match == JobFilter(status="failed", tags=("b", "a"), meta={"k": 1}, queue="q",
                              older_than_seconds=60)
    assert match.params()["tags"] == ["b", "a"] and match.params()["meta"] == '{"k":1}'
    assert JobFilter().params()["tags"] is None and JobFilter().params()["meta"] is None


@pytest.mark.parametrize(("values", "field"), [
    ({"status": "lost"}, "status"),
    ({"queue": ""}, "queue"),
    ({"job_type": 3}, "job_type"),
    ({"tags": ["a b"]}, "tags"),
    ({"tags": "a"}, "tags"),
    ({"meta": [1]}, "meta"),
    ({"older_than_seconds": -1}, "older_than_seconds"),
    ({"newer_than_seconds": True}, "newer_than_seconds"),
    ({"payload": {}}, "payload"),
])
def test_a_filter_that_cannot_select_names_its_field(values, field):
    with pytest.raises(bulk.InvalidFilter) as caught:
        bulk.job_filter(values)
    assert caught.value.field == field


def test_the_command_line_s_meta_is_a_string_value_or_a_json_object():
    assert cli_bulk.meta_match("customer=42") == {"customer": "42"}
    assert cli_bulk.meta_match("k=a=b") == {"k": "a=b"}
    assert cli_bulk.meta_match('{"customer": 42}') == {"customer": 42}
    for bad in ("customer", "=x", "{not json"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli_bulk.meta_match(bad)
    assert cli_bulk.merged_meta([{"a": "1"}, {"b": 2}, {"a": "1"}]) == {"a": "1", "b": 2}
    with pytest.raises(bulk.InvalidFilter, match="given twice"):
        cli_bulk.merged_meta([{"a": "1"}, {"a": "2"}])


def test_the_console_reads_tags_and_meta_from_its_form():
    chosen = filters.read({"tags": " red, big red ", "meta": "team=ops"})
    assert chosen.problems == ()
    assert (chosen.match.tags, chosen.match.meta) == (("red", "big"), {"team": "ops"})
    bad = filters.read({"tags": "ok no/comma?", "meta": "nothing"})
    assert [p.split(":")[0] for p in bad.problems] == ["tags", "meta"]


def test_the_library_offers_the_bulk_actions_as_pgdrain_bulk():
    assert pgdrain.bulk is bulk
    assert set(bulk.ACTIONS) == {"cancel", "requeue", "delete", "run_now"}
    assert bulk.ACTIONS["delete"].statuses == ("pending", "waiting", "done", "failed",
                                               "cancelled")  # never running


def test_a_job_s_meta_that_plain_sql_stored_oddly_says_so_when_read():
    from datetime import UTC, datetime

    at = datetime(2030, 1, 1, tzinfo=UTC)
    job = pgdrain.Job(1, "t", {}, 1, 3, "default", 0, at, at, at, at, "token",
                      meta_json="[1, 2]")
    with pytest.raises(ValueError, match="job 1's meta: it is a JSON list, not an object"):
        _ = job.meta
    assert pgdrain.Job(1, "t", {}, 1, 3, "default", 0, at, at, at, at, "t").meta == {}
