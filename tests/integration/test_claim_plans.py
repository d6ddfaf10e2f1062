"""The plans of the statements a drain runs every pass, on a table shaped like a real queue's.

Stock PostgreSQL (12 and later) compiles a statement's plan with LLVM when the plan's estimated
total cost passes jit_above_cost (100,000): tens to hundreds of milliseconds of compiling for a
statement that runs in a few, under the row locks of a claim. The embedded test server has no
JIT, so a plan the rest of the suite finds fast can be 100 times slower on a user's server.
Every statement here is explained with realistic parameters, as a custom plan and as the
generic plan a prepared statement may switch to after five runs, under the server's own JIT
settings (never turned off in this session), and must cost less than jit_above_cost, carry no
JIT section and read no part of jobs by a sequential scan.

The table: 100,000 rows from one INSERT ... SELECT, then ANALYZE, so that the planner's
statistics are those of a busy queue: a history of done, failed and cancelled jobs, running
jobs (some past their lease), and pending ones, most due, some scheduled later, naming 20
tenants or none, some keyed, some expiring, some in a capped, a rate-limited or a paused queue,
some of a rate-limited job type.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

import pytest

from pgdrain.db import connect, with_database
from pgdrain.sql import QUERIES

ROWS = 100_000
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
BATCH = "100"
LEASE = "960"
# A batch of 100 (EXECUTE takes no subquery: the arrays are literals).
IDS = "'{" + ",".join(str(i) for i in range(50_001, 50_101)) + "}'"
TOKENS = "'{" + ",".join(str(uuid.UUID(int=i)) for i in range(1, 101)) + "}'"
NULLS = "'{" + ",".join(["NULL"] * 100) + "}'"

# Each statement a drain may run on a pass and that reads jobs or the queues' tables, with
# the parameters a drain passes (SQL literals): the janitor's, the claims', the finishing
# writes', the schedules' enqueue, the fan-out's and the metrics'.
STATEMENTS: dict[str, dict[str, str]] = {
    "flow_limited_due": {"queues": "'{capped}'", "job_types": "'{rated}'",
                         "only_queues": "NULL"},
    "flow_lock": {"job_types": "'{rated}'"},
    "flow_rooms": {"queues": "'{capped,limited}'", "job_types": "'{rated}'"},
    "janitor_cancel_requested_batch": {"limit": "1000"},
    "janitor_expire_batch": {"limit": "1000"},
    "janitor_select_expired": {"limit": "1000"},
    "janitor_signals_batch": {"limit": "1000"},
    "janitor_try_lock": {"lock_key": "8101821290853248513"},
    "job_backlog": {"cap": "10000", "queues": "NULL"},
    "job_batch_due": {"job_types": "'{export,rated}'", "batch_sizes": "'{100,10}'",
                      "batch_windows": "'{5,0}'", "queues": "NULL"},
    "job_claim_alone": {"lease_seconds": LEASE, "queues": "NULL",
                        "limited_types": "'{rated}'"},
    "job_claim_batch": {"batch_size": BATCH, "lease_seconds": LEASE, "queues": "NULL",
                        "limited_types": "'{rated}'"},
    "job_claim_batch_by_queue": {"batch_size": BATCH, "lease_seconds": LEASE, "queues": "NULL",
                                 "limited_types": "'{rated}'"},
    "job_claim_batch_of_type": {"job_type": "'export'", "batch_size": "10", "take": BATCH,
                                "batch_window": "5", "lease_seconds": LEASE, "queues": "NULL"},
    "job_claim_candidates": {"batch_size": BATCH, "room_queues": "'{capped,limited}'",
                             "queue_rooms": "'{10,50}'", "room_types": "'{rated}'",
                             "type_rooms": "'{50}'", "queues": "NULL", "fair": "true"},
    "job_claim_controlled": {"batch_size": BATCH, "lease_seconds": LEASE,
                             "room_queues": "'{capped,limited}'", "queue_rooms": "'{10,50}'",
                             "queues": "NULL"},
    "job_claim_fair": {"batch_size": BATCH, "lease_seconds": LEASE, "queues": "NULL",
                       "limited_types": "'{rated}'", "after_tenant": "'tenant-5'"},
    "job_claim_ids": {"ids": IDS, "lease_seconds": LEASE},
    "job_complete_batch": {"ids": IDS, "tokens": TOKENS},
    "job_complete_forget_batch": {"ids": IDS, "tokens": TOKENS},
    "job_control_sync": {"ids": IDS, "tokens": TOKENS, "progress": NULLS},
    "job_enqueue_batch": {"job_types": "'{" + ",".join(["export"] * 100) + "}'",
                          "payloads": "'{" + ",".join(['"{}"'] * 100) + "}'",
                          "queues": "'{" + ",".join(["default"] * 100) + "}'",
                          "priorities": "'{" + ",".join(["0"] * 100) + "}'",
                          "max_attempts": "'{" + ",".join(["3"] * 100) + "}'",
                          "run_ats": NULLS, "delays": "'{" + ",".join(["0"] * 100) + "}'",
                          "dedupe_keys": NULLS, "expires_ats": NULLS, "ttls": NULLS,
                          "ordering_keys": "NULL", "tenants": "NULL", "tags": "NULL",
                          "metas": "NULL", "trace_contexts": "NULL"},
    "job_enqueue_batch_unkeyed": {"job_types": "'{" + ",".join(["export"] * 100) + "}'",
                          "payloads": "'{" + ",".join(['"{}"'] * 100) + "}'",
                          "queues": "'{" + ",".join(["default"] * 100) + "}'",
                          "priorities": "'{" + ",".join(["0"] * 100) + "}'",
                          "max_attempts": "'{" + ",".join(["3"] * 100) + "}'",
                          "run_ats": NULLS, "delays": "'{" + ",".join(["0"] * 100) + "}'",
                          "dedupe_keys": "NULL", "expires_ats": NULLS, "ttls": NULLS,
                          "ordering_keys": "NULL", "tenants": "NULL", "tags": "NULL",
                          "metas": "NULL", "trace_contexts": "NULL"},
    "job_finish_batch": {"ids": IDS, "tokens": TOKENS,
                         "outcomes": "'{" + ",".join(["retry"] * 100) + "}'",
                         "delays": "'{" + ",".join(["2"] * 100) + "}'",
                         "errors": "'{" + ",".join(["boom"] * 100) + "}'", "results": NULLS},
    "signal_keep": {"name": "'confirm:42'", "payload": "'{\"ok\": true}'",
                    "keep_seconds": "604800"},
    "signal_wake": {"name": "'confirm:42'"},
    "job_wait_batch": {"ids": IDS, "tokens": TOKENS,
                       "names": "'{" + ",".join(f"s{i}" for i in range(100)) + "}'",
                       "timeouts": "'{" + ",".join(["60"] * 100) + "}'"},
    "job_purge_dead_batch": {"retention_seconds": "2592000", "limit": "1000"},
    "job_purge_done_batch": {"retention_seconds": "604800", "limit": "1000"},
    "job_purge_finished_batch": {"status": "'done'", "older_than_seconds": "604800",
                                 "limit": "1000"},
    "jobs_due_count": {"limit": "4000", "queues": "NULL", "limited_types": "'{rated}'"},
    "jobs_due_count_by_queue": {"limit": "4000", "queues": "NULL",
                                "limited_types": "'{rated}'"},
    "jobs_tenanted": {},
}

# Pending jobs (i % 100 >= 44) are due, but one in ten scheduled up to an hour ahead; two
# thirds name one of 20 tenants; their run_at follows their id, as a queue's does.
FILL = f"""
INSERT INTO jobs (job_type, queue, status, run_at, created_at, finished_at, updated_at,
                  claimed_at, lease_expires_at, lease_token, attempts, lost_claims,
                  expires_at, ordering_key, tenant)
