"""Drains start drains, end to end: the drain function in worker processes behind the local
Lambda Invoke stand-in (pgdrain_dev.lambda_standin, reached by boto3 through
AWS_ENDPOINT_URL_LAMBDA), a real PostgreSQL, 200 ms jobs, one invoke to begin with."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from pgdrain.db import connect
from pgdrain_dev.lambda_standin import StandIn, make_server, standin_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def standin(function_env, tmp_path):
    log = tmp_path / "invocations.jsonl"
    state = StandIn(ROOT / "functions" / "drain", timeout=20, max_containers=8,
                    log_path=log, env={}, quiet=True)
    server = make_server(state)
    port = server.server_address[1]
    state.env = {**standin_env(port), **function_env}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, port, log
    finally:
        server.shutdown()
        server.server_close()
        state.close()


class SlotSampler(threading.Thread):
    """Counts the drains holding a slot (their advisory locks) every 10 ms."""

    def __init__(self, database_url: str):
        super().__init__(daemon=True)
        self.conn = connect(database_url)
        self.most = 0
        self.stop = threading.Event()

    def run(self) -> None:
        from pgdrain import store

        while not self.stop.is_set():
            self.most = max(self.most, store.drains_running(self.conn))
            time.sleep(0.01)

    def close(self) -> None:
        self.stop.set()
        self.join()
        self.conn.close()


def invocations(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def wait_until_drained(conn, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if conn.run("SELECT count(*) FROM jobs WHERE status <> 'done'")[0][0] == 0:
            return
        time.sleep(0.1)
    raise AssertionError("the backlog was not drained")


def test_one_invoke_drains_a_backlog_through_continuation_and_fan_out(
        standin, database_url, monkeypatch):
    state, port, log = standin
    state.env.update({"PGDRAIN_CONCURRENCY": "20", "PGDRAIN_MAX_DRAINS": "3",
                      "PGDRAIN_MAX_JOBS": "40", "POWERTOOLS_LOG_LEVEL": "WARNING"})
    conn = connect(database_url)
    sampler = SlotSampler(database_url)
    sampler.start()
    try:
        conn.run("INSERT INTO jobs (job_type, payload) SELECT 'test-sleep', "
                 "'{\"seconds\": 0.2}' FROM generate_series(1, 300)")
        import boto3

        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "standin")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "standin")
        # A session of its own: boto3's default one would keep these credentials for later
        # tests.
        client = boto3.session.Session().client(
            "lambda", region_name="eu-west-1", endpoint_url=f"http://127.0.0.1:{port}")
        answer = client.invoke(FunctionName="pgdrain-drain", InvocationType="Event",
                               Payload=b'{"source": "test"}')
        client.close()
        assert answer["StatusCode"] == 202
        wait_until_drained(conn, 60)
        time.sleep(1.0)  # the last drains look once more and return
        attempts = conn.run("SELECT attempts, count(*) FROM jobs GROUP BY attempts")
    finally:
        conn.close()
        sampler.close()
    records = invocations(log)
    summaries = [r["result"] for r in records if "result" in r]
    assert [r for r in records if "error" in r] == []
    assert attempts == [[1, 300]]  # every job ran once: nothing charged twice or lost
    assert sum(s["done"] for s in summaries) == 300
    # 300 jobs at 40 a drain need at least 8 drains: they were started by drains.
    assert sum(s["continued"] for s in summaries) >= 7
    assert any(s["stopped"] == "max_jobs" and s["continued"] for s in summaries)
    # Fan-out ran drains side by side, never more than PGDRAIN_MAX_DRAINS at once.
    assert 2 <= sampler.most <= 3
    assert max(s["claimed"] for s in summaries) <= 40


def test_drains_start_drains_only_for_slots_that_no_launch_will_take(
        standin, database_url, monkeypatch):
    # A backlog of 4 drains' work at a cap of 4: the first drain launches 3, and each of those
    # fans out too as it starts, and each stopping drain continues. Before the ledger of
    # launches on their way, every drain of the burst launched again for its siblings' free
    # slots, and the surplus answered busy (or found no container: throttled, in Lambda).
    state, _port, log = standin
    state.env.update({"PGDRAIN_CONCURRENCY": "5", "PGDRAIN_MAX_DRAINS": "4",
                      "PGDRAIN_MAX_JOBS": "40", "POWERTOOLS_LOG_LEVEL": "WARNING"})
    conn = connect(database_url)
    sampler = SlotSampler(database_url)
    sampler.start()
    try:
        conn.run("INSERT INTO jobs (job_type, payload) SELECT 'test-sleep', "
                 "'{\"seconds\": 0.2}' FROM generate_series(1, 240)")
        state.invoke("pgdrain-drain", {"source": "test"})  # the first drain, as a tick's
        wait_until_drained(conn, 90)
        time.sleep(1.0)  # the last drains look once more and return
    finally:
        conn.close()
        sampler.close()
    summaries = [r["result"] for r in invocations(log) if "result" in r]
    assert sum(s["done"] for s in summaries) == 240
    launched = state.asked["fan-out"] + state.asked["continue"]
    assert launched >= 5 and state.asked["fan-out"] >= 3  # 240 jobs at 40 a drain, 4 at once
    assert [s for s in summaries if s["stopped"] == "busy"] == []
    assert state.refused == 0
    assert 2 <= sampler.most <= 4


def test_post_drain_answers_202_at_once_and_the_drain_runs_asynchronously(
        standin, database_url, load_function, monkeypatch):
    # API Gateway gives up after 29 s and a drain may run for minutes: the route starts a
    # drain (an asynchronous invoke of the function itself) and answers at once.
    from pgdrain_dev.context import LambdaContext

    _state, port, log = standin
    conn = connect(database_url)
    try:
        conn.run("INSERT INTO jobs (job_type, payload) VALUES ('test-sleep', "
                 "'{\"seconds\": 0.5}')")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "standin")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "standin")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
        monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", f"http://127.0.0.1:{port}")
        app = load_function("drain")
        event = json.loads((ROOT / "events" / "drain_api.json").read_text())
        response = app.lambda_handler(event, LambdaContext("pgdrain-drain"))
        assert response["statusCode"] == 202
        body = json.loads(response["body"])
        assert body["started"] is True and body["request_id"]
        # The API's invocation claimed nothing: the job is drained by the one it started.
        wait_until_drained(conn, 30)
    finally:
        conn.close()
    time.sleep(0.5)
    [record] = [r for r in invocations(log) if "result" in r]
    assert record["result"]["done"] == 1


def test_post_drain_wait_drains_in_the_request_and_answers_the_summary(
        standin, database_url, load_function, monkeypatch):
    from pgdrain_dev.context import LambdaContext

    _state, port, log = standin
    conn = connect(database_url)
    try:
        conn.run("INSERT INTO jobs (job_type) VALUES ('test-noop')")
        monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", f"http://127.0.0.1:{port}")
        app = load_function("drain")
        event = json.loads((ROOT / "events" / "drain_api.json").read_text())
        event["queryStringParameters"] = {"wait": "true"}
        response = app.lambda_handler(event, LambdaContext("pgdrain-drain", timeout_seconds=120))
    finally:
        conn.close()
    assert response["statusCode"] == 200
    assert json.loads(response["body"])["done"] == 1
    assert invocations(log) == []  # nothing was invoked
