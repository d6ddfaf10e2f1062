"""Tags and meta on a big table: the operators' filters and a bulk action's throughput.

    .venv/bin/python bench/tags.py [--rows 1000000] [--rounds 5] [--bulk 20000]

On a scratch database (the embedded PostgreSQL, or DATABASE_URL's server) holding ``--rows``
jobs, mostly done, as a busy queue's history is: a quarter carry the tag ``common`` (and
meta ``{"customer": "c-N"}``), one in 10,000 the tag ``rare`` (meta ``{"customer":
"rare"}``), the rest neither (NULL: not in the partial indexes). Then, medians of
``--rounds``: a bulk action's count (pgdrain.bulk.count, a window of ids at a time) and the
first page of the console's jobs page (browse.job_page) by the rare and the common tag and by
a meta match; ``pgdrain list --tag`` (store.list_jobs, the newest 50); and the time to cancel
``--bulk`` pending jobs of one tag in batches of 1,000 (pgdrain.bulk.act), as jobs per second.
First, on the empty table, what an enqueue costs with three tags and a small meta against
one without (time and WAL per job, batches of 100). Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "pgdrain"))

from pgdrain import browse, bulk, store  # noqa: E402
from pgdrain.browse import JobFilter  # noqa: E402
from pgdrain.db import connect  # noqa: E402
from pgdrain.migrate import migrate  # noqa: E402
from pgdrain_dev.embedded import scratch_database  # noqa: E402

FILL = """
INSERT INTO jobs (job_type, queue, status, run_at, created_at, finished_at, attempts, tags, meta)
SELECT 'type-' || (i % 6), 'queue-' || (i % 8), 'done', t.at, t.at, t.at, 1,
       CASE WHEN i % 10000 = 9 THEN ARRAY['rare', 'batch-' || (i % 7)]
            WHEN i % 4 = 0 THEN ARRAY['common', 'batch-' || (i % 7)] END,
       CASE WHEN i % 10000 = 9 THEN jsonb_build_object('customer', 'rare')
            WHEN i % 4 = 0 THEN jsonb_build_object('customer', 'c-' || (i % 100)) END
FROM generate_series(1, :rows) AS i,
     LATERAL (SELECT now() - (:rows - i) * interval '10 ms') AS t(at)
"""
BULK = """
INSERT INTO jobs (job_type, tags, meta)
SELECT 'bulk', ARRAY['to-cancel'], '{"campaign": "spring"}' FROM generate_series(1, :n)
"""


def median_ms(run: Callable[[], Any], rounds: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(rounds):
        started = time.perf_counter()
        result = run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), result


def enqueue_cost(conn: Any, rounds: int, jobs: int = 5000, batch: int = 100
                 ) -> list[tuple[str, float, float]]:
    """Per job: the time and the WAL of enqueue_many in batches of ``batch``, without tags and
    meta and with three tags and a small meta (alternating, ``rounds`` each; medians)."""
    import pgdrain

    options = {"plain": {}, "tags and meta": {
        "tags": ["customer:42", "spring", "batch-3"],
        "meta": {"source": "signup", "campaign": "spring-2026"}}}
    seen: dict[str, list[tuple[float, float]]] = {k: [] for k in options}
    for _ in range(rounds):
        for label, extra in options.items():
            conn.run("TRUNCATE jobs")
            [[before]] = conn.run("SELECT pg_current_wal_insert_lsn()")
            started = time.perf_counter()
            for _ in range(jobs // batch):
                pgdrain.enqueue_many(conn, [{"job_type": "t", "payload": {"n": 1}, **extra}
                                            for _ in range(batch)])
            seconds = time.perf_counter() - started
            [[wal]] = conn.run("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :b)",
                               b=before)
            seen[label].append((seconds / jobs * 1e6, float(wal) / jobs))
    conn.run("TRUNCATE jobs")
    return [(label, statistics.median(t for t, _ in runs), statistics.median(w for _, w in runs))
            for label, runs in seen.items()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bulk", type=int, default=20_000)
    args = parser.parse_args()
    with scratch_database("pgdrain_tags") as url:
        conn = connect(url)
        migrate(conn)
        print("| enqueue (batches of 100) | µs per job | WAL bytes per job |\n|---|---:|---:|")
        for label, micros, wal in enqueue_cost(conn, args.rounds):
            print(f"| {label} | {micros:,.0f} | {wal:,.0f} |")
        print()
        started = time.perf_counter()
        conn.run(FILL, rows=args.rows)
        conn.run("VACUUM ANALYZE jobs")
        fill_s = time.perf_counter() - started
        [[version]] = conn.run("SHOW server_version")
        [[size]] = conn.run("SELECT pg_size_pretty(pg_relation_size('jobs_tags_idx'))")
        print(f"{args.rows:,} jobs filled in {fill_s:.0f} s, PostgreSQL {version}, "
              f"jobs_tags_idx {size}\n")
        cases: list[tuple[str, Callable[[], Any]]] = []
        for label, match in (("tag rare", JobFilter(tags=("rare",))),
                             ("tag common", JobFilter(tags=("common",))),
                             ("tags common + batch-3", JobFilter(tags=("common", "batch-3"))),
                             ("meta customer=rare", JobFilter(meta={"customer": "rare"})),
                             ("meta customer=c-8", JobFilter(meta={"customer": "c-8"}))):
            cases.append((f"count for a bulk delete, {label}",
                          lambda m=match: bulk.count(conn, "delete", m, seconds=60).jobs))
            cases.append((f"first page of 50, {label}",
                          lambda m=match: len(browse.job_page(conn, m, seconds=10).jobs)))
        cases.append(("`pgdrain list --tag rare` (newest 50)",
                      lambda: len(store.list_jobs(conn, tags=["rare"]))))
        cases.append(("`pgdrain list --tag common` (newest 50)",
                      lambda: len(store.list_jobs(conn, tags=["common"]))))
        print("| operation | median ms | result |\n|---|---:|---:|")
        for label, run in cases:
            ms, result = median_ms(run, args.rounds)
            print(f"| {label} | {ms:,.1f} | {result:,} |")
        conn.run(BULK, n=args.bulk)
        conn.run("ANALYZE jobs")
        match = JobFilter(tags=("to-cancel",))
        started = time.perf_counter()
        counted = bulk.count(conn, "cancel", match, seconds=60)
        done = bulk.act(conn, "cancel", match, upto=counted.upto, batch=1000)
        seconds = time.perf_counter() - started
        print(f"| count then cancel {counted.jobs:,} pending jobs of one tag, batches of "
              f"1,000 | {seconds * 1000:,.0f} | {done.jobs / seconds:,.0f} jobs/s |")
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
