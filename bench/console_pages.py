"""Console pages at 1,000,000 jobs: each page of ``pgdrain console`` timed over HTTP.

    .venv/bin/python bench/console_pages.py [--jobs 1000000] [--runs 20] [--tabs 20]

On a scratch database (the embedded PostgreSQL, or DATABASE_URL's server; created and dropped,
nothing else on the server is touched), ``--jobs`` jobs are inserted in a mix shaped like a
busy queue's table (``INSERT ... generate_series``, ids in enqueue order over the last hour):
35 % done (finished in the last hour, as retention keeps them), 30 % pending and due, 30 %
pending and scheduled up to a day ahead, 4 % failed (three attempts, a multi-line traceback
each), 0.3 % running, 0.3 % waiting (half for a signal, half for parents), 0.4 % cancelled;
8 queues of uneven sizes (one paused, one capped, one rate-limited), 6 job types, a third of
the jobs naming one of 50 tenants and 20 naming a rare one, some with an ordering key or a
dedupe key; per-minute done counts of forgotten jobs for the last hour; a few schedules. Then
VACUUM ANALYZE.

The console runs in this process on 127.0.0.1 (as tests/console/conftest.py starts it), with
``refresh_seconds=0`` so that every overview request reads the database, and with actions
allowed (the bulk confirmation is a POST). A client signs in with the token, then each page is
requested ``--runs`` times after one unmeasured request: median and p95 milliseconds, client
side (the request, the reads, the rendering). Then the library calls behind them, timed alone
on one connection. Last, a console with ``refresh_seconds=5`` gets ``--tabs`` overview
requests at once: how many times it read the database. Prints Markdown.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import os
import re
import statistics
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "layers" / "pgdrain"))
sys.path.insert(0, str(ROOT / "console"))

from pgdrain import browse, scheduler, store  # noqa: E402
from pgdrain.db import as_session, connect  # noqa: E402
from pgdrain.migrate import migrate  # noqa: E402
from pgdrain_console.connections import LOCK_MS, STATEMENT_MS  # noqa: E402
from pgdrain_dev.embedded import scratch_database  # noqa: E402

QUEUES = ("default", "default", "default", "default", "emails", "emails", "emails", "exports",
          "exports", "reports", "webhooks", "billing", "imports", "low")
"""Eight queues, by weight (a job's queue is this tuple's entry at its id modulo its length)."""
TYPES = ("send_email", "export_csv", "build_report", "deliver_webhook", "charge_card",
         "import_rows")
RARE_TENANT = "tenant-rare"
BUDGET_MS = 300
"""What issue 27 allows a page at 1,000,000 jobs."""
CHUNK = 100_000

# Statuses by r = (i * 7919) % 1000, a permutation of the ids' last three digits that spreads
# each status over the whole table: done 350, failed 40, running 3, waiting 3, cancelled 4,
# pending due 300, pending scheduled 300 (per mille).
FILL = """
INSERT INTO jobs (job_type, payload, queue, status, run_at, created_at, updated_at,
                  finished_at, attempts, claimed_at, started_at, lease_expires_at,
                  lease_token, last_error, errors, tenant, ordering_key, dedupe_key,
                  wait_signal, parents_left, after_parents)
