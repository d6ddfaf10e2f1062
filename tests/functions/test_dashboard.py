"""The CloudWatch dashboard and alarms watch metrics that exist: the dashboard's body is
built from template.yaml as CloudFormation would (its Fn::Sub), and every pgdrain metric a
widget or an alarm names is one the functions emitted here, in EMF, on their common paths (a
drain that ran jobs, a drain whose database was gone, an enqueue through the API)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from samtranslator.yaml_helper import yaml_parse

import pgdrain
from pgdrain_dev.context import LambdaContext
from tests.support.functions import load_event

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = yaml_parse((ROOT / "template.yaml").read_text())
# What AWS itself publishes for the namespaces the dashboard reads besides pgdrain's.
AWS_METRICS = {"AWS/Lambda": {"Errors", "Throttles", "Duration", "Invocations",
                              "ConcurrentExecutions"},
               "AWS/ApiGateway": {"4XXError", "5XXError", "Count", "Latency",
                                  "IntegrationLatency"}}


def dashboard_body() -> dict:
    """The DashboardBody with its ${...} filled in as CloudFormation's Fn::Sub would."""
    text, variables = TEMPLATE["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    values = {"AWS::Region": "eu-west-1", "AWS::StackName": "pgdrain", "Service": "pgdrain",
              "ApiName": "pgdrain-api", "DrainFunction": "pgdrain-DrainFunction-1",
              "EnqueueFunction": "pgdrain-EnqueueFunction-1"}
    assert set(variables) <= set(values)
    names = set(re.findall(r"\$\{([^}]+)\}", text))
    assert names <= set(values) | {r for r in TEMPLATE["Resources"]}, names
    return json.loads(re.sub(r"\$\{([^}]+)\}", lambda m: values[m.group(1)], text))


def widget_metrics(body: dict) -> set[tuple[str, str]]:
    """(namespace, metric) of every widget's series; "." repeats the one above, "..." the
    whole series but the options."""
    found = set()
    for widget in body["widgets"]:
        previous: list = []
        for series in widget["properties"]["metrics"]:
            if isinstance(series[0], dict) and "expression" in series[0]:
                # SEARCH('{namespace,dimension,...} MetricName="name" ...', ...)
                search = re.search(r"\{([^,}]+)[^}]*\} MetricName=\"(\w+)\"",
                                   series[0]["expression"])
                assert search, series
                found.add((search[1], search[2]))
                continue
            if series[0] == "...":
                series = previous
            labels = [v for v in series if not isinstance(v, dict)]
            labels = [previous[i] if v == "." else v for i, v in enumerate(labels)]
            found.add((labels[0], labels[1]))
            previous = labels
    return found


def alarm_metrics() -> set[tuple[str, str]]:
    found = set()
    for resource in TEMPLATE["Resources"].values():
        if resource["Type"] != "AWS::CloudWatch::Alarm":
            continue
        props = resource["Properties"]
        if "MetricName" in props:
            found.add((props["Namespace"], props["MetricName"]))
        for metric in props.get("Metrics", []):
            if "MetricStat" in metric:
                m = metric["MetricStat"]["Metric"]
                found.add((m["Namespace"], m["MetricName"]))
    return found


def emf_names(output: str) -> set[str]:
    names = set()
    for line in output.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            document = json.loads(line)
            for directive in document["_aws"]["CloudWatchMetrics"]:
                assert directive["Namespace"] == "pgdrain-test"
                names |= {m["Name"] for m in directive["Metrics"]}
    return names


@pytest.fixture
def emitted(load_function, conn, capsys, monkeypatch, database_url):
    """Every metric name the functions emitted on their common paths."""
    enqueue = load_function("enqueue", DRAIN_FUNCTION_NAME="")
    enqueue.lambda_handler(load_event("enqueue_single.json"), LambdaContext())
    pgdrain.enqueue_many(conn, [{"job_type": "test-noop"}, {"job_type": "test-boom"},
                                {"job_type": "test-noop", "queue": "held"}])
    pgdrain.pause(conn, "held")  # its job waits: the per-queue metrics have a queue to show
    drain = load_function("drain")
    drain.lambda_handler(load_event("drain_schedule.json"), LambdaContext())
    drain.CONNECTOR.discard()
    # Every slot taken: the drain returns busy.
    key = pgdrain.store.DRAIN_SLOT_LOCK_KEY
    conn.run("SELECT pg_advisory_lock(:key::int, 0)", key=key)
    try:
        busy = load_function("drain", PGDRAIN_MAX_DRAINS="1")
        assert busy.lambda_handler({}, LambdaContext())["stopped"] == "busy"
        busy.CONNECTOR.discard()
    finally:
        conn.run("SELECT pg_advisory_unlock(:key::int, 0)", key=key)
    monkeypatch.setenv("DATABASE_URL", database_url.replace("/pgdrain_t_", "/missing_"))
    broken = load_function("drain")
    broken.lambda_handler({}, LambdaContext())
    return emf_names(capsys.readouterr().out)


def test_every_widget_and_alarm_reads_a_metric_that_exists(emitted):
    watched = widget_metrics(dashboard_body()) | alarm_metrics()
    assert ("pgdrain", "JobsFailed") in watched and ("pgdrain", "Backlog") in watched
    for namespace, metric in sorted(watched):
        if namespace == "pgdrain":
            assert metric in emitted, f"the dashboard or an alarm reads {metric}, never emitted"
        else:
            assert metric in AWS_METRICS[namespace], (namespace, metric)


def test_the_dashboard_shows_the_drains_scale_out_and_the_api(emitted):
    watched = {metric for _, metric in widget_metrics(dashboard_body())}
    assert {"DrainsStarted", "DrainsBusy", "HandlersAbandoned", "JobsEnqueued",
            "5XXError", "PausedBacklog", "QueueOldestDueAge"} <= watched