SELECT CASE WHEN i % 10 = 3 THEN 'rated' ELSE 'export' END,
       CASE i % 25 WHEN 0 THEN 'capped' WHEN 1 THEN 'limited' WHEN 2 THEN 'paused'
            ELSE 'default' END,
       CASE WHEN i % 100 < 40 THEN 'done' WHEN i % 100 < 42 THEN 'failed'
            WHEN i % 100 = 42 THEN 'cancelled' WHEN i % 100 = 43 THEN 'running'
            ELSE 'pending' END,
       t.at + CASE WHEN i % 100 >= 90 THEN (i % 3600) * interval '1 second'
                   ELSE interval '0' END,
       t.at, CASE WHEN i % 100 < 43 THEN t.at END, t.at,
       CASE WHEN i % 100 = 43 THEN t.at END,
       CASE WHEN i % 1000 = 43 THEN t.at + interval '16 minutes'
            WHEN i % 100 = 43 THEN now() + interval '16 minutes' END,
       CASE WHEN i % 100 = 43 THEN gen_random_uuid() END,
       CASE WHEN i % 100 < 44 THEN 1 ELSE 0 END,
       CASE WHEN i % 1000 = 444 THEN 1 ELSE 0 END,
       CASE WHEN i % 30 = 0 AND i % 100 >= 44 THEN t.at + interval '1 hour' END,
       CASE WHEN i % 50 = 7 AND i % 100 >= 44 THEN 'key-' || (i % 100) END,
       CASE WHEN i % 3 <> 0 AND i % 100 >= 44 THEN 'tenant-' || (i % 20) END