SELECT (:job_types::text[])[(1 + i % cardinality(:job_types::text[]))::int],
       jsonb_build_object('to', 'user-' || i || '@example.com', 'order', i,
                          'items', i % 7, 'note', 'Please process this order'),
       (:queue_names::text[])[(1 + i % cardinality(:queue_names::text[]))::int],
       s.status,
       CASE WHEN s.status = 'pending' AND s.r >= 700
                 THEN now() + interval '1 minute' + (i % 86400) * interval '1 second'
            WHEN s.status = 'waiting' AND s.r % 2 = 0 THEN now() + interval '1 day'
            ELSE t.at END,
       t.at, t.at,
       CASE WHEN s.status IN ('done', 'failed', 'cancelled')
            THEN least(now(), t.at + (i % 30) * interval '1 second') END,
       CASE s.status WHEN 'done' THEN 1 WHEN 'running' THEN 1 WHEN 'failed' THEN 3 ELSE 0 END,
       CASE WHEN s.status = 'running' THEN now() - interval '10 seconds' END,
       CASE WHEN s.status = 'running' THEN now() - interval '10 seconds' END,
       CASE WHEN s.status = 'running' THEN now() + interval '16 minutes' END,
       CASE WHEN s.status = 'running' THEN gen_random_uuid() END,
       CASE WHEN s.status = 'failed' THEN e.text END,
       CASE WHEN s.status = 'failed' THEN jsonb_build_array(
                jsonb_build_object('attempt', 1, 'at', t.at, 'error', e.text),
                jsonb_build_object('attempt', 2, 'at', t.at, 'error', e.text),
                jsonb_build_object('attempt', 3, 'at', t.at, 'error', e.text))
            ELSE '[]'::jsonb END,
       CASE WHEN i % 50000 = 777 THEN :rare::text
            WHEN i % 3 = 0 THEN 'tenant-' || (i % 50) END,
       CASE WHEN i % 20 = 1 THEN 'customer-' || (i % 5000) END,
       CASE WHEN i % 50 = 3 THEN 'dedupe-' || i END,
       CASE WHEN s.status = 'waiting' AND s.r % 2 = 0 THEN 'order:' || i END,
       CASE WHEN s.status = 'waiting' AND s.r % 2 = 1 THEN 1 END,
       CASE WHEN s.status = 'waiting' AND s.r % 2 = 1 THEN 'done' END
FROM generate_series(:first::bigint, :last::bigint) AS i,
     LATERAL (SELECT now() - make_interval(secs => (:jobs::bigint - i) * 3600.0::float8
                                                   / :jobs::bigint)) AS t(at),
     LATERAL (SELECT (i * 7919) % 1000) AS p(r),
     LATERAL (SELECT p.r, CASE WHEN p.r < 350 THEN 'done' WHEN p.r < 390 THEN 'failed'
                               WHEN p.r < 393 THEN 'running' WHEN p.r < 396 THEN 'waiting'
                               WHEN p.r < 400 THEN 'cancelled' ELSE 'pending' END) AS s(r, status),
     LATERAL (SELECT 'Traceback (most recent call last):' || chr(10)
                     || '  File "/var/task/jobs.py", line 42, in handle' || chr(10)
                     || '    response = client.post(url, json=payload, timeout=30)' || chr(10)
                     || '  File "/var/task/client.py", line 118, in post' || chr(10)
                     || '    raise UpstreamTimeout(url)' || chr(10)
                     || 'client.UpstreamTimeout: https://api.example.com/orders/' || i
                     || ' did not answer in 30 s') AS e(text)
