"""What code around a job costs a drain: JOBS no-op jobs drained at default settings, plain;
with a middleware and the two hooks registered; and with the enqueuer's trace context kept
and run under (an X-Ray segment per job sent to a daemon stand-in on 127.0.0.1, and, with
OpenTelemetry's SDK loaded, a span per job exported to memory). The daemon stand-in is a
process of its own, as the daemon is in Lambda. Each variant is drained
ROUNDS times, interleaved, in one run; the medians are reported with their ratio to plain.

    .venv/bin/python bench/around_jobs.py
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test .venv/bin/python bench/around_jobs.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pgdrain
from pgdrain import Settings
from pgdrain.db import Connector, connect
from pgdrain.drain import drain
from pgdrain.migrate import migrate
from pgdrain.registry import Registry
from pgdrain_dev.embedded import scratch_database

XRAY = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _plain() -> Registry:
    registry = Registry()
    pgdrain.job("noop", registry=registry)(lambda job: None)
    return registry


def _wrapped() -> Registry:
    registry = _plain()
    pgdrain.middleware(lambda job, call_next: call_next(), registry=registry)
    pgdrain.on_start(lambda job: None, registry=registry)
    pgdrain.on_finish(lambda job, result, error: None, registry=registry)
    return registry


def _round(url: str, registry: Registry, jobs: int, enqueue: Callable[[Any], None]) -> float:
    """Jobs per second for draining ``jobs`` no-op jobs enqueued by ``enqueue``."""
    conn = connect(url)
    try:
        conn.run("TRUNCATE jobs RESTART IDENTITY")
        enqueue(conn)
        conn.run("VACUUM ANALYZE jobs")
    finally:
        conn.close()
    connector = Connector(lambda timeout=None: connect(url, timeout=timeout))
    try:
        at = time.perf_counter()
        claimed = 0
        while claimed < jobs:
            got = drain(connector, registry, Settings(), time_left=lambda: 600.0).claimed
            if not got:
                break
            claimed += got
        assert claimed == jobs, claimed
        return jobs / (time.perf_counter() - at)
    finally:
        connector.discard()


def _enqueuer(jobs: int, env: dict[str, str] | None, otel: Any = None
              ) -> Callable[[Any], None]:
    def enqueue(conn: Any) -> None:
        saved = {k: os.environ.get(k) for k in (env or {})}
        os.environ.update(env or {})
        try:
            for start in range(0, jobs, 1000):
                batch = [{"job_type": "noop"}] * min(1000, jobs - start)
                if otel is not None:
                    with otel.start_as_current_span("request"):
                        pgdrain.enqueue_many(conn, batch)
                else:
                    pgdrain.enqueue_many(conn, batch)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return enqueue


_DAEMON = """
import signal, socket, sys
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", 0))
sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
print(sock.getsockname()[1], flush=True)
received = 0
def stop(*_):
    print(received, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    sock.recv(65536)
    received += 1
"""


def _daemon() -> tuple[subprocess.Popen[str], int]:
    """An X-Ray daemon stand-in on 127.0.0.1 that counts the segments it receives: a
    process of its own, as the daemon is in Lambda (a thread here would take the GIL from
    the drain it measures)."""
    process = subprocess.Popen([sys.executable, "-c", _DAEMON], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None
    return process, int(process.stdout.readline())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("bench")
    daemon, port = _daemon()
    os.environ["AWS_XRAY_DAEMON_ADDRESS"] = f"127.0.0.1:{port}"
    variants: dict[str, tuple[Callable[[], Registry], Callable[[Any], None]]] = {
        "plain": (_plain, _enqueuer(args.jobs, None)),
        "middleware + 2 hooks": (_wrapped, _enqueuer(args.jobs, None)),
        "traced: X-Ray segment": (_plain, _enqueuer(args.jobs, {"_X_AMZN_TRACE_ID": XRAY})),
        "traced: OpenTelemetry span": (_plain, _enqueuer(args.jobs, None, tracer)),
    }
    with scratch_database("pgdrain_around") as url:
        conn = connect(url)
        migrate(conn)
        conn.close()
        rates: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, (registry, enqueue) in variants.items():
                exporter.clear()
                rates[name].append(_round(url, registry(), args.jobs, enqueue))
    daemon.terminate()
    received, _ = daemon.communicate(timeout=10)
    plain = statistics.median(rates["plain"])
    print(f"{args.jobs:,} no-op jobs per round, {args.rounds} rounds interleaved, default "
          f"settings (median jobs/s, ratio to plain, per-job cost):")
    for name, values in rates.items():
        rate = statistics.median(values)
        extra = (1 / rate - 1 / plain) * 1e6
        print(f"  {name:28} {rate:8,.0f} jobs/s  {rate / plain:5.2f}  "
              f"{extra:+6.0f} us/job")
    print(f"  (X-Ray segments received by the stand-in: {int(received.split()[-1]):,})")


if __name__ == "__main__":
    main()