FROM generate_series(1, {ROWS}) AS i,
     LATERAL (SELECT now() - ({ROWS} - i) * interval '10 seconds') AS t(at)
"""


@pytest.fixture(scope="module", params=["small tables never analyzed", "all analyzed"])
def queue_url(request: Any, server_url: str, template_database: str) -> Any:
    """A database of this module's own (cloned from the migrated template), filled once. The
    queues' and types' tables of a few rows are never analyzed by autovacuum (the planner
    then guesses hundreds of rows in them), or analyzed by hand."""
    name = f"pgdrain_plans_{uuid.uuid4().hex[:12]}"
    admin = connect(server_url)
    admin.run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.run(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    url = with_database(server_url, name)
    conn = connect(url)
    try:
        conn.run(FILL)
        conn.run("INSERT INTO pgdrain_queues (queue, max_running) VALUES ('capped', 10)")
        conn.run("INSERT INTO pgdrain_queues (queue, rate_limit, rate_period) "
                 "VALUES ('limited', 50, 1)")
        conn.run("INSERT INTO pgdrain_queues (queue, paused_at) VALUES ('paused', now())")
        conn.run("INSERT INTO pgdrain_type_rates (job_type, rate_limit, rate_period) "
                 "VALUES ('rated', 50, 1)")
        conn.run("VACUUM ANALYZE jobs")
        if request.param == "all analyzed":
            conn.run("ANALYZE pgdrain_queues")
            conn.run("ANALYZE pgdrain_type_rates")
    finally:
        conn.close()
    try:
        yield url
    finally:
        admin.run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture(scope="module")
def explainer(queue_url: str) -> Any:
    conn = connect(queue_url)
    try:
        yield conn
    finally:
        conn.close()


def explain(conn: Any, name: str, mode: str) -> dict[str, Any]:
    """EXPLAIN (FORMAT JSON) of the statement prepared as the drain prepares it (its
    parameters untyped but for the casts), run with the STATEMENTS parameters as a custom or
    a generic plan."""
    params = list(dict.fromkeys(_PARAM.findall(QUERIES[name])))
    text = _PARAM.sub(lambda m: f"${params.index(m[1]) + 1}", QUERIES[name])
    conn.run(f"SET plan_cache_mode = force_{mode}_plan")
    conn.run(f"PREPARE plan_check AS {text}")
    try:
        arguments = ", ".join(STATEMENTS[name][p] for p in params)
        [[[plan]]] = conn.run("EXPLAIN (FORMAT JSON) EXECUTE plan_check"
                              + (f"({arguments})" if arguments else ""))
    finally:
        conn.run("DEALLOCATE plan_check")
    return plan


def nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", []):
        found.extend(nodes(child))
    return found


def test_the_session_keeps_the_servers_jit_settings(explainer):
    # What the plans are checked under: the server's own settings, whatever they are.
    rows = explainer.run("SELECT name FROM pg_settings WHERE name IN ('jit', 'jit_above_cost') "
                         "AND setting IS DISTINCT FROM reset_val")
    assert rows == []


@pytest.mark.parametrize("mode", ["custom", "generic"])
@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_a_drain_statement_plans_cheaply_and_reads_no_whole_table(explainer, name, mode):
    [[above]] = explainer.run("SELECT current_setting('jit_above_cost')::float8")
    plan = explain(explainer, name, mode)
    top = plan["Plan"]
    shape = ", ".join(f"{n['Node Type']} {n.get('Index Name') or n.get('Relation Name') or ''}"
                      f"({n['Total Cost']:.0f})".replace(" (", "(") for n in nodes(top))
    assert "JIT" not in plan, f"{name} ({mode}) would be JIT-compiled: {shape}"
    assert top["Total Cost"] <= min(above, 100_000), (
        f"{name} ({mode}) costs {top['Total Cost']:,.0f}: {shape}")
    scans = [n for n in nodes(top)
             if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs"]
    assert not scans, f"{name} ({mode}) reads jobs by a sequential scan: {shape}"


# flow_*: these write a window or declare rates by primary key, of a few rows.
NOT_EXPLAINED = {"flow_starts_write", "flow_type_rates_declare"}


def test_every_claim_statement_of_the_catalogue_is_covered():
    claims = {n for n in QUERIES if n.startswith(("job_claim_", "janitor_", "job_purge_",
                                                  "flow_"))}
    missing = sorted(claims - set(STATEMENTS) - NOT_EXPLAINED)
    assert not missing, f"explain these in STATEMENTS too: {missing}"
    assert set(STATEMENTS) <= set(QUERIES)



@pytest.mark.parametrize("mode", ["custom", "generic"])
def test_signals_read_only_the_jobs_waiting_for_them(conn, mode):
    # 20,000 jobs waiting for signals of 2,000 names beside 20,000 pending ones: a send reads
    # its name's entries of jobs_waiting_signal_idx, the janitor's timeouts the front of
    # jobs_signal_timeout_idx; neither walks the table nor the pending jobs.
    conn.run("INSERT INTO jobs (job_type) SELECT 'export' FROM generate_series(1, 20000)")
    conn.run("INSERT INTO jobs (job_type, status, wait_signal, run_at) "
             "SELECT 'order', 'waiting', 'confirm:' || (i % 2000), "
             "now() + make_interval(secs => i) FROM generate_series(1, 20000) AS i")
    conn.run("INSERT INTO pgdrain_signals (name, expires_at) VALUES ('confirm:42', now())")
    conn.run("VACUUM ANALYZE jobs")
    for name, index in (("signal_wake", "jobs_waiting_signal_idx"),
                        ("janitor_signals_batch", "jobs_signal_timeout_idx")):
        plan = explain(conn, name, mode)
        reads = {(n["Node Type"], n.get("Index Name") or n.get("Relation Name"))
                 for n in nodes(plan["Plan"]) if n.get("Relation Name") == "jobs"
                 or "jobs" in str(n.get("Index Name", ""))}
        assert ("Seq Scan", "jobs") not in reads, (name, reads)
        assert any(found == index for _, found in reads), (name, reads)


@pytest.mark.parametrize("mode", ["custom", "generic"])
def test_the_fair_claim_reads_each_tenant_through_the_tenant_index(conn, mode):
    # A tenant's jobs read by a walk of jobs_pending_idx filtered by tenant would cost a
    # small tenant's probe a flood's backlog. With 10 tenants interleaved over 20,000 jobs,
    # the planner found that walk the cheaper one.
    conn.run("INSERT INTO jobs (job_type, tenant) "
             "SELECT 'export', 'tenant-' || (i % 10) FROM generate_series(1, 20000) AS i")
    conn.run("VACUUM ANALYZE jobs")
    plan = explain(conn, "job_claim_fair", mode)
    by_tenant = [n for n in nodes(plan["Plan"]) if "tenant = " in
                 f"{n.get('Index Cond', '')} {n.get('Filter', '')}"]
    assert by_tenant
    assert {n.get("Index Name") for n in by_tenant} == {"jobs_pending_tenant_idx"}, [
        (n["Node Type"], n.get("Index Name"), n.get("Index Cond"), n.get("Filter"))
        for n in by_tenant]


@pytest.mark.parametrize("mode", ["custom", "generic"])
def test_the_controlled_claims_read_each_queue_and_type_through_its_index(conn, mode):
    # As the tenants': a capped queue's or a rated type's few jobs behind many others must
    # be one range of their own index, never a walk of jobs_pending_idx.
    conn.run("INSERT INTO jobs (job_type, queue) "
             "SELECT 'type-' || (i % 4), 'queue-' || (i % 3) FROM generate_series(1, 20000) AS i")
    conn.run("VACUUM ANALYZE jobs")
    for name in ("job_claim_candidates", "job_claim_controlled"):
        plan = explain(conn, name, mode)
        for by, index in (("queue = r.queue", "jobs_pending_queue_idx"),
                          ("job_type = t.job_type", "jobs_pending_type_idx")):
            read = [n for n in nodes(plan["Plan"])
                    if by in f"{n.get('Index Cond', '')} {n.get('Filter', '')}"]
            assert {n.get("Index Name") for n in read} <= {index}, (name, by, [
                (n["Node Type"], n.get("Index Name"), n.get("Index Cond"), n.get("Filter"))
                for n in read])


def test_a_pgdrain_session_never_jit_compiles_whatever_the_dba_set(queue_url):
    """The plans above are cheap under the server's defaults; a pgdrain session also turns
    JIT off (connection_bound), so a DBA's lower jit_above_cost (or jit_above_cost = 0, as
    a role or database setting would give) never compiles a claim under its locks."""
    from pgdrain.db import Connector

    def dba_tuned(timeout: float | None = None) -> Any:
        conn = connect(queue_url, timeout=timeout)
        conn.run("SET jit = on")
        conn.run("SET jit_above_cost = 0")   # as ALTER ROLE ... SET would, before pgdrain's
        conn.run("SET jit_inline_above_cost = 0")
        return conn

    connector = Connector(dba_tuned)
    try:
        connector.open(time.monotonic() + 30)
        session = connector.session()
        assert session.one("connection_ping") == {"alive": 1}
        conn = session.conn
        assert conn.run("SHOW jit") == [["off"]]
        assert explain(conn, "job_claim_fair", "generic").get("JIT") is None
        assert explain(conn, "job_claim_batch", "custom").get("JIT") is None
    finally:
        connector.discard()


# The shapes that made the plain and fair claims read far more than they take: a paused
# queue's backlog ahead of the open ones, many tenants, many ordering keys, a big backlog.
SHAPES = {
    "paused backlog": [
        "INSERT INTO jobs (job_type, queue, run_at) SELECT 'export', 'paused', "
        "now() - interval '1 hour' FROM generate_series(1, 50000)",
        "INSERT INTO pgdrain_queues (queue, paused_at) VALUES ('paused', now())",
        "INSERT INTO jobs (job_type) SELECT 'export' FROM generate_series(1, 2000)"],
    "many tenants": [
        "INSERT INTO jobs (job_type, tenant) SELECT 'export', 'tenant-' || (i % 1000) "
        "FROM generate_series(1, 20000) AS i"],
    "many keys": [
        "INSERT INTO jobs (job_type, ordering_key) SELECT 'export', 'key-' || (i % 20) "
        "FROM generate_series(1, 20000) AS i"],
    "big backlog": [
        "INSERT INTO jobs (job_type, lost_claims) SELECT 'export', (i % 1000 = 0)::int "
        "FROM generate_series(1, 100000) AS i"],
}
OWN = ("job_claim_alone", "job_claim_batch", "job_claim_batch_by_queue", "job_claim_fair",
       "jobs_due_count", "jobs_due_count_by_queue", "job_backlog")


@pytest.fixture(scope="module", params=sorted(SHAPES))
def shaped(request: Any, server_url: str, template_database: str) -> Any:
    name = f"pgdrain_shape_{uuid.uuid4().hex[:12]}"
    admin = connect(server_url)
    admin.run(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    conn = connect(with_database(server_url, name))
    try:
        for statement in SHAPES[request.param]:
            conn.run(statement)
        conn.run("VACUUM ANALYZE jobs")
        yield request.param, conn
    finally:
        conn.close()
        admin.run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


# Still costed past jit_above_cost (each also on 96277a4, in the one statement then): where
# what is claimable is rare among the pending jobs of a queue, so that the claim or count must
# read the queue's range to find it, and queue by queue the planner guesses ten queues. All
# tenanted: the plain claims' walk past tenanted jobs for untenanted ones (a drain claims with
# job_claim_fair while tenants are pending, and runs neither then). 20 keys of 1,000 jobs:
# the count by queue, read while a queue is paused or controlled. Open: these fail as
# written, and are to be fixed, not loosened.
OPEN = {("many tenants", "job_claim_batch"), ("many tenants", "job_claim_batch_by_queue"),
        ("many keys", "jobs_due_count_by_queue")}


@pytest.mark.parametrize("mode", ["custom", "generic"])
@pytest.mark.parametrize("name", OWN)
def test_a_claim_or_count_plans_cheaply_on_every_shape(shaped, name, mode):
    shape, conn = shaped
    try:
        check_shape(conn, shape, name, mode)
    except AssertionError:
        if (shape, name) in OPEN:
            pytest.xfail(f"open: {name} on {shape} (see OPEN)")
        raise


def check_shape(conn: Any, shape: str, name: str, mode: str) -> None:
    plan = explain(conn, name, mode)
    top = plan["Plan"]
    summary = ", ".join(f"{n['Node Type']} {n.get('Index Name') or n.get('Relation Name') or ''}"
                        f"({n['Total Cost']:.0f})" for n in nodes(top))
    assert "JIT" not in plan, f"{name} ({mode}, {shape}) would be JIT-compiled: {summary}"
    assert top["Total Cost"] <= 100_000, f"{name} ({mode}, {shape}): {summary}"
    assert not [n for n in nodes(top) if n["Node Type"] == "Seq Scan"
                and n.get("Relation Name") == "jobs"], f"{name} ({mode}, {shape}): {summary}"


def analyzed(conn: Any, name: str, **params: str) -> list[dict[str, Any]]:
    """The nodes of EXPLAIN ANALYZE of the statement (run, then rolled back)."""
    text = _PARAM.sub(lambda m: params.get(m[1], STATEMENTS[name].get(m[1], "NULL")),
                      QUERIES[name])
    conn.run("BEGIN")
    try:
        [[[plan]]] = conn.run("EXPLAIN (ANALYZE, FORMAT JSON) " + text)
    finally:
        conn.run("ROLLBACK")
    return nodes(plan["Plan"])


def rows_read(found: list[dict[str, Any]], index: str | None = None) -> int:
    """Index entries (or rows) of jobs a plan's scans read: kept plus filtered out."""
    return sum((n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0))
               * n.get("Actual Loops", 1) for n in found
               if n.get("Relation Name") == "jobs" and index in (None, n.get("Index Name")))


