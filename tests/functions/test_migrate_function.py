"""The migration custom resource: migrates on Create and Update, answers CloudFormation on
every path (a hung stack waits an hour), and leaves the data alone on Delete."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from pgdrain.db import connect
from pgdrain_dev.context import LambdaContext


class _CloudFormation(BaseHTTPRequestHandler):
    answers: ClassVar[list[dict]] = []

    def do_PUT(self):
        length = int(self.headers["Content-Length"])
        type(self).answers.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def cloudformation():
    _CloudFormation.answers = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CloudFormation)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/response", _CloudFormation.answers
    server.shutdown()
    server.server_close()


def request(kind: str, url: str) -> dict:
    return {"RequestType": kind, "ResponseURL": url,
            "StackId": "arn:aws:cloudformation:eu-west-1:123456789012:stack/pgdrain/1",
            "RequestId": "req-1", "LogicalResourceId": "SchemaMigration",
            "ResourceType": "Custom::PgdrainMigration",
            "ResourceProperties": {"ServiceToken": "arn:...", "LayerVersion": "arn:...:1"}}


def tables(url: str) -> set[str]:
    conn = connect(url)
    try:
        return {r[0] for r in conn.run("SELECT tablename FROM pg_tables "
                                       "WHERE schemaname = 'public'")}
    finally:
        conn.close()


def test_create_migrates_and_answers_success(load_function, empty_database_url,
                                             cloudformation):
    url, answers = cloudformation
    app = load_function("migrate", DATABASE_URL=empty_database_url)
    app.lambda_handler(request("Create", url), LambdaContext("pgdrain-migrate"))
    [answer] = answers
    assert answer["Status"] == "SUCCESS"
    assert answer["Reason"].startswith("applied 0001_create_jobs")
    assert (answer["PhysicalResourceId"], answer["LogicalResourceId"], answer["RequestId"]) == (
        "pgdrain-schema", "SchemaMigration", "req-1")
    assert {"jobs", "pgdrain_migrations"} <= tables(empty_database_url)

    app.lambda_handler({**request("Update", url), "PhysicalResourceId": "pgdrain-schema"},
                       LambdaContext("pgdrain-migrate"))
    assert answers[1]["Status"] == "SUCCESS"
    assert answers[1]["Reason"].startswith("schema is up to date")


def test_delete_keeps_the_data(load_function, database_url, conn, cloudformation):
    url, answers = cloudformation
    conn.run("INSERT INTO jobs (job_type) VALUES ('kept')")
    app = load_function("migrate")
    app.lambda_handler({**request("Delete", url), "PhysicalResourceId": "pgdrain-schema"},
                       LambdaContext("pgdrain-migrate"))
    assert answers[0]["Status"] == "SUCCESS"
    assert conn.run("SELECT job_type FROM jobs") == [["kept"]]


def test_a_failure_answers_failed_without_the_password(load_function, cloudformation):
    url, answers = cloudformation
    app = load_function("migrate",
                        DATABASE_URL="postgresql://app:Hunter2-secret@127.0.0.1:1/db"
                                     "?sslmode=disable")
    app.lambda_handler(request("Create", url), LambdaContext("pgdrain-migrate"))
    [answer] = answers
    assert answer["Status"] == "FAILED"
    assert answer["Reason"].startswith("pgdrain migrate failed: DatabaseConnectError")
    assert "Hunter2-secret" not in json.dumps(answer)


@pytest.fixture
def silent_database():
    from tests.support.silent import silent_port

    with silent_port() as (port, _):
        yield port


def test_a_database_that_never_answers_gets_failed_before_the_timeout(
        load_function, cloudformation, silent_database):
    url, answers = cloudformation
    app = load_function("migrate", DATABASE_URL=f"postgresql://app:pw@127.0.0.1:{silent_database}"
                                                "/db?sslmode=disable")
    context = LambdaContext("pgdrain-migrate", timeout_seconds=app.ANSWER_SECONDS + 3)
    app.lambda_handler(request("Create", url), context)
    [answer] = answers
    assert answer["Status"] == "FAILED"
    assert "DatabaseConnectError" in answer["Reason"] and "timed out" in answer["Reason"]
    assert context.get_remaining_time_in_millis() > 0  # answered within the function's timeout


def test_the_library_logs_through_the_functions_json_logger(load_function, cloudformation,
                                                            empty_database_url, capsys):
    import logging

    url, _ = cloudformation
    app = load_function("migrate", DATABASE_URL=empty_database_url)
    capsys.readouterr()
    context = LambdaContext("pgdrain-migrate")
    original = app.handle

    def handle_and_log(event, ctx, logger):
        answer = original(event, ctx, logger)
        logging.getLogger("pgdrain.migrate").warning("a line from the library")
        return answer

    app.handle = handle_and_log
    app.lambda_handler(request("Create", url), context)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if line.startswith("{")]
    [line] = [r for r in lines if r.get("message") == "a line from the library"]
    assert (line["level"], line["name"], line["correlation_id"]) == (
        "WARNING", "pgdrain.migrate", context.aws_request_id)