"""
SETTINGS = [
    "INSERT INTO pgdrain_queues (queue, paused_at) VALUES ('low', now() - interval '20 minutes')",
    "INSERT INTO pgdrain_queues (queue, max_running) VALUES ('billing', 5)",
    "INSERT INTO pgdrain_queues (queue, rate_limit, rate_period) VALUES ('webhooks', 50, 1)",
    # Jobs completed and forgotten (no row kept), counted by the minute, for the last hour.
    "INSERT INTO pgdrain_done_counts (queue, job_type, minute, done) "
    "SELECT q, 'send_email', date_trunc('minute', now()) - m * interval '1 minute', 120 "
    "FROM unnest('{default,emails}'::text[]) AS q, generate_series(0, 59) AS m",
    "INSERT INTO pgdrain_schedule_declarations (name, cron, tz, job_type, queue) VALUES "
    "('nightly-report', '0 3 * * *', 'Europe/Paris', 'build_report', 'reports'), "
    "('hourly-sync', '0 * * * *', NULL, 'import_rows', 'imports'), "
    "('every-minute-ping', '* * * * *', NULL, 'deliver_webhook', 'webhooks')",
    "INSERT INTO pgdrain_schedules (name, last_tick, last_job_id) VALUES "
    "('nightly-report', date_trunc('day', now()) + interval '3 hours' - interval '1 day', 1), "
    "('hourly-sync', date_trunc('hour', now()), 2), "
    "('retired-entry', now() - interval '9 days', 3)",
]


def fill(conn: Any, jobs: int) -> float:
    """Insert the jobs and the settings, then VACUUM ANALYZE; the seconds it took."""
    started = time.perf_counter()
    for first in range(1, jobs + 1, CHUNK):
        conn.run(FILL, job_types=list(TYPES), queue_names=list(QUEUES), rare=RARE_TENANT,
                 first=first, last=min(jobs, first + CHUNK - 1), jobs=jobs)
        print(f"filled {min(jobs, first + CHUNK - 1):,} jobs", file=sys.stderr, flush=True)
    for statement in SETTINGS:
        conn.run(statement)
    conn.run("VACUUM ANALYZE")
    return time.perf_counter() - started


# --- the console, in this process -----------------------------------------------------------

@dataclass
class Running:
    url: str
    token: str
    csrf: str
    app: Any
    server: Any
    thread: threading.Thread
    connections: Any

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
        self.connections.close()


def start_console(url: str, *, refresh_seconds: float) -> Running:
    """A console on ``url`` as ``pgdrain console --allow-actions`` serves it, on a free
    loopback port (as tests/console/conftest.py starts it)."""
    from pgdrain_console.app import Console, Settings
    from pgdrain_console.connections import Connections
    from pgdrain_console.guard import Guard, new_token
    from pgdrain_console.server import serve

    server = serve(None, "127.0.0.1", 0)
    port = server.server_address[1]
    guard = Guard(new_token(), "127.0.0.1", port)
    connections = Connections(lambda: connect(url))
    app = Console(connections=connections, guard=guard, settings=Settings(
        where="bench@127.0.0.1/scratch", allow_actions=True, refresh_seconds=refresh_seconds,
        max_drains=4))
    server.set_app(app)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    return Running(f"http://127.0.0.1:{port}", guard.token, guard.csrf, app, server, thread,
                   connections)


class Client:
    """A browser without a browser: the cookie the token gets, the CSRF token on each form."""

    def __init__(self, running: Running):
        self.running = running
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def sign_in(self, path: str = "/") -> None:
        status, body = self.get(f"{path}?token={self.running.token}")
        if status != 200:
            raise SystemExit(f"signing in answered {status}: {text_of(body)}")

    def get(self, path: str) -> tuple[int, str]:
        return self._open(urllib.request.Request(self.running.url + path))

    def post(self, path: str, fields: dict[str, str]) -> tuple[int, str]:
        data = urllib.parse.urlencode({**fields, "csrf": self.running.csrf}).encode()
        return self._open(urllib.request.Request(
            self.running.url + path, data=data, method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded"}))

    def _open(self, request: urllib.request.Request) -> tuple[int, str]:
        try:
            with self.opener.open(request, timeout=60) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as answer:
            return answer.code, answer.read().decode()


def text_of(page: str) -> str:
    """A page's words without its markup (what a refusal says)."""
    return " ".join(re.sub(r"<[^>]*>", " ", page).split())[-1000:]


# --- measuring ------------------------------------------------------------------------------

@dataclass
class Timed:
    label: str
    request: str
    times: list[float]
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def p95(self) -> float:
        ordered = sorted(self.times)
        return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def timed(call: Callable[[], Any], runs: int) -> list[float]:
    """Milliseconds of ``runs`` calls, after one unmeasured call."""
    call()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def page_call(client: Client, method: str, path: str, fields: dict[str, str] | None,
              expect: str) -> Callable[[], None]:
    def call() -> None:
        status, body = client.post(path, fields or {}) if method == "POST" else client.get(path)
        if status != 200 or expect not in body:
            raise SystemExit(f"{method} {path} answered {status} without {expect!r}: "
                             f"{text_of(body)}")
    return call


@dataclass
class Targets:
    failed_id: int
    deep_before: int
    low: int
    high: int


def targets(conn: Any) -> Targets:
    [[failed_id]] = conn.run("SELECT max(id) FROM jobs WHERE status = 'failed'")
    low, high = browse.id_range(conn)
    assert low is not None and high is not None
    return Targets(failed_id, low + 1_000, low, high)