@pytest.mark.parametrize("name", ["job_claim_batch_by_queue", "jobs_due_count_by_queue"])
def test_beside_a_paused_backlog_the_claim_and_the_count_read_what_they_take(conn, name):
    # Walking jobs_pending_idx, each read the paused queue's 20,000 jobs ahead of the others:
    # the drain claims and counts queue by queue while the janitor sees a queue so set.
    conn.run("INSERT INTO jobs (job_type, queue, run_at) SELECT 'export', 'paused', "
             "now() - interval '1 hour' FROM generate_series(1, 20000)")
    conn.run("INSERT INTO pgdrain_queues (queue, paused_at) VALUES ('paused', now())")
    conn.run("INSERT INTO jobs (job_type) SELECT 'export' FROM generate_series(1, 500)")
    conn.run("VACUUM ANALYZE jobs")
    assert rows_read(analyzed(conn, name, limit="100", limited_types="NULL")) < 1_000


def test_a_fair_claim_reads_the_tenants_it_serves_not_every_tenant(conn):
    # 1,000 tenants: a claim of 100 probed all of them, each claim.
    conn.run("INSERT INTO jobs (job_type, tenant) SELECT 'export', 'tenant-' || (i % 1000) "
             "FROM generate_series(1, 5000) AS i")
    conn.run("VACUUM ANALYZE jobs")
    found = analyzed(conn, "job_claim_fair", limited_types="NULL")
    assert rows_read(found, "jobs_pending_tenant_idx") < 500


