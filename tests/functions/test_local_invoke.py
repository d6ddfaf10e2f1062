"""``pgdrain invoke``: the template's functions run locally as ``sam local invoke`` runs them,
through the real runtime interface client, against a real PostgreSQL."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pgdrain
from pgdrain.cli import main
from pgdrain_dev.local_invoke import (
    load_template,
    parse_parameter_overrides,
    resolve_function,
)

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"

# A template of small functions that report what they see: its context, environment, path.
ECHO_TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Parameters:
  Greeting: {Type: String, Default: hello}
  EchoTimeout: {Type: Number, Default: 4}
Conditions:
  IsHello: !Equals [!Ref Greeting, hello]
Globals:
  Function:
    Runtime: python3.13
    MemorySize: 192
    Layers: [!Ref SharedLayer]
    Environment:
      Variables:
        GREETING: !Ref Greeting
        SERVICE: !Ref AWS::StackName
        OVERRIDDEN: global
Resources:
  SharedLayer:
    Type: AWS::Serverless::LayerVersion
    Properties: {ContentUri: layer/}
  EchoFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: echo/
      Handler: app.handler
      Timeout: !Ref EchoTimeout
      Environment:
        Variables:
          OVERRIDDEN: function
          MODE: !If [IsHello, friendly, formal]
          PEER: !Ref BoomFunction
          PEER_ARN: !GetAtt BoomFunction.Arn
          NAME: !Sub "${AWS::StackName}-${Greeting}"
          IMPORTED: !ImportValue somewhere
  BoomFunction:
    Type: AWS::Serverless::Function
    Properties: {CodeUri: echo/, Handler: app.boom}
  SleepyFunction:
    Type: AWS::Serverless::Function
    Properties: {CodeUri: echo/, Handler: app.sleepy, Timeout: 1}
  MissingFunction:
    Type: AWS::Serverless::Function
    Properties: {CodeUri: echo/, Handler: nothere.handler}
"""

ECHO_APP = """\
import os
import sys
import time

import whoami
import layer_only

print("init: echo loaded")


def handler(event, context):
    print("a log line on stdout")
    print("a log line on stderr", file=sys.stderr)
    names = ["GREETING", "SERVICE", "OVERRIDDEN", "MODE", "PEER", "PEER_ARN", "NAME",
             "IMPORTED", "AWS_LAMBDA_FUNCTION_TIMEOUT", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
             "LAMBDA_TASK_ROOT", "_HANDLER", "AWS_REGION", "DATABASE_URL"]
    return {"remaining_ms": context.get_remaining_time_in_millis(),
            "function_name": context.function_name,
            "memory": str(context.memory_limit_in_mb),
            "arn": context.invoked_function_arn,
            "request_id": context.aws_request_id,
            "event": event, "cwd": os.getcwd(),
            "whoami": whoami.WHERE, "layer_only": layer_only.WHERE,
            "env": {name: os.environ.get(name) for name in names}}


def boom(event, context):
    raise ValueError(f"boom: {event.get('why')}")


def sleepy(event, context):
    time.sleep(30)
"""


@pytest.fixture
def echo_template(tmp_path: Path) -> Path:
    (tmp_path / "echo").mkdir()
    (tmp_path / "echo" / "app.py").write_text(ECHO_APP)
    (tmp_path / "echo" / "whoami.py").write_text('WHERE = "code"\n')
    (tmp_path / "layer").mkdir()
    (tmp_path / "layer" / "whoami.py").write_text('WHERE = "layer"\n')  # shadowed by the code
    (tmp_path / "layer" / "layer_only.py").write_text('WHERE = "layer"\n')
    template = tmp_path / "template.yaml"
    template.write_text(ECHO_TEMPLATE)
    return template


def invoke(capfd, *args: str) -> tuple[int, str, str]:
    """``pgdrain invoke ARGS`` in this process: (exit status, stdout, stderr)."""
    status = main(["invoke", *args])
    out, err = capfd.readouterr()
    return status, out, err


def the_json(stdout: str) -> dict:
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout  # sam prints the response on one line
    return json.loads(lines[0])


def env_vars_file(tmp_path: Path, content: dict) -> str:
    path = tmp_path / "env.json"
    path.write_text(json.dumps(content))
    return str(path)


# --- the template's environment, as sam local resolves it ----------------------------------------