def pages(t: Targets) -> list[tuple[str, str, str, dict[str, str] | None, str]]:
    """(label, method, path, form, text the answer must hold)."""
    return [
        ("overview", "GET", "/", None, "Queues"),
        ("jobs, first page", "GET", "/jobs", None, "/jobs/"),
        ("jobs, status=failed", "GET", "/jobs?status=failed", None, "/jobs/"),
        (f"jobs, tenant={RARE_TENANT} (20 jobs)", "GET", f"/jobs?tenant={RARE_TENANT}", None,
         "Jobs"),
        ("jobs, payload search matching nothing", "GET", "/jobs?q=no-such-text", None, "Jobs"),
        ("jobs, deep page (?before= the 1,000th id)", "GET", f"/jobs?before={t.deep_before}",
         None, "/jobs/"),
        ("a failed job (3 attempts' tracebacks)", "GET", f"/jobs/{t.failed_id}", None,
         "Traceback"),
        ("schedules", "GET", "/schedules", None, "nightly-report"),
        ("bulk retry, confirmation count (queue=emails)", "POST", "/bulk",
         {"action": "retry", "queue": "emails"}, "emails"),
    ]


def library_calls(t: Targets) -> list[tuple[str, Callable[[Any], Any], Callable[[Any], str]]]:
    """(label, the library call behind a page, what it returned)."""
    from dataclasses import replace

    def page(match: browse.JobFilter, before: int | None = None) -> Callable[[Any], Any]:
        return lambda conn: browse.job_page(conn, match, before=before, limit=50)

    def described(result: Any) -> str:
        if isinstance(result, browse.JobPage):
            more = (f"; stopped for time, searched down to id {result.searched_down_to:,}"
                    if result.searched_down_to is not None else "")
            return f"{len(result.jobs)} jobs{more}"
        if isinstance(result, tuple):
            return f"{result[0]:,} counted{'' if result[1] else ' (incomplete)'}"
        if isinstance(result, list):
            return f"{len(result)} rows"
        return "found" if result else "none"

    retry = replace(browse.JobFilter(queue="emails"), statuses=("failed",))
    return [
        ("board (queue_board)", browse.board, described),
        ("minutes (job_minutes)", browse.minutes, described),
        ("recent_failures (job_failures_recent)",
         lambda conn: browse.recent_failures(conn, limit=10), described),
        ("drain_slots_held", store.drain_slots_held, described),
        ("job_page, no filter", page(browse.JobFilter()), described),
        ("job_page, status=failed", page(browse.JobFilter(status="failed")), described),
        (f"job_page, tenant={RARE_TENANT}", page(browse.JobFilter(tenant=RARE_TENANT)),
         described),
        ("job_page, search matching nothing", page(browse.JobFilter(search="no-such-text")),
         described),
        ("job_page, deep", page(browse.JobFilter(), t.deep_before), described),
        ("get_job, a failed job", lambda conn: store.get_job(conn, t.failed_id), described),
        ("schedule_view", scheduler.schedule_view, described),
        ("count_matching, retry queue=emails",
         lambda conn: browse.count_matching(conn, retry, upto=t.high), described),
    ]