@pytest.mark.xfail(strict=True, reason="open: 10 keys of 500 still read every entry of "
                   "jobs_ordering_key_live_idx (planned as one pass over the index)")
def test_a_keyed_claim_reads_one_entry_of_its_key_per_job(conn):
    # 10 keys of 500 jobs: the head's test read every live job of its key (and its row).
    conn.run("INSERT INTO jobs (job_type, ordering_key) SELECT 'export', 'key-' || (i % 10) "
             "FROM generate_series(1, 5000) AS i")
    conn.run("VACUUM ANALYZE jobs")
    found = analyzed(conn, "job_claim_batch", limited_types="NULL")
    assert rows_read(found, "jobs_ordering_key_live_idx") < 100


def nested_plans(conn: Any, statement: str, setup: str = "") -> list[dict[str, Any]]:
    """The plans of ``statement`` and of the statements run inside it (a plpgsql
    function's), as auto_explain reports them to the client; ``setup`` first, unreported,
    and both in a transaction rolled back after."""
    try:
        conn.run("LOAD 'auto_explain'")
    except Exception as exc:
        pytest.skip(f"auto_explain is not installed on this server: {exc}")
    for name, value in (("log_min_duration", "0"), ("log_nested_statements", "on"),
                        ("log_format", "json"), ("log_level", "notice")):
        conn.run(f"SET auto_explain.{name} = {value}")
    conn.run("BEGIN")
    try:
        if setup:
            conn.run(setup)
        conn.notices.clear()
        conn.run(statement)
    finally:
        conn.run("ROLLBACK")
        conn.run("SET auto_explain.log_min_duration = -1")
    found = []
    for notice in conn.notices:
        message = notice.get(b"M", b"").decode()
        if "plan:" in message:
            found.append(json.loads(message.split("plan:", 1)[1]))
    return found


