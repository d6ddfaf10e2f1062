"""``pgdrain cancel|requeue|delete`` by filter, and tags and meta in ``list`` and ``show``, run as
a user runs them (a separate process; no terminal, so nothing is done without --yes), and the
confirmation asked at a terminal."""

from __future__ import annotations

import argparse
import io
import json

import pgdrain
from pgdrain.cli import bulk as cli_bulk
from tests.integration.test_cli import pgdrain_cli


def statuses(sql) -> dict[int, str]:
    return {r["id"]: r["status"] for r in sql("SELECT id, status FROM jobs ORDER BY id")}


def test_cancel_by_tag_counts_without_yes_and_cancels_with_it(database_url, conn, sql):
    red = [pgdrain.enqueue(conn, "t", tags=["red", "big"]).id for _ in range(3)]
    blue = pgdrain.enqueue(conn, "t", tags=["blue"]).id
    before = statuses(sql)
    counted = pgdrain_cli(database_url, "cancel", "--tag", "red", "--tag", "big")
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.strip() == (
        f"3 job(s) (pending/running/waiting) match, up to job {blue}; nothing changed: run "
        "again with --yes to cancel them")
    assert statuses(sql) == before
    done = pgdrain_cli(database_url, "cancel", "--tag", "red", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"counted": 3, "upto": blue,
                                       "outcomes": {"cancelled": 3}, "next_upto": None}
    assert statuses(sql) == {**{i: "cancelled" for i in red}, blue: "pending"}


def test_delete_by_meta_leaves_a_running_job(database_url, conn, sql):
    for _ in range(3):
        pgdrain.enqueue(conn, "t", meta={"import": "2026-11"})
    [running] = pgdrain.claim(conn, batch_size=1, lease_seconds=60)
    done = pgdrain_cli(database_url, "delete", "--meta", "import=2026-11", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "delete: 2 deleted"
    assert statuses(sql) == {running.id: "running"}


def test_requeue_by_tag_and_age_takes_the_failed_jobs_only(database_url, conn, sql):
    ids = [pgdrain.enqueue(conn, "t", tags=["nightly"]).id for _ in range(3)]
    sql("UPDATE jobs SET status = 'failed' WHERE id = ANY(:ids)", ids=ids[:2])
    json_count = pgdrain_cli(database_url, "requeue", "--tag", "nightly", "--newer-than",
                             "1h", "--json")
    assert json.loads(json_count.stdout) == {"would_requeue": 2, "complete": True,
                                             "upto": ids[-1]}
    done = pgdrain_cli(database_url, "requeue", "--tag", "nightly", "--yes")
    assert done.stdout.strip() == "requeue: 2 requeued", done.stderr
    assert set(statuses(sql).values()) == {"pending"}


def test_ids_or_a_filter_but_not_both_nor_neither(database_url, conn):
    job = pgdrain.enqueue(conn, "t").id
    both = pgdrain_cli(database_url, "cancel", str(job), "--tag", "x")
    assert (both.returncode, both.stderr.splitlines()[-1]) == (
        2, "pgdrain cancel: give job ids or a filter, not both")
    neither = pgdrain_cli(database_url, "delete", "--yes")
    assert neither.returncode == 2 and "give job ids, or a filter" in neither.stderr
    bad = pgdrain_cli(database_url, "cancel", "--tag", "no,comma")
    assert bad.returncode == 2 and "is not a tag" in bad.stderr


def test_list_and_show_show_tags_and_meta(database_url, conn):
    tagged = pgdrain.enqueue(conn, "t", tags=["red", "customer:42"], meta={"who": "ann"}).id
    pgdrain.enqueue(conn, "t")
    listed = pgdrain_cli(database_url, "list", "--tag", "customer:42")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.strip().splitlines()
    assert "TAGS" in header and "red,customer:42" in row and row.split()[0] == str(tagged)
    as_json = json.loads(pgdrain_cli(database_url, "list", "--meta", '{"who": "ann"}',
                                     "--json").stdout)
    assert [(r["id"], r["tags"], r["meta"]) for r in as_json] == [
        (tagged, ["red", "customer:42"], {"who": "ann"})]
    shown = json.loads(pgdrain_cli(database_url, "show", str(tagged), "--json").stdout)
    assert (shown["tags"], shown["meta"]) == (["red", "customer:42"], {"who": "ann"})
    text = pgdrain_cli(database_url, "show", str(tagged)).stdout
    assert "tags" in text and '"who": "ann"' in text


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def bulk_args(**given) -> argparse.Namespace:
    values = {name: None for name in cli_bulk.FILTER_OPTIONS}
    values.update(job_type=None, yes=False, json=False, batch=1000, **given)
    return argparse.Namespace(**values)


def test_at_a_terminal_it_asks_and_acts_only_on_yes(conn, sql):
    ids = [pgdrain.enqueue(conn, "t", tags=["red"]).id for _ in range(2)]
    out = io.StringIO()
    assert cli_bulk.run(conn, "delete", bulk_args(tags=["red"]), out, Terminal("n\n")) == 0
    assert out.getvalue().startswith(f"2 job(s) (not running) match, up to job {ids[-1]}. "
                                     "Delete them? [y/N] ")
    assert len(statuses(sql)) == 2
    out = io.StringIO()
    assert cli_bulk.run(conn, "delete", bulk_args(tags=["red"]), out, Terminal("y\n")) == 0
    assert out.getvalue().endswith("delete: 2 deleted\n")
    assert statuses(sql) == {}
