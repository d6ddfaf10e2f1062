"""template.yaml as a deploy meets it: asynchronous invokes neither retried nor kept, a
migration that answers CloudFormation in bounded time, no reserved concurrency by default,
least privilege with managed policies only when used, parameters checked by rules, logs kept
for a set time, a regional API with access logs and a 5XX alarm."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_template import ROOT, TEMPLATE, translated

RESOURCES = TEMPLATE["Resources"]
PARAMETERS = TEMPLATE["Parameters"]


def test_asynchronous_invokes_are_never_retried_nor_kept_waiting():
    # The drain (schedule, doorbell, continuation, fan-out, POST /drain) and the migration
    # (CloudFormation invokes custom resources asynchronously).
    for name in ("DrainFunction", "MigrateFunction"):
        config = RESOURCES[name]["Properties"]["EventInvokeConfig"]
        assert config["MaximumRetryAttempts"] == 0, name
        assert config["MaximumEventAgeInSeconds"] <= 300, name
    output = translated()
    configs = [r for r in output["Resources"].values()
               if r["Type"] == "AWS::Lambda::EventInvokeConfig"]
    assert len(configs) == 2
    assert all(c["Properties"]["MaximumRetryAttempts"] == 0 for c in configs)


def test_the_migration_answers_before_cloudformation_gives_up():
    timeout = RESOURCES["MigrateFunction"]["Properties"]["Timeout"]
    service_timeout = RESOURCES["SchemaMigration"]["Properties"]["ServiceTimeout"]
    assert timeout < service_timeout <= timeout + 120  # minutes, not CloudFormation's hour


def test_no_concurrency_is_reserved_by_default():
    # Small accounts cannot reserve any (AWS keeps 100 unreserved); MaxDrains caps drains.
    assert PARAMETERS["DrainReservedConcurrency"]["Default"] == 0
    assert PARAMETERS["EnqueueReservedConcurrency"]["Default"] == 0
    functions = translated()["Resources"]
    for name, parameter in (("DrainFunction", "DrainReservedConcurrency"),
                            ("EnqueueFunction", "EnqueueReservedConcurrency")):
        reserved = functions[name]["Properties"]["ReservedConcurrentExecutions"]
        assert reserved["Fn::If"][1] == {"Ref": parameter}
        assert reserved["Fn::If"][2] == {"Ref": "AWS::NoValue"}


@pytest.mark.parametrize("function", ["DrainFunction", "EnqueueFunction", "MigrateFunction"])
def test_managed_policies_are_attached_only_when_used(function):
    role = translated()["Resources"][f"{function}Role"]["Properties"]
    conditions = {}
    for arn in role["ManagedPolicyArns"]:
        condition, policy, otherwise = arn["Fn::If"]
        assert otherwise == {"Ref": "AWS::NoValue"}
        conditions[policy["Fn::Sub"].rsplit("/", 1)[1]] = condition
    assert conditions == {"AWSXrayWriteOnlyAccess": "HasTracing",
                          "AWSLambdaVPCAccessExecutionRole": "HasVpc"}
    assert PARAMETERS["Tracing"]["Default"] == "false"


def test_the_drain_invokes_only_itself():
    policy = RESOURCES["DrainInvokesItself"]["Properties"]
    [statement] = policy["PolicyDocument"]["Statement"]
    assert (statement["Action"], statement["Resource"]) == (
        "lambda:InvokeFunction", {"Fn::GetAtt": ["DrainFunction", "Arn"]})
    assert policy["Roles"] == [{"Ref": "DrainFunctionRole"}]


# --- the rules, evaluated as CloudFormation evaluates them --------------------------------------

def evaluate(expression: Any, values: dict[str, Any]) -> Any:
    """The rule functions template.yaml uses, over parameter values (lists for
    CommaDelimitedList)."""
    if not isinstance(expression, dict):
        return expression
    [(function, arguments)] = expression.items()
    if function == "Ref":
        return values[arguments]
    args = [evaluate(a, values) for a in arguments] if isinstance(arguments, list) \
        else evaluate(arguments, values)
    if function == "Fn::Equals":
        return str(args[0]) == str(args[1])
    if function == "Fn::Not":
        return not args[0]
    if function == "Fn::Or":
        return any(args)
    if function == "Fn::And":
        return all(args)
    if function == "Fn::Contains":
        return args[1] in args[0]
    if function == "Fn::EachMemberEquals":
        return all(member == args[1] for member in args[0])
    raise AssertionError(f"a rule uses {function}, which this test does not know")


def refusals(**given: Any) -> list[str]:
    values = {name: p.get("Default", "") for name, p in PARAMETERS.items()}
    for name, p in PARAMETERS.items():
        if p["Type"] == "CommaDelimitedList":
            values[name] = values[name].split(",")
    values.update(given)
    failed = []
    for rule in TEMPLATE["Rules"].values():
        if "RuleCondition" in rule and not evaluate(rule["RuleCondition"], values):
            continue
        failed += [a["AssertDescription"] for a in rule["Assertions"]
                   if not evaluate(a["Assert"], values)]
    return failed


SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:db-AbCdEf"


@pytest.mark.parametrize("given", [
    {"DatabaseSecretArn": SECRET},
    {"DatabaseUrl": "postgresql://u:p@db.example.com/app"},
    {"DatabaseIamAuth": "true", "DatabaseHost": "db.x.eu-west-1.rds.amazonaws.com",
     "DatabaseUser": "app", "DatabaseName": "app", "DatabaseResourceId": "db-ABC"},
    {"DatabaseSecretArn": SECRET, "SubnetIds": ["subnet-1", "subnet-2"],
     "SecurityGroupIds": ["sg-1"]},
    {"DatabaseSecretArn": SECRET, "DatabaseSslMode": "require", "AllowUnverifiedTls": "true"},
], ids=["secret", "url", "iam", "vpc", "unverified-on-purpose"])
def test_a_complete_stack_passes_every_rule(given):
    assert refusals(**given) == []


@pytest.mark.parametrize(("given", "words"), [
    ({}, "Say how to reach the database"),
    ({"DatabaseIamAuth": "true", "DatabaseUser": "app"}, "DatabaseIamAuth=true needs"),
    ({"DatabaseSecretArn": SECRET, "SubnetIds": ["subnet-1"]}, "SubnetIds need SecurityGroupIds"),
    ({"DatabaseSecretArn": SECRET, "SecurityGroupIds": ["sg-1"]},
     "SecurityGroupIds need SubnetIds"),
    ({"DatabaseSecretArn": SECRET, "DatabaseSslMode": "require"}, "must verify the server"),
    ({"DatabaseSecretArn": SECRET, "DatabaseSslMode": "disable"}, "must verify the server"),
    ({"DatabaseSecretArn": SECRET, "ApiAuthorizer": "NONE"}, "an API without auth is refused"),
], ids=["no-database", "half-iam", "subnets-only", "groups-only", "require", "disable",
        "no-auth"])
def test_a_broken_stack_is_refused_at_deploy(given, words):
    [refusal] = refusals(**given)
    assert words in refusal


# --- logs, the API, alarms ------------------------------------------------------------------

def test_every_function_logs_to_a_group_with_a_retention():
    functions = {n for n, r in RESOURCES.items() if r["Type"] == "AWS::Serverless::Function"}
    groups = {n: r for n, r in RESOURCES.items() if r["Type"] == "AWS::Logs::LogGroup"}
    for name in functions:
        group = RESOURCES[name]["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        assert groups[group]["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    assert groups["ApiAccessLogs"]["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    assert PARAMETERS["LogRetentionDays"]["Default"] == 30


def test_the_api_is_regional_with_access_logs_people_can_query():
    output = translated()
    [api] = [r for r in output["Resources"].values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    assert api["Properties"]["EndpointConfiguration"] == {"Types": ["REGIONAL"]}
    [stage] = [r for r in output["Resources"].values() if r["Type"] == "AWS::ApiGateway::Stage"]
    fields = json.loads(stage["Properties"]["AccessLogSetting"]["Format"])
    assert {"requestId", "httpMethod", "resourcePath", "status", "responseLatency",
            "caller", "ip"} <= set(fields)
    assert fields["responseLatency"] == "$context.responseLatency"


def test_enqueue_5xx_raises_an_alarm_beside_the_dead_letter_one():
    alarm = RESOURCES["Enqueue5xxAlarm"]["Properties"]
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/ApiGateway", "5XXError")
    dimensions = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
    assert (dimensions["Resource"], dimensions["Method"], dimensions["Stage"]) == (
        "/jobs", "POST", "v1")
    api_name = RESOURCES["PgdrainApi"]["Properties"]["Name"]
    assert dimensions["ApiName"] == api_name
    assert RESOURCES["DeadLetteredJobsAlarm"]["Condition"] == RESOURCES["Enqueue5xxAlarm"][
        "Condition"]


def test_the_schedule_event_file_names_the_rule_the_template_creates():
    schedule = RESOURCES["DrainFunction"]["Properties"]["Events"]["Schedule"]["Properties"]
    rule_name = schedule["Name"]["Fn::Sub"].replace("${AWS::StackName}", "pgdrain")
    event = json.loads((ROOT / "events" / "drain_schedule.json").read_text())
    assert event["resources"] == [
        f"arn:aws:events:{event['region']}:{event['account']}:rule/{rule_name}"]


def test_the_local_env_file_sets_only_variables_the_template_declares():
    # sam local invoke --env-vars ignores a variable the template does not declare.
    env = json.loads((ROOT / "events" / "env.json.example").read_text())
    declared = set(TEMPLATE["Globals"]["Function"]["Environment"]["Variables"])
    for name, variables in env.items():
        function = {} if name == "Parameters" else RESOURCES[name]["Properties"]
        own = set(function.get("Environment", {}).get("Variables", {}))
        assert set(variables) <= declared | own, name
    assert "host.docker.internal" in env["Parameters"]["DATABASE_URL"]
    assert "sslmode=disable" in env["Parameters"]["DATABASE_URL"]


@pytest.mark.parametrize(("name", "kind"), [
    ("drain_schedule.json", "schedule"), ("drain_api.json", "api"), ("drain_direct.json", "direct"),
])
def test_the_drain_events_parse_as_the_triggers_they_stand_for(name, kind):
    from pgdrain.aws.drain_function import event_kind

    event = json.loads((ROOT / "events" / name).read_text())
    assert event_kind(event) == kind
    if kind == "api":
        api = RESOURCES["DrainFunction"]["Properties"]["Events"]["DrainNow"]["Properties"]
        assert (event["httpMethod"], event["resource"]) == (api["Method"].upper(), api["Path"])


def test_the_architecture_is_one_parameter():
    output = translated(Architecture="x86_64")
    functions = [r for r in output["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    assert all(f["Properties"]["Architectures"] == [{"Ref": "Architecture"}] for f in functions)


def test_powertools_comes_from_the_stacks_layer_or_from_awss_managed_one():
    layers = TEMPLATE["Globals"]["Function"]["Layers"]
    assert layers[0] == {"Ref": "PgdrainLayer"}
    condition, managed, bundled = layers[1]["Fn::If"]
    assert condition == "UsesManagedPowertools" and bundled == {"Ref": "PowertoolsLayer"}
    assert managed["Fn::Sub"].endswith(
        ":017000801446:layer:AWSLambdaPowertoolsPythonV3-python313-${Architecture}"
        ":${PowertoolsLayerVersion}")
    assert RESOURCES["PowertoolsLayer"]["Condition"] == "BundlesPowertools"
    assert PARAMETERS["PowertoolsLayerVersion"]["Default"] == 0
    # The library's own layer holds no Powertools: its requirements do not name it.
    own = (ROOT / "layers" / "pgdrain" / "requirements.txt").read_text().splitlines()
    assert not [line for line in own if "powertools" in line.lower() and "==" in line]


def _stage(output: dict) -> dict:
    [stage] = [r for r in output["Resources"].values() if r["Type"] == "AWS::ApiGateway::Stage"]
    return stage


def test_a_fresh_account_gets_api_gateways_logging_role_before_the_stage():
    """Access logs need the account's CloudWatch role: by default the stack sets one, and the
    stage (which fails without it) waits for it; both outlive the stack."""
    assert PARAMETERS["ApiLoggingRole"]["Default"] == "create"
    assert TEMPLATE["Conditions"]["CreatesApiLoggingRole"] == {
        "Fn::Equals": [{"Ref": "ApiLoggingRole"}, "create"]}
    account, role = RESOURCES["ApiGatewayAccount"], RESOURCES["ApiGatewayLoggingRole"]
    for resource in (account, role):
        assert resource["Condition"] == "CreatesApiLoggingRole"
        assert resource["DeletionPolicy"] == resource["UpdateReplacePolicy"] == "Retain"
    assert account["Properties"]["CloudWatchRoleArn"] == {
        "Fn::GetAtt": ["ApiGatewayLoggingRole", "Arn"]}
    [trust] = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "apigateway.amazonaws.com"}
    assert role["Properties"]["ManagedPolicyArns"] == [{"Fn::Sub": (
        "arn:${AWS::Partition}:iam::aws:policy/service-role/"
        "AmazonAPIGatewayPushToCloudWatchLogs")}]
    # The stage's dependency on the account setting, in SAM's output: a Ref under the same
    # condition (a DependsOn on a resource that may not exist fails the template).
    tags = _stage(translated())["Properties"]["Tags"]
    assert {"Key": "pgdrain:api-logging-role", "Value": {"Fn::If": [
        "CreatesApiLoggingRole", {"Ref": "ApiGatewayAccount"}, "exists"]}} in tags
    assert "ApiLoggingRole" in (ROOT / "docs" / "deploy.md").read_text()


# --- parameters checked by their patterns, as CloudFormation checks them -------------------

SECRET_NAME_ONLY = "pgdrain/db"
GOOD_AND_BAD = {
    "DatabaseSecretArn": ([SECRET, "", "arn:aws-us-gov:secretsmanager:us-gov-west-1:"
                                       "123456789012:secret:db"],
                          [SECRET_NAME_ONLY, "arn:aws:s3:::bucket", " " + SECRET]),
    "MigrationSecretArn": ([SECRET, ""], [SECRET_NAME_ONLY]),
    "SecretKmsKeyArn": (["", "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd"],
                        ["alias/aws/secretsmanager", "1234abcd"]),
    "DatabaseHost": (["db.x.eu-west-1.rds.amazonaws.com", ""],
                     ["db.example.com:5432", "postgresql://db"]),
    "DatabaseName": (["app", ""], ["my db", "app?x=1"]),
    "DatabaseUser": (["pgdrain_app", ""], ["app user", "a@b"]),
    "DatabaseResourceId": (["db-ABCDEFGHIJ", "cluster-XYZ123", "prx-0abc", ""],
                           ["mydb", "arn:aws:rds:eu-west-1:123456789012:db:mydb"]),
    "DatabaseUrl": (["", "postgresql://u:p@h/d", "postgres://h/d"], ["mysql://h/d", "h:5432"]),
    "DatabaseSslRootCert": (["", "/opt/python/ca.pem"], ["ca.pem"]),
    "JobModules": (["jobs", "jobs,pgdrain_jobs.webhook", "my_app.jobs"],
                   ["", "jobs, other", "jobs/", "1jobs"]),
    "DrainSchedule": (["rate(1 minute)", "cron(0/5 * * * ? *)"], ["every minute", ""]),
    "AlarmEmail": (["", "ops@example.com"], ["ops", "ops@example"]),
    "AlarmTopicArn": (["", "arn:aws:sns:eu-west-1:123456789012:alarms"], ["alarms"]),
}


@pytest.mark.parametrize("name", GOOD_AND_BAD)
def test_a_parameter_cloudformation_would_turn_into_a_broken_stack_is_refused(name):
    """AllowedPattern: the whole value must match (CloudFormation's rule), and the refusal
    says what the value should look like."""
    import re

    parameter = PARAMETERS[name]
    pattern = re.compile(parameter["AllowedPattern"])
    good, bad = GOOD_AND_BAD[name]
    assert all(pattern.fullmatch(value) for value in good), name
    assert not [value for value in bad if pattern.fullmatch(value)], name
    assert pattern.fullmatch(str(parameter["Default"])), "the default must pass"
    assert parameter["ConstraintDescription"]


def _policies(role: str) -> dict[str, Any]:
    found = {}
    for policy in RESOURCES[role]["Properties"]["Policies"]:
        if "Fn::If" in policy:
            condition, policy, _ = policy["Fn::If"]
            found[policy["PolicyName"]] = (condition, policy["PolicyDocument"]["Statement"])
    return found


@pytest.mark.parametrize("role", ["DrainFunctionRole", "EnqueueFunctionRole",
                                  "MigrateFunctionRole"])
def test_a_secret_given_without_its_suffix_and_one_under_a_kms_key_can_be_read(role):
    policies = _policies(role)
    for name in ("database-secret", "function-secret"):
        if name in policies:
            [statement] = policies[name][1]
            arn = statement["Resource"][0]["Ref"]
            assert statement["Resource"] == [{"Ref": arn}, {"Fn::Sub": f"${{{arn}}}-??????"}]
    condition, [statement] = policies["secret-kms-key"]
    assert condition == "HasSecretKmsKey"
    assert (statement["Action"], statement["Resource"]) == (
        "kms:Decrypt", {"Ref": "SecretKmsKeyArn"})
    assert statement["Condition"] == {"StringEquals": {"kms:ViaService": {
        "Fn::Sub": "secretsmanager.${AWS::Region}.amazonaws.com"}}}


def test_no_alarm_starts_in_alarm_on_a_healthy_new_stack():
    """Before a metric has its first data point (a new stack, a drain yet to run), no alarm
    treats the gap as breaching; the oldest-due alarm reads only queues that are not paused
    (the drain's OldestDueAge leaves paused queues out: PausedBacklog counts them)."""
    alarms = {n: r["Properties"] for n, r in RESOURCES.items()
              if r["Type"] == "AWS::CloudWatch::Alarm"}
    assert len(alarms) >= 5
    for name, alarm in alarms.items():
        assert alarm["TreatMissingData"] in ("notBreaching", "missing"), name
    assert alarms["OldestDueJobAlarm"]["MetricName"] == "OldestDueAge"
    assert "not paused" in alarms["OldestDueJobAlarm"]["AlarmDescription"]