@pytest.mark.parametrize("tenants", ["tenants", "no tenants"])
@pytest.mark.parametrize("mode", ["custom", "generic"])
def test_the_one_call_controlled_claim_plans_each_of_its_statements_cheaply(
        queue_url, mode, tenants):
    """pgdrain_claim_controlled (job_claim_controlled) runs its statements inside the server,
    where EXPLAIN of the call shows none of them: each is checked as it ran, through
    auto_explain (PostgreSQL 15's contrib; the embedded server has none, nor JIT), under the
    server's JIT settings, as a custom and as the generic plan a function's cache switches
    to, with pending jobs naming tenants (each queue's window read whole) and without."""
    conn = connect(queue_url)
    try:
        [[above]] = conn.run("SELECT current_setting('jit_above_cost')::float8")
        conn.run(f"SET plan_cache_mode = force_{mode}_plan")
        setup = "" if tenants == "tenants" else \
            "UPDATE jobs SET tenant = NULL WHERE status = 'pending' AND tenant IS NOT NULL"
        # Twice: the first run plans, the second may use the function's cached plans.
        plans = nested_plans(conn, "SELECT * FROM pgdrain_claim_controlled("
                             f"{BATCH}, {LEASE}, NULL); SELECT * FROM "
                             f"pgdrain_claim_controlled({BATCH}, {LEASE}, NULL)", setup)
    finally:
        conn.close()
    picks = [p for p in plans if "array_agg(c.id" in p["Query Text"]]
    assert len(picks) == 2 and len(plans) >= 10, [p["Query Text"][:60] for p in plans]
    for plan in plans:
        top = plan["Plan"]
        shape = ", ".join(f"{n['Node Type']} {n.get('Index Name') or n.get('Relation Name') or ''}"
                          f"({n['Total Cost']:.0f})".replace(" (", "(") for n in nodes(top))
        text = " ".join(plan["Query Text"].split())[:80]
        assert "JIT" not in plan, f"{text} ({mode}) would be JIT-compiled: {shape}"
        assert top["Total Cost"] <= min(above, 100_000), (
            f"{text} ({mode}) costs {top['Total Cost']:,.0f}: {shape}")
        scans = [n for n in nodes(top)
                 if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs"]
        assert not scans, f"{text} ({mode}) reads jobs by a sequential scan: {shape}"