def test_environment_is_resolved_as_sam_local_does():
    template = load_template(ROOT / "template.yaml")
    env_vars = {"Parameters": {"DATABASE_URL": "postgresql://u@db:5432/app",
                               "PGDRAIN_MAX_JOBS": 5, "NOT_DECLARED": "x"},
                "EnqueueFunction": {"PGDRAIN_MAX_JOBS": 6, "DRAIN_FUNCTION_NAME": ""},
                "DrainFunction": {"PGDRAIN_BATCH_SIZE": 99}}
    shell = {"PATH": "/usr/bin", "POWERTOOLS_LOG_LEVEL": "DEBUG", "AWS_REGION": "eu-west-1",
             "UNDECLARED_IN_SHELL": "x"}
    enqueue = resolve_function(template, ROOT, "EnqueueFunction", env_vars=env_vars,
                               shell_env=shell)
    env = enqueue.variables
    # Globals and the function's own, every value a string.
    assert env["DATABASE_URL"] == "postgresql://u@db:5432/app"  # the file's Parameters
    assert env["PGDRAIN_MAX_JOBS"] == "6"  # the function's entry beats Parameters
    assert env["PGDRAIN_BATCH_SIZE"] == "100"  # another function's entry does not apply
    assert env["PGDRAIN_LEASE_SECONDS"] == ""  # Fn::If on the template's condition: unset
    assert env["DRAIN_FUNCTION_NAME"] == ""  # declared by the function, overridden
    assert env["POWERTOOLS_LOG_LEVEL"] == "DEBUG"  # the shell beats the template
    assert env["DB_PORT"] == "5432"  # a Number parameter's Default
    assert env["DB_IAM_AUTH"] == "false"
    assert env["DB_SECRET_ARN"] == ""
    assert env["PGDRAIN_JOBS"] == "jobs"
    assert env["POWERTOOLS_SERVICE_NAME"] == "local"  # Ref AWS::StackName, sam's value
    assert "NOT_DECLARED" not in env and "UNDECLARED_IN_SHELL" not in env
    assert (enqueue.timeout, enqueue.memory, enqueue.handler) == (28, 256, "app.lambda_handler")
    assert enqueue.code_dir == ROOT / "functions" / "enqueue"
    assert enqueue.layer_dirs == [ROOT / "layers" / "pgdrain"]
    full = enqueue.environment()
    assert full["AWS_LAMBDA_FUNCTION_NAME"] == "EnqueueFunction"
    assert full["AWS_LAMBDA_FUNCTION_TIMEOUT"] == "28"
    assert full["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "256"
    assert full["_HANDLER"] == "app.lambda_handler"
    assert full["LAMBDA_TASK_ROOT"] == str(ROOT / "functions" / "enqueue")
    assert full["AWS_REGION"] == full["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert full["AWS_ACCESS_KEY_ID"] == "defaultkey"  # sam's placeholders without credentials
    assert "UNDECLARED_IN_SHELL" not in full

    # Ref to another resource gives its logical id, as in sam local; Timeout is a parameter's.
    plain = resolve_function(template, ROOT, "EnqueueFunction", shell_env={})
    assert plain.variables["DRAIN_FUNCTION_NAME"] == "DrainFunction"
    assert plain.variables["DATABASE_URL"] == ""
    assert plain.region == "us-east-1"
    drain = resolve_function(template, ROOT, "DrainFunction", env_vars=env_vars, shell_env={})
    assert drain.timeout == 120
    assert drain.variables["PGDRAIN_BATCH_SIZE"] == "99"
    assert "DRAIN_FUNCTION_NAME" not in drain.variables
    shorter = resolve_function(template, ROOT, "DrainFunction", shell_env={},
                               parameter_overrides={"DrainTimeout": "30", "LogLevel": "ERROR"})
    assert shorter.timeout == 30
    assert shorter.variables["POWERTOOLS_LOG_LEVEL"] == "ERROR"
    assert resolve_function(template, ROOT, "MigrateFunction", shell_env={}).timeout == 300


def test_parameter_overrides_take_both_of_sams_forms():
    assert parse_parameter_overrides(
        ["DrainTimeout=30 'LogLevel=DEBUG'",
         "ParameterKey=DatabaseUrl,ParameterValue=postgresql://a@b/c?x=1"]) == {
        "DrainTimeout": "30", "LogLevel": "DEBUG", "DatabaseUrl": "postgresql://a@b/c?x=1"}


# --- the template's functions against the test's database ----------------------------------------


def test_drain_function_drains_the_jobs(database_url, conn, sql, tmp_path):
    """The done criterion, run as a user runs it: the ``pgdrain`` command in its own process."""
    # The template's default JobModules: jobs, whose example echoes its payload.
    pgdrain.enqueue_many(conn, [{"job_type": "echo", "payload": {"to": "a@example.com"}},
                                {"job_type": "echo", "payload": {"to": "b@example.com"}}])
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    result = subprocess.run(
        [sys.executable, "-m", "pgdrain", "invoke", "DrainFunction",
         "-e", "events/drain_schedule.json",
         "--env-vars", env_vars_file(tmp_path, {"Parameters": {"DATABASE_URL": database_url}})],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    summary = the_json(result.stdout)
    assert (summary["claimed"], summary["done"], summary["failed"]) == (2, 2, 0)
    # Done rows are not kept, as shipped, except a job's with a result, until the next purge.
    rows = sql("SELECT status, result FROM jobs")
    assert sorted((r["status"], r["result"]["to"]) for r in rows) == [
        ("done", "a@example.com"), ("done", "b@example.com")]
    assert "database: DATABASE_URL (postgres@" in result.stderr
    assert "START RequestId: " in result.stderr and "REPORT RequestId: " in result.stderr
    assert '"message":"drain finished"' in result.stderr  # the function's logs go to stderr


def test_enqueue_function_answers_201_and_inserts_the_job(database_url, sql, tmp_path, capfd):
    env_vars = env_vars_file(tmp_path, {"Parameters": {"DATABASE_URL": database_url},
                                        "EnqueueFunction": {"DRAIN_FUNCTION_NAME": ""}})
    status, out, _ = invoke(capfd, "EnqueueFunction", "-e", str(EVENTS / "enqueue_single.json"),
                            "--env-vars", env_vars, "--template", str(ROOT / "template.yaml"))
    assert status == 0
    response = the_json(out)
    assert response["statusCode"] == 201
    ids = json.loads(response["body"])["ids"]
    rows = sql("SELECT id, job_type, payload, status FROM jobs")
    assert rows == [{"id": ids[0], "job_type": "echo",
                     "payload": {"to": "sarah@example.com"}, "status": "pending"}]


# --- context, environment, import path, errors and timeouts --------------------------------------


@pytest.mark.parametrize("client", ["awslambdaric", "builtin"])
def test_context_deadline_environment_and_path_follow_the_template(echo_template, capfd, client,
                                                                   monkeypatch):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    started = time.monotonic()
    status, out, err = invoke(capfd, "EchoFunction", "--template", str(echo_template),
                              "--runtime-client", client)
    assert status == 0, err
    seen = the_json(out)
    assert 3000 < seen["remaining_ms"] <= 4000  # Timeout: !Ref EchoTimeout, default 4
    assert time.monotonic() - started < 3.5  # and the runtime was stopped after the response
    assert seen["function_name"] == "EchoFunction"
    assert seen["memory"] == "192"
    assert seen["arn"] == "arn:aws:lambda:us-east-1:123456789012:function:EchoFunction"
    assert seen["event"] == {}
    code = str(echo_template.parent / "echo")
    assert seen["cwd"] == code
    assert (seen["whoami"], seen["layer_only"]) == ("code", "layer")  # /var/task, then layers
    assert seen["env"] == {
        "GREETING": "hello", "SERVICE": "local", "OVERRIDDEN": "function", "MODE": "friendly",
        "PEER": "BoomFunction", "NAME": "local-hello", "IMPORTED": "",
        "PEER_ARN": "arn:aws:lambda:us-east-1:123456789012:function:BoomFunction",
        "AWS_LAMBDA_FUNCTION_TIMEOUT": "4", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "192",
        "LAMBDA_TASK_ROOT": code, "_HANDLER": "app.handler", "AWS_REGION": "us-east-1",
        "DATABASE_URL": None}
    # The function's output is its log, on stderr; the response alone is on stdout.
    for line in ("init: echo loaded", "a log line on stdout", "a log line on stderr",
                 f"START RequestId: {seen['request_id']}", f"END RequestId: {seen['request_id']}",
                 "Memory Size: 192 MB"):
        assert line in err
    assert "log line" not in out


def test_parameter_overrides_and_an_event_on_stdin(echo_template, capfd, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b'{"hello": "world"}')))
    status, out, err = invoke(capfd, "EchoFunction", "-e", "-", "--template", str(echo_template),
                              "--parameter-overrides", "EchoTimeout=7 Greeting=hi")
    assert status == 0, err
    seen = the_json(out)
    assert seen["event"] == {"hello": "world"}
    assert 6000 < seen["remaining_ms"] <= 7000
    assert (seen["env"]["MODE"], seen["env"]["NAME"]) == ("formal", "local-hi")


@pytest.mark.parametrize("client", ["awslambdaric", "builtin"])
def test_a_function_error_is_lambdas_error_object_and_exits_1(echo_template, tmp_path, capfd,
                                                              client):
    event = tmp_path / "why.json"
    event.write_text('{"why": "no reason"}')
    status, out, err = invoke(capfd, "BoomFunction", "-e", str(event), "--template",
                              str(echo_template), "--runtime-client", client)
    assert status == 1
    error = the_json(out)
    assert error["errorType"] == "ValueError"
    assert error["errorMessage"] == "boom: no reason"
    assert error["requestId"]
    assert any("app.py" in frame and "boom" in frame for frame in error["stackTrace"])
    assert "[ERROR] ValueError: boom: no reason" in err


def test_an_import_error_is_lambdas_init_error(echo_template, capfd):
    status, out, _ = invoke(capfd, "MissingFunction", "--template", str(echo_template))
    assert status == 1
    error = the_json(out)
    assert error["errorType"] == "Runtime.ImportModuleError"
    assert "Unable to import module 'nothere'" in error["errorMessage"]


def test_the_function_is_killed_at_its_timeout(echo_template, capfd):
    started = time.monotonic()
    status, out, err = invoke(capfd, "SleepyFunction", "--template", str(echo_template))
    assert status == 1
    assert time.monotonic() - started < 5
    error = the_json(out)
    assert error["errorType"] == "Sandbox.Timedout"
    assert error["errorMessage"].endswith("Error: Task timed out after 1.00 seconds")
    assert "Task timed out after 1.00 seconds" in err


# --- bad input: exit 2 with a clear message -----------------------------------------------------


def test_unknown_function_lists_the_functions(capfd):
    status, out, err = invoke(capfd, "NoSuchFunction", "--template", str(ROOT / "template.yaml"))
    assert (status, out) == (2, "")
    assert "no function 'NoSuchFunction'" in err
    assert "DrainFunction, EnqueueFunction, MigrateFunction" in err


@pytest.mark.parametrize(("content", "message"), [
    (None, "does not exist"),
    ("{not json", "is not valid JSON"),
])
def test_a_bad_event_file_is_refused(tmp_path, capfd, content, message):
    event = tmp_path / "event.json"
    if content is not None:
        event.write_text(content)
    status, out, err = invoke(capfd, "DrainFunction", "-e", str(event),
                              "--template", str(ROOT / "template.yaml"))
    assert (status, out) == (2, "")
    assert message in err


def test_a_bad_env_vars_file_is_refused(tmp_path, capfd):
    status, _, err = invoke(capfd, "DrainFunction",
                            "--env-vars", env_vars_file(tmp_path, {"DATABASE_URL": "x"}),
                            "--template", str(ROOT / "template.yaml"))
    assert status == 2
    assert "CloudFormation parameter file format" in err


# --- no configuration at all: the embedded PostgreSQL ---------------------------------------------


@pytest.mark.skipif(bool(os.environ.get("DATABASE_URL")),
                    reason="starts the embedded PostgreSQL; this run uses DATABASE_URL")
def test_without_a_database_the_embedded_one_is_started(tmp_path, capfd, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    pgdata = tmp_path / "pgdata"
    monkeypatch.setenv("PGDRAIN_LOCAL_PGDATA", str(pgdata))
    no_doorbell = env_vars_file(tmp_path, {"EnqueueFunction": {"DRAIN_FUNCTION_NAME": ""}})
    template = str(ROOT / "template.yaml")
    status, out, err = invoke(capfd, "EnqueueFunction", "-e", str(EVENTS / "enqueue_single.json"),
                              "--env-vars", no_doorbell, "--template", template)
    assert status == 0, err
    assert the_json(out)["statusCode"] == 201
    assert f"the embedded PostgreSQL in {pgdata} (applied 0001_create_jobs" in err
    # The data stays for the next invocation, which drains the job.
    status, out, err = invoke(capfd, "DrainFunction", "-e", str(EVENTS / "drain_schedule.json"),
                              "--template", template)
    assert status == 0, err
    assert "schema up to date" in err
    summary = the_json(out)
    assert (summary["claimed"], summary["done"]) == (1, 1)
