"""The doorbell's own rules: off without a function name, a window between rings, failures
swallowed. The AWS call is botocore's Stubber."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from pgdrain.aws.doorbell import Doorbell
from pgdrain.errors import ConfigError


@pytest.fixture
def client():
    client = boto3.client("lambda", region_name="eu-west-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    with Stubber(client) as stubber:
        yield client, stubber


def test_off_without_a_function_name():
    assert Doorbell(None).ring() == "off"


def test_window_between_rings(client):
    lambda_client, stubber = client
    now = [100.0]
    bell = Doorbell("drain", window_seconds=1.0, client_factory=lambda: lambda_client,
                    clock=lambda: now[0])
    expected = {"FunctionName": "drain", "InvocationType": "Event",
                "Payload": b'{"source": "pgdrain.doorbell"}'}
    stubber.add_response("invoke", {"StatusCode": 202}, expected)
    stubber.add_response("invoke", {"StatusCode": 202}, expected)
    assert bell.ring() == "rung"
    now[0] += 0.5
    assert bell.ring() == "skipped"
    now[0] += 0.6
    assert bell.ring() == "rung"
    stubber.assert_no_pending_responses()


def test_a_failure_is_reported_not_raised(client):
    lambda_client, stubber = client
    stubber.add_client_error("invoke", service_error_code="ResourceNotFoundException",
                             http_status_code=404)
    assert Doorbell("drain", client_factory=lambda: lambda_client).ring() == "failed"


@pytest.mark.parametrize(("raw", "message"), [("soon", "must be a number"),
                                              ("-1", "must be at least 0"),
                                              ("inf", "must be a finite number")])
def test_window_setting_is_validated(raw, message):
    with pytest.raises(ConfigError, match=message):
        Doorbell.from_env({"DRAIN_FUNCTION_NAME": "drain",
                           "PGDRAIN_DOORBELL_WINDOW_SECONDS": raw})


def test_from_env():
    bell = Doorbell.from_env({"DRAIN_FUNCTION_NAME": " drain ",
                              "PGDRAIN_DOORBELL_WINDOW_SECONDS": "2.5"})
    assert (bell.function_name, bell.window_seconds) == ("drain", 2.5)
    assert Doorbell.from_env({}).function_name is None


def test_an_endpoint_that_never_answers_fails_the_ring_after_one_attempt(monkeypatch):
    # A Lambda endpoint that accepts and then says nothing (or is unreachable from a VPC):
    # the ring gives up after one attempt with short timeouts, not botocore's default of
    # three attempts of a minute each, which would outlast the enqueue request itself.
    from pgdrain.aws.doorbell import _lambda_client
    from tests.support.silent import silent_port

    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with silent_port() as (port, accepted):
        monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", f"http://127.0.0.1:{port}")
        assert Doorbell("drain", client_factory=_lambda_client).ring() == "failed"
    assert len(accepted) == 1


def test_a_connection_of_an_unknown_driver_is_not_asked(client, caplog):
    # Whether it has a transaction open cannot be told, so the ring runs nothing on it (no
    # statement that could open a transaction, or take a lock in the caller's), rings once
    # per window, and says why, once.
    lambda_client, stubber = client
    stubber.add_response("invoke", {"StatusCode": 202})

    class Unknown:
        def cursor(self):
            raise AssertionError("the ring ran a statement on a connection it cannot read")

    bell = Doorbell("drain", window_seconds=60, client_factory=lambda: lambda_client)
    with caplog.at_level("WARNING", logger="pgdrain.aws.doorbell"):
        assert bell.ring(Unknown()) == "rung"
        assert bell.ring(Unknown()) == "skipped"
    assert [r.getMessage() for r in caplog.records if "cannot tell" in r.getMessage()] == [
        "doorbell: cannot tell whether the Unknown given to ring(conn) has a transaction "
        "open; it rings without asking the database (pass a pg8000, psycopg 3 or psycopg2 "
        "connection, after the commit)"]
    stubber.assert_no_pending_responses()


def test_a_local_invocation_rings_no_drain_in_aws_unless_a_stand_in_is_named(caplog,
                                                                            monkeypatch):
    # sam local and pgdrain invoke set AWS_SAM_LOCAL beside a function name that only looks
    # real: the doorbell would have invoked it in the shell's region with its credentials.
    from pgdrain.aws import local as local_rule

    monkeypatch.setattr(local_rule, "_said", set())
    local = {"DRAIN_FUNCTION_NAME": "DrainFunction", "AWS_SAM_LOCAL": "true"}
    with caplog.at_level("INFO", logger="pgdrain"):
        assert Doorbell.from_env(local).function_name is None
    assert "local invocation (AWS_SAM_LOCAL): the doorbell starts no drain in AWS" in caplog.text
    standin = {**local, "AWS_ENDPOINT_URL_LAMBDA": "http://127.0.0.1:9"}
    assert Doorbell.from_env(standin).function_name == "DrainFunction"
    assert Doorbell.from_env({"DRAIN_FUNCTION_NAME": "d", "AWS_SAM_LOCAL": "false"}
                             ).function_name == "d"