def tabs(url: str, count: int) -> tuple[int, float, float]:
    """``count`` overview requests at once on a console with refresh_seconds=5: its reads of
    the overview, the slowest answer's and all answers' milliseconds."""
    running = start_console(url, refresh_seconds=5.0)
    try:
        clients = [Client(running) for _ in range(count)]
        for c in clients:
            c.sign_in("/schedules")  # a page that does not read the overview
        assert running.app.overview.reads == 0
        barrier = threading.Barrier(count)
        answers: list[float] = []
        failures: list[str] = []

        def tab(c: Client) -> None:
            barrier.wait()
            started = time.perf_counter()
            status, _ = c.get("/")
            answers.append((time.perf_counter() - started) * 1000)
            if status != 200:
                failures.append(str(status))

        started = time.perf_counter()
        threads = [threading.Thread(target=tab, args=(c,)) for c in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        wall = (time.perf_counter() - started) * 1000
        if failures:
            raise SystemExit(f"overview requests failed: {failures}")
        return running.app.overview.reads, max(answers), wall
    finally:
        running.stop()


def server_line(conn: Any) -> str:
    settings = dict(conn.run("SELECT name, setting || coalesce(unit, '') FROM pg_settings "
                             "WHERE name IN ('server_version', 'shared_buffers', 'work_mem')"))
    [[jit]] = conn.run("SELECT pg_jit_available()")
    return (f"PostgreSQL {settings['server_version']}, {os.cpu_count()} CPUs, shared_buffers "
            f"{settings['shared_buffers']} (8kB pages), work_mem {settings['work_mem']}, JIT "
            f"{'available (the console turns it off)' if jit else 'not available'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000,
                        help="jobs in the table (default 1,000,000)")
    parser.add_argument("--runs", type=int, default=20,
                        help="timed requests per page (default 20)")
    parser.add_argument("--tabs", type=int, default=20,
                        help="overview requests at once (default 20)")
    args = parser.parse_args()
    if min(args.jobs, args.runs, args.tabs) < 1:
        parser.error("sizes and counts must be at least 1")

    with scratch_database("pgdrain_console") as url:
        conn = connect(url)
        try:
            migrate(conn)
            filled = fill(conn, args.jobs)
            counts = dict(conn.run("SELECT status, count(*) FROM jobs GROUP BY 1"))
            t = targets(conn)
            size = conn.run("SELECT pg_size_pretty(pg_total_relation_size('jobs'))")[0][0]
            print(f"### Console pages at {args.jobs:,} jobs\n")
            print(server_line(conn) + f". Filled in {filled:.0f} s (with VACUUM ANALYZE); "
                  f"jobs {size} with its indexes: "
                  + ", ".join(f"{n:,} {s}" for s, n in sorted(counts.items())) + ".\n")

            running = start_console(url, refresh_seconds=0.0)
            try:
                client = Client(running)
                client.sign_in()
                measured = []
                for label, method, path, form, expect in pages(t):
                    times = timed(page_call(client, method, path, form, expect), args.runs)
                    measured.append(Timed(label, f"{method} {path}", times))
                    print(f"{label}: median {measured[-1].median:.0f} ms", file=sys.stderr,
                          flush=True)
            finally:
                running.stop()
            # As an operator gets it: the overview from the last read, a stale one renewed in
            # the background (the default --refresh 5), over the same number of requests.
            served = start_console(url, refresh_seconds=5.0)
            try:
                client = Client(served)
                client.sign_in()
                times = timed(page_call(client, "GET", "/", None, "Queues"), args.runs)
                measured.insert(1, Timed("overview as served (`--refresh 5`: the last read, "
                                         "renewed in the background)", "GET /", times))
            finally:
                served.stop()

            print(f"Over HTTP, {args.runs} requests per page after one unmeasured one "
                  "(`refresh_seconds=0` but for the second line: each overview request reads "
                  "the database):\n")
            print(f"| page | request | median ms | p95 ms | under {BUDGET_MS} ms |")
            print("|---|---|---:|---:|---|")
            for m in measured:
                request = m.request if len(m.request) < 60 else m.request[:57] + "..."
                verdict = "yes" if m.p95 < BUDGET_MS else (
                    f"p95 +{m.p95 - BUDGET_MS:.0f} ms" if m.median < BUDGET_MS
                    else f"**no**, +{m.median - BUDGET_MS:.0f} ms")
                print(f"| {m.label} | `{request}` | {m.median:.0f} | {m.p95:.0f} | {verdict} |")

            # Bounded as the console's connections are (JIT off, as every pgdrain session).
            as_session(conn).one("connection_bound", statement_ms=STATEMENT_MS,
                                 lock_ms=LOCK_MS, idle_ms=LOCK_MS)
            print(f"\nThe library calls behind them, alone on one connection bounded as the "
                  f"console's are ({args.runs} runs after one unmeasured):\n")
            print("| call | median ms | p95 ms | returned |")
            print("|---|---:|---:|---|")
            for label, call, describe in library_calls(t):
                result: list[Any] = []
                times = timed(lambda call=call, result=result: result.append(call(conn)),
                              args.runs)
                m = Timed(label, "", times)
                print(f"| {label} | {m.median:.1f} | {m.p95:.1f} | {describe(result[-1])} |")

            reads, slowest, wall = tabs(url, args.tabs)
            print(f"\n{args.tabs} overview requests at once (`refresh_seconds=5`): "
                  f"{reads} read{'s' if reads != 1 else ''} of the overview from the database; "
                  f"the slowest answered in {slowest:.0f} ms, all in {wall:.0f} ms.")
        finally:
            conn.close()


if __name__ == "__main__":
    main()
