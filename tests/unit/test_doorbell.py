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
