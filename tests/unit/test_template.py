"""template.yaml's wiring: handlers exist, every route and the schedule have an event file,
every setting the code reads is documented, and every API route requires auth once SAM's own
translator has expanded the template."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from samtranslator.yaml_helper import yaml_parse

from pgdrain_dev.sam_translate import translated as sam_translated

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = yaml_parse((ROOT / "template.yaml").read_text())
README = (ROOT / "README.md").read_text()
FUNCTIONS = {name: r for name, r in TEMPLATE["Resources"].items()
             if r["Type"] == "AWS::Serverless::Function"}


def translated(**parameters: str) -> dict:
    """The template as CloudFormation receives it, as `sam validate` translates it."""
    return sam_translated(TEMPLATE, **parameters)


def api_events():
    for name, function in FUNCTIONS.items():
        for event in function["Properties"].get("Events", {}).values():
            if event["Type"] == "Api":
                yield name, event["Properties"]["Method"].upper(), event["Properties"]["Path"]


def test_every_handler_exists():
    assert set(FUNCTIONS) == {"DrainFunction", "EnqueueFunction", "MigrateFunction"}
    for name, function in FUNCTIONS.items():
        code = ROOT / function["Properties"]["CodeUri"]
        module, handler = function["Properties"]["Handler"].rsplit(".", 1)
        source = code / f"{module.replace('.', '/')}.py"
        assert source.is_file(), f"{name}: {source} is missing"
        assert re.search(rf"^def {handler}\(", source.read_text(), re.MULTILINE), name
        # Dependencies come from the layer: a requirements.txt would make sam build need
        # the runtime's Python.
        assert not (code / "requirements.txt").exists(), name


def test_every_route_and_the_schedule_have_an_event_file():
    events = [json.loads(p.read_text()) for p in sorted((ROOT / "events").glob("*.json"))]
    routes = {(e["httpMethod"], e["resource"]) for e in events if "httpMethod" in e}
    for name, method, path in api_events():
        assert (method, path) in routes, f"{name} {method} {path} has no file in events/"
    assert any(e.get("source") == "aws.events" for e in events)
    assert {} in events  # a direct invoke


def test_a_stack_without_api_auth_is_refused_by_a_rule():
    [assertion] = TEMPLATE["Rules"]["EveryRouteNeedsAuth"]["Assertions"]
    assert assertion["Assert"] == {"Fn::Or": [
        {"Fn::Equals": [{"Ref": "ApiAuthorizer"}, "AWS_IAM"]},
        {"Fn::Equals": [{"Ref": "ApiKeyRequired"}, "true"]}]}


def test_the_lease_follows_the_function_unless_set():
    # 0: PGDRAIN_LEASE_SECONDS is left empty, and the drain leases for its time left plus a
    # minute; a value is passed through, and the drain checks it against its timeout.
    parameters = TEMPLATE["Parameters"]
    assert parameters["LeaseSeconds"]["Default"] == 0
    variables = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["PGDRAIN_LEASE_SECONDS"] == {
        "Fn::If": ["HasLeaseSeconds", {"Ref": "LeaseSeconds"}, ""]}


def code_settings() -> set[str]:
    """Every environment variable the Lambda code and the layer read."""
    names = set()
    pattern = re.compile(r"""(?:environ|env)(?:\.get)?[\[(]\s*["']([A-Z][A-Z0-9_]+)["']|"""
                         r"""_get\(env,\s*["']([A-Z][A-Z0-9_]+)["']|"""
                         r"""\b(?:read|setting)\(\s*["']([A-Z][A-Z0-9_]+)["']""")
    for path in [*(ROOT / "layers" / "pgdrain").rglob("*.py"),
                 *(ROOT / "functions").rglob("*.py")]:
        for match in pattern.finditer(path.read_text()):
            names.add(next(g for g in match.groups() if g))
    return names


def test_every_setting_the_code_reads_is_in_the_readme_table():
    table = set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", README, re.MULTILINE))
    read = code_settings()
    assert "PGDRAIN_BATCH_SIZE" in read and "DB_SECRET_ARN" in read  # the scan works
    powertools = {n for n in read if n.startswith("POWERTOOLS_")}
    assert read - powertools - table == set()
    for name in powertools:
        assert f"`{name}`" in README, name


def test_only_the_settings_table_reads_the_environment_by_name():
    # Every reader goes through pgdrain.settings (read(), setting()), so a variable has one
    # parser, one default and one line of documentation.
    direct = re.compile(r"""(?:environ(?:\.get)?[\[(]|getenv\()\s*["']([A-Z][A-Z0-9_]+)["']""")
    settings_module = ROOT / "layers" / "pgdrain" / "pgdrain" / "settings.py"
    readers = {f"{path.relative_to(ROOT)}: {name}"
               for path in [*(ROOT / "layers" / "pgdrain").rglob("*.py"),
                            *(ROOT / "functions").rglob("*.py")] if path != settings_module
               for name in direct.findall(path.read_text())}
    assert readers == set()


def test_every_variable_the_template_sets_is_a_documented_setting():
    variables = set(TEMPLATE["Globals"]["Function"]["Environment"]["Variables"])
    for function in FUNCTIONS.values():
        variables |= set(function["Properties"].get("Environment", {}).get("Variables", {}))
    table = set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", README, re.MULTILINE))
    assert {v for v in variables if not v.startswith("POWERTOOLS_")} - table == set()


@pytest.mark.parametrize(("parameters", "schemes"), [
    ({}, {"AWS_IAM"}),
    ({"ApiAuthorizer": "NONE", "ApiKeyRequired": "true"}, {"api_key"}),
    ({"ApiKeyRequired": "true"}, {"AWS_IAM", "api_key"}),
])
def test_every_route_requires_auth(parameters, schemes):
    output = translated(**parameters)
    [api] = [r for r in output["Resources"].values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    paths = api["Properties"]["Body"]["paths"]
    routes = {(method.upper(), path) for path, methods in paths.items() for method in methods}
    assert routes == {(method, path) for _, method, path in api_events()}
    for path, methods in paths.items():
        for method, operation in methods.items():
            required = {name for requirement in operation.get("security", [])
                        for name in requirement}
            assert required == schemes, f"{method.upper()} {path}: {required}"


def role_statements(output: dict, function: str) -> list[dict]:
    """A function role's inline statements, conditional ones included."""
    statements = []
    for policy in output["Resources"][f"{function}Role"]["Properties"].get("Policies", []):
        if "Fn::If" in policy:
            policy = policy["Fn::If"][1]
        statements += policy["PolicyDocument"]["Statement"]
    return statements


@pytest.mark.parametrize("function", ["DrainFunction", "EnqueueFunction", "MigrateFunction"])
def test_least_privilege(function):
    statements = role_statements(translated(), function)
    by_action = {}
    for statement in statements:
        actions = statement["Action"]
        for action in [actions] if isinstance(actions, str) else actions:
            by_action.setdefault(action, []).append(json.dumps(statement["Resource"]))
    invoke = by_action.pop("lambda:InvokeFunction", [])
    if function == "EnqueueFunction":  # the drain's exact ARN, not SAM's function:NAME*
        assert invoke == ['{"Fn::GetAtt": ["DrainFunction", "Arn"]}']
    else:
        assert invoke == []
    logs = f'{{"Fn::GetAtt": ["{function.removesuffix("Function")}Logs", "Arn"]}}'
    assert by_action.pop("logs:CreateLogStream") == by_action.pop("logs:PutLogEvents") == [logs]
    secrets = ["DatabaseSecretArn", "MigrationSecretArn"] if function == "MigrateFunction" \
        else ["DatabaseSecretArn"]
    # The ARN as given, or with the random suffix it was given without.
    assert sorted(by_action.pop("secretsmanager:GetSecretValue")) == sorted(
        f'[{{"Ref": "{name}"}}, {{"Fn::Sub": "${{{name}}}-??????"}}]' for name in secrets)
    [connect] = by_action.pop("rds-db:connect")
    assert connect.endswith('dbuser:${DatabaseResourceId}/${DatabaseUser}"}')
    # Only the key given, through Secrets Manager (test_template_deploy checks the condition).
    assert by_action.pop("kms:Decrypt") == ['{"Ref": "SecretKmsKeyArn"}']
    assert by_action == {}  # nothing else, and no "*" resources


def test_the_tls_parameters_agree_with_the_code():
    # An empty DatabaseSslRootCert verifies RDS hosts against the bundle the layer ships
    # (db.ssl_context_for), so no mode "needs DatabaseSslRootCert on RDS".
    parameters = TEMPLATE["Parameters"]
    mode, root = (" ".join(parameters[p]["Description"].split())
                  for p in ("DatabaseSslMode", "DatabaseSslRootCert"))
    assert "needs DatabaseSslRootCert" not in mode
    for description in (mode, root):
        assert "RDS CA bundle the layer ships" in description
        assert "RDS Proxy" in description and "system's CAs" in description
