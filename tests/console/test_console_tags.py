"""The console with tags and meta: shown on the job page and in the jobs list, filtered on,
and a bulk action by tag acting only on what it counted (through pgdrain.bulk)."""

from __future__ import annotations

import re

import pgdrain


def test_the_job_page_and_the_list_show_tags_and_meta(client, conn):
    ident = pgdrain.enqueue(conn, "export", tags=["customer:42", "spring"],
                            meta={"source": "<b>signup</b>"}).id
    page = client.get(f"/jobs/{ident}")
    assert page.status == 200
    assert 'id="tags"' in page.body and "customer:42" in page.body
    assert 'id="meta"' in page.body and "&lt;b&gt;signup&lt;/b&gt;" in page.body
    listed = client.get("/jobs")
    assert "/jobs?tags=customer%3A42" in listed.body


def test_the_jobs_page_filters_by_tags_and_meta(client, conn):
    both = pgdrain.enqueue(conn, "a", tags=["red", "big"], meta={"team": "ops"}).id
    red = pgdrain.enqueue(conn, "a", tags=["red"], meta={"team": "dev"}).id
    pgdrain.enqueue(conn, "a")
    assert client.get("/jobs?tags=red").links(r"/jobs/\d+") == [f"/jobs/{red}", f"/jobs/{both}"]
    assert client.get("/jobs?tags=red+big").links(r"/jobs/\d+") == [f"/jobs/{both}"]
    assert client.get("/jobs?meta=team%3Dops").links(r"/jobs/\d+") == [f"/jobs/{both}"]
    bad = client.get("/jobs?tags=no%3Bsemicolon&meta=nothing")
    assert bad.status == 400 and "tags:" in bad.body and "meta:" in bad.body


def test_a_bulk_cancel_by_tag_counts_then_cancels_only_what_it_counted(acting_client, conn,
                                                                         sql):
    ids = [pgdrain.enqueue(conn, "a", tags=["red"]).id for _ in range(3)]
    confirm = acting_client.post("/bulk", {"action": "cancel", "tags": "red"})
    assert re.search(r"<strong>3</strong> jobs", confirm.body), confirm.body
    upto = re.search(r'name="upto" value="(\d+)"', confirm.body)[1]
    late = pgdrain.enqueue(conn, "a", tags=["red"]).id
    done = acting_client.post("/bulk/run", {"action": "cancel", "tags": "red", "upto": upto})
    assert "Cancel: 3 cancelled" in done.body
    rows = {r["id"]: r["status"] for r in sql("SELECT id, status FROM jobs")}
    assert rows == {**{i: "cancelled" for i in ids}, late: "pending"}
