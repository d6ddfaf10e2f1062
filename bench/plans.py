"""What a catalogue statement reads under a generic plan (the kind the drain's prepared
statements may get) or a custom one: its estimated cost, the time JIT compiling took (on a
server with JIT), buffers, time and the plan's nodes, from EXPLAIN (ANALYZE, BUFFERS).

    .venv/bin/python bench/plans.py [--done 50000] [--pending 10000] [--tenants 0]
        [--rated 0] [--custom] NAME=PARAMS ...

Each NAME is a statement of layers/pgdrain/pgdrain/sql/queries.sql, PARAMS its parameters as
SQL literals (``limit=1000,retention_seconds=2592000``). Runs on a scratch database (the
embedded PostgreSQL, or DATABASE_URL's server) holding that many done and pending jobs (with
--tenants, two pending jobs in three name one of that many tenants; with --rated N, one in N
is of the rate-limited type ``rated``), each statement inside a transaction that is rolled
back, under the server's own JIT settings.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from pgdrain.db import connect
from pgdrain.migrate import migrate
from pgdrain.sql import QUERIES
from pgdrain_dev.embedded import scratch_database

_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
DEFAULTS = ["job_purge_dead_batch=retention_seconds=2592000,limit=1000",
            "job_purge_finished_batch=status='failed',older_than_seconds=2592000,limit=1000",
            "janitor_expire_batch=limit=100",
            "job_claim_batch=batch_size=100,lease_seconds=60,queues=NULL,limited_types=NULL"]


def explain(conn: Any, name: str, literals: dict[str, str], mode: str = "generic"
            ) -> tuple[int, float, list[str], float, float]:
    names = list(dict.fromkeys(_PARAM.findall(QUERIES[name])))
    text = QUERIES[name]
    for i, param in enumerate(names, 1):
        text = re.sub(rf"(?<![:\w]):{param}\b", f"${i}", text)
    conn.run(f"SET plan_cache_mode = force_{mode}_plan")
    conn.run(f"PREPARE p AS {text}")
    conn.run("BEGIN")
    try:
        arguments = ", ".join(literals[n] for n in names)
        [[[plan]]] = conn.run("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE p"
                              + (f"({arguments})" if arguments else ""))
    finally:
        conn.run("ROLLBACK")
        conn.run("DEALLOCATE p")
    nodes: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        on = node.get("Index Name") or node.get("Relation Name")
        nodes.append(node["Node Type"] + (f" on {on}" if on else ""))
        for child in node.get("Plans", []):
            walk(child)

    top = plan["Plan"]
    walk(top)
    jit = plan.get("JIT", {}).get("Timing", {}).get("Total", 0.0)
    if isinstance(jit, dict):  # PostgreSQL 16 and later: {"Time": ms}
        jit = jit.get("Time", 0.0)
    return (top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
            plan["Execution Time"], nodes, top["Total Cost"], float(jit))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--done", type=int, default=50_000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--tenants", type=int, default=0)
    parser.add_argument("--rated", type=int, default=0)
    parser.add_argument("--custom", action="store_true", help="custom plans, not generic")
    parser.add_argument("statements", nargs="*", default=DEFAULTS)
    args = parser.parse_args()
    with scratch_database("plans") as url:
        conn = connect(url)
        try:
            migrate(conn)
            conn.run("INSERT INTO jobs (job_type, status, finished_at) SELECT 't', 'done', now() "
                     "FROM generate_series(1, :n)", n=args.done)
            conn.run("INSERT INTO jobs (job_type, tenant) "
                     "SELECT CASE WHEN :rated > 0 AND i % :rated = 0 THEN 'rated' ELSE 't' END, "
                     "CASE WHEN :tenants > 0 AND i % 3 <> 0 THEN 'tenant-' || (i % :tenants) END "
                     "FROM generate_series(1, :n) AS i",
                     n=args.pending, rated=args.rated, tenants=args.tenants)
            if args.rated:
                conn.run("INSERT INTO pgdrain_type_rates (job_type, rate_limit, rate_period) "
                         "VALUES ('rated', 100, 1)")
            conn.run("ANALYZE jobs")
            mode = "custom" if args.custom else "generic"
            print(f"{mode} plans\n\n| statement | cost | JIT ms | buffers | ms | plan |\n"
                  "|---|---:|---:|---:|---:|---|")
            for spec in args.statements:
                name, _, raw = spec.partition("=")
                literals = dict(p.split("=", 1) for p in raw.split(",") if p)
                buffers, ms, nodes, cost, jit = explain(conn, name, literals, mode)
                print(f"| {name} | {cost:,.0f} | {jit:.1f} | {buffers} | {ms:.2f} "
                      f"| {', '.join(nodes)} |")
        finally:
            conn.close()


if __name__ == "__main__":
    main()
