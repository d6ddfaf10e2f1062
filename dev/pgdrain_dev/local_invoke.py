"""``pgdrain invoke``: run a function of template.yaml on this machine, as ``sam local invoke``
would, without Docker (which ``sam local`` needs and this machine may not have).

Dev tooling (the pgdrain-dev package, not shipped in the layer): nothing in the Lambda
functions imports this module.

What runs, and how:

- The template is read with PyYAML (CloudFormation short tags such as ``!Ref`` become the long
  form, ``{"Ref": ...}``). ``Globals.Function`` is merged into the function as SAM does (maps
  merge, lists append, the function's own values win), then the intrinsics ``sam local``
  resolves are resolved: ``Ref`` to a parameter (its ``Default``, or ``--parameter-overrides``),
  the pseudo parameters (``AWS::StackName`` is ``local`` and ``AWS::Region`` ``us-east-1``
  unless ``AWS_REGION``/``AWS_DEFAULT_REGION`` say otherwise, as in sam), ``Ref`` to another
  resource (its logical id: ``DRAIN_FUNCTION_NAME`` becomes ``DrainFunction``, as in sam),
  ``Fn::GetAtt`` of a function's ``Arn``, ``Fn::Sub``, ``Fn::Join``, ``Fn::Select``, ``Fn::If``
  with the template's ``Conditions``. Anything else stays unresolved.
- The environment is ``sam local invoke``'s: the variables the template declares (Globals and
  the function's), each taking, from highest priority down, the ``--env-vars`` value (the file's
  ``{"Parameters": {...}}`` for every function, then ``{"<LogicalId>": {...}}`` for this one),
  the shell's value of the same name, then the template's value. Only declared variables are
  set: ``--env-vars`` cannot add new ones (sam ignores them too). Unresolved values, lists and
  null become ``""``; true/false become ``"true"``/``"false"``. Lambda's own variables
  (``AWS_LAMBDA_FUNCTION_NAME``, ``..._TIMEOUT``, ``..._MEMORY_SIZE``, ``AWS_REGION``,
  ``_HANDLER``, ``LAMBDA_TASK_ROOT``, ...) and AWS credentials from the shell (its key
  variables, else its ``AWS_PROFILE``, else sam's placeholders) are added; nothing else of the
  shell's environment reaches the function (``PATH`` aside).
- The import path is Lambda's: the function's ``CodeUri`` folder (``/var/task``, also the
  working directory), then each of the template's layers' ``ContentUri`` (``/opt/python``: the
  folder itself, or its ``python/`` subfolder if it has one), then this interpreter's packages.
  The source template is used, not ``.aws-sam/build`` (its layer holds arm64 wheels).
- Execution: the function runs in a new process under the real runtime interface client
  (``python -m awslambdaric <Handler>``, the bootstrap Lambda's Python runtimes run) against a
  minimal Runtime API served here on 127.0.0.1 for exactly one invocation. The client builds
  Lambda's context (request id, ARN, and a deadline of the function's ``Timeout`` from when the
  event is handed over), Lambda's error format and its log handler. After the response the
  process is stopped; past the deadline it is killed and the result is Lambda's
  ``Task timed out after N.00 seconds``. Where awslambdaric is not installed (it has no macOS
  wheels), a small built-in client in this module speaks the same protocol instead.
- Output is sam's: the function's logs (its stdout and stderr) and the START/END/REPORT lines
  go to stderr; the response (or the error object) goes to stdout on one line. Unlike sam, the
  exit status is 1 when the function failed or timed out (0 for a response; 2 for bad input).
- A database: when the function declares ``DATABASE_URL`` and neither it nor ``DB_SECRET_ARN``
  nor ``DB_IAM_AUTH`` resolve to a value, an embedded PostgreSQL (pgserver) is started in a
  folder of the system's temp directory named for the project (``PGDRAIN_LOCAL_PGDATA`` to
  choose another: as root, pgserver opens every parent of that folder to other users),
  migrated, and given to the function as ``DATABASE_URL``; it keeps its data between runs.
  Which database was used is printed to stderr, never with a password.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgdrain.cli.output import escape_json
from pgdrain.errors import ConfigError

FUNCTION_TYPE = "AWS::Serverless::Function"
LAYER_TYPES = ("AWS::Serverless::LayerVersion", "AWS::Lambda::LayerVersion")
DEFAULT_TIMEOUT = 3  # SAM's defaults when neither the function nor Globals set them
DEFAULT_MEMORY = 128
ACCOUNT_ID = "123456789012"
# sam local's values for the pseudo parameters (samcli IntrinsicsSymbolTable).
PSEUDO_PARAMETERS = {
    "AWS::AccountId": ACCOUNT_ID,
    "AWS::Partition": "aws",
    "AWS::Region": "us-east-1",
    "AWS::StackName": "local",
    "AWS::StackId": (f"arn:aws:cloudformation:us-east-1:{ACCOUNT_ID}:stack/local/"
                     "51af3dc0-da77-11e4-872e-1234567db123"),
    "AWS::URLSuffix": "amazonaws.com",
}
# sam's placeholder credentials when the shell has none.
PLACEHOLDER_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "defaultkey",
                           "AWS_SECRET_ACCESS_KEY": "defaultsecret"}
INIT_SECONDS = 10  # Lambda's limit on the init phase; it is added to the wait for the first poll
RUNTIME_API = "/2018-06-01/runtime"
PGDATA_ENV = "PGDRAIN_LOCAL_PGDATA"
_TRUE = frozenset({"1", "true", "yes"})


# --- the template ------------------------------------------------------------------------------


def load_template(path: str | Path) -> dict[str, Any]:
    """template.yaml as a dict; short tags (``!Ref X``) become the long form (``{"Ref": X}``)."""
    try:
        import yaml
    except ImportError:
        raise ConfigError("reading template.yaml needs PyYAML: pip install PyYAML "
                          "(requirements-dev.txt has it)") from None

    class CloudFormationLoader(yaml.SafeLoader):
        pass

    def construct(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
        if isinstance(node, yaml.ScalarNode):
            value: Any = loader.construct_scalar(node)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)
        if suffix in ("Ref", "Condition"):
            return {suffix: value}
        if suffix == "GetAtt" and isinstance(value, str):
            value = value.split(".", 1)
        return {f"Fn::{suffix}": value}

    CloudFormationLoader.add_multi_constructor("!", construct)
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise ConfigError(f"no template at {path}: run from the project's folder or pass "
                          "--template") from None
    try:
        template = yaml.load(text, Loader=CloudFormationLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(template, dict) or not isinstance(template.get("Resources"), dict):
        raise ConfigError(f"{path} has no Resources")
    return template


def _is_intrinsic(value: Any) -> bool:
    if not isinstance(value, dict) or len(value) != 1:
        return False
    name = next(iter(value))
    return name in ("Ref", "Condition") or str(name).startswith("Fn::")


def merge_globals(global_props: Mapping[str, Any], props: Mapping[str, Any]) -> dict[str, Any]:
    """SAM's Globals rules: the function's scalars win, maps merge, lists are appended to the
    global list; an intrinsic on either side is not merged (the function's value wins)."""
    merged = dict(global_props)
    for key, value in props.items():
        if key not in merged:
            merged[key] = value
        elif (isinstance(value, dict) and isinstance(merged[key], dict)
              and not _is_intrinsic(value) and not _is_intrinsic(merged[key])):
            merged[key] = merge_globals(merged[key], value)
        elif isinstance(value, list) and isinstance(merged[key], list):
            merged[key] = [*merged[key], *value]
        else:
            merged[key] = value
    return merged


class Unresolved(Exception):
    """An intrinsic that cannot be resolved locally (it becomes "" in an environment)."""


_NO_VALUE = object()  # Ref AWS::NoValue: the property is left out


class Resolver:
    """Resolves the intrinsics ``sam local`` resolves, with its values for the pseudo
    parameters and for references to resources."""

    def __init__(self, template: Mapping[str, Any], parameters: Mapping[str, Any]):
        self.template = template
        self.resources: Mapping[str, Any] = template.get("Resources") or {}
        self.conditions: Mapping[str, Any] = template.get("Conditions") or {}
        self.parameters = dict(parameters)

    def resolve(self, value: Any) -> Any:
        """``value`` with every resolvable intrinsic resolved; raises Unresolved if ``value``
        itself is an intrinsic that cannot be resolved here."""
        if isinstance(value, list):
            items = [self._resolve_or_keep(v) for v in value]
            return [v for v in items if v is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if not _is_intrinsic(value):
            items = {k: self._resolve_or_keep(v) for k, v in value.items()}
            return {k: v for k, v in items.items() if v is not _NO_VALUE}
        (name, argument), = value.items()
        if name == "Ref":
            return self._ref(argument)
        if name == "Fn::GetAtt":
            return self._get_att(*self._pair(argument))
        if name == "Fn::Sub":
            return self._sub(argument)
        if name == "Fn::Join":
            delimiter, items = self._pair(argument)
            items = self.resolve(items)
            if not isinstance(items, list) or not all(isinstance(i, str | int) for i in items):
                raise Unresolved(value)
            return str(delimiter).join(str(i) for i in items)
        if name == "Fn::Select":
            index, items = self._pair(argument)
            items = self.resolve(items)
            try:
                return items[int(self.resolve(index))]
            except (TypeError, ValueError, IndexError, KeyError):
                raise Unresolved(value) from None
        if name == "Fn::If":
            if not isinstance(argument, list) or len(argument) != 3:
                raise Unresolved(value)
            return self.resolve(argument[1] if self.condition(argument[0]) else argument[2])
        raise Unresolved(value)

    def _resolve_or_keep(self, value: Any) -> Any:
        try:
            return self.resolve(value)
        except Unresolved:
            return value

    @staticmethod
    def _pair(argument: Any) -> tuple[Any, Any]:
        if not isinstance(argument, list) or len(argument) != 2:
            raise Unresolved(argument)
        return argument[0], argument[1]

    def _ref(self, name: Any) -> Any:
        if name == "AWS::NoValue":
            return _NO_VALUE
        if not isinstance(name, str):
            raise Unresolved(name)
        if name in self.parameters:
            return self.parameters[name]
        resource = self.resources.get(name)
        if isinstance(resource, dict):
            if resource.get("Type") in LAYER_TYPES:
                return {"Ref": name}  # kept: the function's Layers are looked up by it
            return name  # sam local gives other resources their logical id
        raise Unresolved(name)

    def _get_att(self, name: Any, attribute: Any) -> str:
        resource = self.resources.get(name)
        if (isinstance(resource, dict) and resource.get("Type") == FUNCTION_TYPE
                and attribute == "Arn"):
            function_name = (resource.get("Properties") or {}).get("FunctionName") or name
            region = self.parameters["AWS::Region"]
            return f"arn:aws:lambda:{region}:{ACCOUNT_ID}:function:{self.resolve(function_name)}"
        raise Unresolved(f"{name}.{attribute}")

    def _sub(self, argument: Any) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else self._pair(argument)
        if not isinstance(text, str) or not isinstance(variables, dict):
            raise Unresolved(argument)

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return str(self.resolve(variables[name]))
            try:
                if "." in name and name.split(".", 1)[0] in self.resources:
                    return self._get_att(*name.split(".", 1))
                resolved = self._ref(name)
            except Unresolved:
                return match.group(0)
            return resolved if isinstance(resolved, str) else str(resolved)

        return re.sub(r"\$\{([^}]*)\}", substitute, text)

    def condition(self, value: Any) -> bool:
        """The truth of a condition's name or of a condition expression."""
        if isinstance(value, str):
            if value not in self.conditions:
                raise Unresolved(value)
            return self.condition(self.conditions[value])
        if not isinstance(value, dict) or len(value) != 1:
            raise Unresolved(value)
        (name, argument), = value.items()
        if name == "Condition":
            return self.condition(argument)
        if name == "Fn::Equals":
            left, right = (self.resolve(v) for v in self._pair(argument))
            return _stringify(left) == _stringify(right)
        if name == "Fn::Not" and isinstance(argument, list) and len(argument) == 1:
            return not self.condition(argument[0])
        if name == "Fn::And" and isinstance(argument, list):
            return all(self.condition(c) for c in argument)
        if name == "Fn::Or" and isinstance(argument, list):
            return any(self.condition(c) for c in argument)
        raise Unresolved(value)


def _stringify(value: Any) -> str:
    """An environment value as sam local writes it."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None or value is _NO_VALUE or isinstance(value, dict | list | tuple):
        return ""
    return str(value)


@dataclass
class Function:
    """A function of the template, resolved as ``sam local invoke`` resolves it."""

    logical_id: str
    handler: str
    runtime: str
    code_dir: Path
    layer_dirs: list[Path]
    timeout: int
    memory: int
    region: str
    variables: dict[str, str]  # the declared variables, with their final values
    lambda_variables: dict[str, str] = field(default_factory=dict)  # AWS_*, _HANDLER, ...

    @property
    def arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{ACCOUNT_ID}:function:{self.logical_id}"

    def environment(self) -> dict[str, str]:
        """Everything the function's process gets (the declared variables win, as in sam)."""
        return {**self.lambda_variables, **self.variables}


def function_ids(template: Mapping[str, Any]) -> list[str]:
    return sorted(k for k, v in (template.get("Resources") or {}).items()
                  if isinstance(v, dict) and v.get("Type") == FUNCTION_TYPE)


def parameter_values(template: Mapping[str, Any], overrides: Mapping[str, Any] | None = None,
                     region: str | None = None) -> dict[str, Any]:
    """sam's parameter values: the pseudo parameters, the Defaults, then the overrides."""
    values: dict[str, Any] = dict(PSEUDO_PARAMETERS)
    if region:
        values["AWS::Region"] = region
    for name, definition in (template.get("Parameters") or {}).items():
        if isinstance(definition, dict) and "Default" in definition:
            values[name] = definition["Default"]
    unknown = sorted(set(overrides or {}) - set(template.get("Parameters") or {})
                     - set(PSEUDO_PARAMETERS))
    if unknown:
        raise ConfigError(f"--parameter-overrides: the template has no parameter "
                          f"{', '.join(unknown)}")
    values.update(overrides or {})
    return values


def resolve_function(template: Mapping[str, Any], template_dir: str | Path, logical_id: str, *,
                     env_vars: Mapping[str, Any] | None = None,
                     parameter_overrides: Mapping[str, Any] | None = None,
                     shell_env: Mapping[str, str] | None = None) -> Function:
    """The function ``logical_id`` of ``template`` as ``sam local invoke`` would run it.

    ``env_vars`` is the parsed ``--env-vars`` file; ``shell_env`` defaults to os.environ.
    """
    shell_env = os.environ if shell_env is None else shell_env
    template_dir = Path(template_dir)
    ids = function_ids(template)
    if logical_id not in ids:
        listed = ", ".join(ids) or "(none)"
        raise ConfigError(f"no function {logical_id!r} in the template; its functions are: "
                          f"{listed}")
    region = shell_env.get("AWS_REGION") or shell_env.get("AWS_DEFAULT_REGION") or "us-east-1"
    resolver = Resolver(template, parameter_values(template, parameter_overrides, region))
    global_props = ((template.get("Globals") or {}).get("Function")) or {}
    props = merge_globals(global_props, template["Resources"][logical_id].get("Properties") or {})

    def prop(name: str, default: Any = None) -> Any:
        try:
            value = resolver.resolve(props.get(name, default))
        except Unresolved:
            raise ConfigError(f"{logical_id}: {name} cannot be resolved locally: "
                              f"{props.get(name)!r}") from None
        return default if value is _NO_VALUE else value

    if prop("PackageType", "Zip") != "Zip":
        raise ConfigError(f"{logical_id} is an image function: pgdrain invoke runs Zip ones")
    runtime = str(prop("Runtime", ""))
    if not runtime.startswith("python"):
        raise ConfigError(f"{logical_id} has Runtime {runtime or '(none)'}: "
                          "pgdrain invoke runs Python functions")
    handler = prop("Handler")
    if not isinstance(handler, str) or "." not in handler:
        raise ConfigError(f"{logical_id} has no Handler of the form module.function")
    code_uri = prop("CodeUri", ".")
    if not isinstance(code_uri, str) or code_uri.startswith("s3://"):
        raise ConfigError(f"{logical_id}: CodeUri must be a local folder, not {code_uri!r}")
    code_dir = (template_dir / code_uri).resolve()
    if not code_dir.is_dir():
        raise ConfigError(f"{logical_id}: CodeUri {code_uri} is not a folder")
    try:
        timeout, memory = int(prop("Timeout", DEFAULT_TIMEOUT)), int(prop("MemorySize",
                                                                           DEFAULT_MEMORY))
    except (TypeError, ValueError):
        raise ConfigError(f"{logical_id}: Timeout and MemorySize must be numbers") from None
    function = Function(
        logical_id=logical_id, handler=handler, runtime=runtime, code_dir=code_dir,
        layer_dirs=_layer_dirs(template, template_dir, prop("Layers", []) or [], logical_id),
        timeout=timeout, memory=memory, region=region,
        variables=_variables(template, logical_id, prop("Environment", {}), env_vars, shell_env))
    function.lambda_variables = _lambda_variables(function, prop("LoggingConfig", {}) or {},
                                                  shell_env)
    return function


def _layer_dirs(template: Mapping[str, Any], template_dir: Path, layers: Any,
                logical_id: str) -> list[Path]:
    dirs = []
    for layer in layers if isinstance(layers, list) else []:
        name = layer.get("Ref") if isinstance(layer, dict) else None
        resource = (template.get("Resources") or {}).get(name) if name else None
        if not isinstance(resource, dict):
            print(f"pgdrain invoke: {logical_id}: skipping the layer {layer!r} (only the "
                  "template's own layers are available locally)", file=sys.stderr)
            continue
        properties = resource.get("Properties") or {}
        content = properties.get("ContentUri", properties.get("Content"))
        if not isinstance(content, str):
            raise ConfigError(f"{name}: ContentUri must be a local folder")
        folder = (template_dir / content).resolve()
        # A built layer holds python/ (Lambda's /opt/python); a source folder is that itself.
        path = folder / "python" if (folder / "python").is_dir() else folder
        if path not in dirs:  # two layers built from one folder (pgdrain's and Powertools')
            dirs.append(path)
    return dirs


def _variables(template: Mapping[str, Any], logical_id: str, environment: Any,
               env_vars: Mapping[str, Any] | None,
               shell_env: Mapping[str, str]) -> dict[str, str]:
    declared = environment.get("Variables") if isinstance(environment, dict) else None
    if not isinstance(declared, dict):
        declared = {}
    overrides: dict[str, Any] = {}
    env_vars = env_vars or {}
    overrides.update(env_vars.get("Parameters") or {})
    properties = (template["Resources"][logical_id].get("Properties")) or {}
    function_name = properties.get("FunctionName")
    overrides.update(env_vars.get(logical_id)
                     or (env_vars.get(function_name) if isinstance(function_name, str) else None)
                     or {})
    result = {}
    for name, value in declared.items():
        if name in shell_env:
            value = shell_env[name]
        if name in overrides:
            value = overrides[name]
        result[name] = _stringify(value)
    return result


def _lambda_variables(function: Function, logging_config: Mapping[str, Any],
                      shell_env: Mapping[str, str]) -> dict[str, str]:
    """What Lambda (and sam local) set in every function's environment."""
    stream = time.strftime("%Y/%m/%d/[$LATEST]", time.gmtime()) + uuid.uuid4().hex
    env = {
        "AWS_SAM_LOCAL": "true",
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{function.runtime}",
        "AWS_LAMBDA_FUNCTION_NAME": function.logical_id,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(function.memory),
        "AWS_LAMBDA_FUNCTION_TIMEOUT": str(function.timeout),
        "AWS_LAMBDA_FUNCTION_HANDLER": function.handler,
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_LAMBDA_LOG_GROUP_NAME": str(logging_config.get("LogGroup")
                                         or f"/aws/lambda/{function.logical_id}"),
        "AWS_LAMBDA_LOG_STREAM_NAME": stream,
        "AWS_REGION": function.region,
        "AWS_DEFAULT_REGION": function.region,
        "_HANDLER": function.handler,
        "LAMBDA_TASK_ROOT": str(function.code_dir),
        "TZ": ":UTC",
        "LANG": "en_US.UTF-8",
        "PATH": shell_env.get("PATH", os.defpath),
    }
    if logging_config.get("LogFormat"):
        env["AWS_LAMBDA_LOG_FORMAT"] = str(logging_config["LogFormat"])
        if logging_config["LogFormat"] == "JSON":
            env["AWS_LAMBDA_LOG_LEVEL"] = str(logging_config.get("ApplicationLogLevel", "INFO"))
    # Credentials as sam passes them (it resolves the shell's profile; here the function's
    # boto3 does, from the same AWS_PROFILE), or sam's placeholders.
    if shell_env.get("AWS_ACCESS_KEY_ID") and shell_env.get("AWS_SECRET_ACCESS_KEY"):
        names: tuple[str, ...] = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                  "AWS_SESSION_TOKEN")
    elif shell_env.get("AWS_PROFILE"):
        names = ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")
    else:
        names = ()
        env.update(PLACEHOLDER_CREDENTIALS)
    env.update({name: shell_env[name] for name in names if shell_env.get(name)})
    return env


# --- the command's inputs ------------------------------------------------------------------------


def read_env_vars(path: str | None) -> dict[str, dict[str, Any]]:
    """An ``--env-vars`` file in sam's format: ``{"Parameters": {...}, "<LogicalId>": {...}}``."""
    if not path:
        return {}
    data = _read_json(path, "--env-vars")
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ConfigError(f"--env-vars {path}: environment variables must be in either "
                          'CloudFormation parameter file format ({"Parameters": {"NAME": '
                          '"value"}}) or in {"LogicalId": {"NAME": "value"}} JSON pairs')
    return data


def read_event(path: str | None) -> bytes:
    """The event: a JSON file, ``-`` for stdin, or ``{}`` without one (as sam does)."""
    if path is None:
        return b"{}"
    if path == "-":
        raw = sys.stdin.buffer.read()
        _parse_json(raw, "the event on stdin")
        return raw
    _read_json(path, "the event file")
    return Path(path).read_bytes()


def _read_json(path: str, what: str) -> Any:
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {path} is a folder") from None
    return _parse_json(raw, f"{what} {path}")


def _parse_json(raw: bytes, what: str) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} is not valid JSON: {exc}") from None


def parse_parameter_overrides(values: list[str] | None) -> dict[str, str]:
    """sam's ``--parameter-overrides``: ``Name=Value`` pairs, or
    ``ParameterKey=Name,ParameterValue=Value``, separated by spaces (the option repeats)."""
    result: dict[str, str] = {}
    for text in values or []:
        for item in shlex.split(text):
            long_form = re.fullmatch(r"ParameterKey=([^,]+),ParameterValue=(.*)", item)
            if long_form:
                result[long_form[1]] = long_form[2]
            elif "=" in item and not item.startswith("="):
                name, value = item.split("=", 1)
                result[name] = value
            else:
                raise ConfigError(f"--parameter-overrides: {item!r} is not Name=Value")
    return result


# --- the database --------------------------------------------------------------------------------


@contextlib.contextmanager
def database_for(function: Function, template_dir: Path) -> Iterator[None]:
    """Say which database the function will use; with none configured, start (and afterwards
    stop) the embedded one, migrated, and hand it to the function as DATABASE_URL."""
    env = function.variables
    if "DATABASE_URL" not in env:  # the function does not use pgdrain's database settings
        yield
        return
    if env["DATABASE_URL"].strip():
        _say(f"database: DATABASE_URL ({_where(env['DATABASE_URL'])})")
        yield
        return
    if env.get("DB_SECRET_ARN", "").strip():
        _say(f"database: the secret {env['DB_SECRET_ARN'].strip()} (DB_SECRET_ARN)")
        yield
        return
    if env.get("DB_IAM_AUTH", "").strip().lower() in _TRUE:
        _say(f"database: RDS IAM auth as {env.get('DB_USER') or '?'} at "
             f"{env.get('DB_HOST') or '?'} (DB_IAM_AUTH)")
        yield
        return
    from pgdrain.db import connect
    from pgdrain.migrate import migrate

    from . import embedded

    datadir = Path(os.environ.get(PGDATA_ENV) or _default_pgdata(template_dir)).absolute()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pgserver: XDG_RUNTIME_DIR is not set
        server = embedded.start(datadir)
    try:
        conn = connect(server.url)
        try:
            applied = migrate(conn)
        finally:
            conn.close()
        schema = f"applied {', '.join(applied)}" if applied else "schema up to date"
        _say(f"database: the embedded PostgreSQL in {_relative(datadir)} ({schema}), as "
             f"DATABASE_URL, DB_SECRET_ARN and DB_IAM_AUTH are unset ({PGDATA_ENV} picks "
             "another folder)")
        env["DATABASE_URL"] = server.url
        yield
    finally:
        server.stop()


def _where(url: str) -> str:
    from pgdrain.db import parse_database_url

    try:
        params = parse_database_url(url)
    except ConfigError:
        return "not a valid URL: the function will say why"
    return f"{params.user}@{params.where}"


def _say(message: str) -> None:
    print(f"pgdrain invoke: {message}", file=sys.stderr, flush=True)


# --- the Runtime API and the invocation ----------------------------------------------------------


@dataclass
class Outcome:
    """How the invocation ended: ``response``, ``error`` (the function raised), ``init-error``,
    ``timeout`` or ``exit`` (the runtime died); ``payload`` is what Lambda would return."""

    kind: str
    payload: bytes
    request_id: str
    init_ms: float | None = None
    duration_ms: float | None = None
    max_memory_mb: int | None = None

    @property
    def ok(self) -> bool:
        return self.kind == "response"


class _Invocation:
    """The state of the one invocation the Runtime API serves."""

    def __init__(self, function: Function, event: bytes, log_fd: int):
        self.function = function
        self.event = event
        self.log_fd = log_fd
        self.request_id = str(uuid.uuid4())
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.stopping = threading.Event()
        self.started = time.monotonic()
        self.served_at: float | None = None
        self.deadline_ms: int | None = None
        self.result: tuple[str, bytes] | None = None
        self.finished_at: float | None = None

    def take_event(self) -> dict[str, str] | None:
        """The /next headers, the first time; None afterwards."""
        with self.lock:
            if self.served_at is not None:
                return None
            self.served_at = time.monotonic()
            self.deadline_ms = int(time.time() * 1000) + self.function.timeout * 1000
        with contextlib.suppress(OSError):
            os.write(self.log_fd, f"START RequestId: {self.request_id} Version: $LATEST\n".encode())
        trace = f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};" \
                f"Parent={uuid.uuid4().hex[:16]};Sampled=0"
        return {"Lambda-Runtime-Aws-Request-Id": self.request_id,
                "Lambda-Runtime-Deadline-Ms": str(self.deadline_ms),
                "Lambda-Runtime-Invoked-Function-Arn": self.function.arn,
                "Lambda-Runtime-Trace-Id": trace}

    def finish(self, kind: str, payload: bytes) -> None:
        with self.lock:
            if self.result is None:
                self.result = (kind, payload)
                self.finished_at = time.monotonic()
        self.finished.set()


def _runtime_api_server(invocation: _Invocation) -> Any:
    """A ThreadingHTTPServer on 127.0.0.1 speaking the Lambda Runtime API for ``invocation``.

    The runtime client's curl-based transport hangs silently unless the answers are HTTP/1.1
    with Content-Length and /next carries ``Content-Type: application/json``.
    """
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, headers: Mapping[str, str] = {}) -> None:
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> bytes:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def do_GET(self) -> None:
            if self.path != f"{RUNTIME_API}/invocation/next":
                self._send(404, b'{"errorMessage": "not found"}')
                return
            headers = invocation.take_event()
            if headers is None:  # the runtime asks for a second event: it is stopped instead
                invocation.stopping.wait()
                self.close_connection = True
                return
            self._send(200, invocation.event, headers)

        def do_POST(self) -> None:
            body = self._body()
            path = self.path.removeprefix(RUNTIME_API)
            match = re.fullmatch(r"/invocation/([^/]+)/(response|error)", path)
            if path == "/init/error":
                kind = "init-error"
            elif match and match[1] == invocation.request_id:
                kind = match[2]
            else:
                self._send(404, b'{"errorMessage": "unknown request"}')
                return
            self._send(202, b'{"status": "OK"}')
            invocation.finish(kind, body)

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # the stopped runtime drops its parked poll

    return Server(("127.0.0.1", 0), Handler)


def runtime_client_command(client: str = "auto") -> tuple[list[str], str]:
    """The command that runs the handler's process, and a description of it."""
    if client not in ("auto", "awslambdaric", "builtin"):
        raise ConfigError(f"unknown runtime client {client!r}")
    has_ric = importlib.util.find_spec("awslambdaric") is not None
    if client == "awslambdaric" and not has_ric:
        raise ConfigError("awslambdaric is not installed: pip install awslambdaric "
                          "(requirements-dev.txt pins it on Linux)")
    if has_ric and client != "builtin":
        from importlib.metadata import version

        return [sys.executable, "-m", "awslambdaric"], f"awslambdaric {version('awslambdaric')}"
    import inspect

    source = inspect.getsource(_builtin_runtime_client)
    code = f"from __future__ import annotations\nfrom typing import Any\n{source}\n" \
           "_builtin_runtime_client()\n"
    why = "" if client == "builtin" else " (awslambdaric is not installed)"
    return [sys.executable, "-u", "-c", code], f"pgdrain's built-in runtime client{why}"


def invoke(function: Function, event: bytes, *, client: str = "auto",
           log_fd: int | None = None) -> Outcome:
    """Run one invocation of ``function`` with ``event`` in a new process under the runtime
    interface client; its output goes to ``log_fd`` (default: this process's stderr)."""
    command, _ = runtime_client_command(client)
    log_fd = _stderr_fd() if log_fd is None else log_fd
    invocation = _Invocation(function, event, log_fd)
    server = _runtime_api_server(invocation)
    threading.Thread(target=server.serve_forever, name="runtime-api", daemon=True).start()
    env = function.environment()
    env["AWS_LAMBDA_RUNTIME_API"] = f"127.0.0.1:{server.server_port}"
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in [function.code_dir,
                                                         *function.layer_dirs])
    kind, payload, max_memory = "", b"", None
    try:
        process = subprocess.Popen([*command, function.handler], cwd=function.code_dir,
                                   env=env, stdin=subprocess.DEVNULL, stdout=log_fd,
                                   stderr=log_fd)
        try:
            kind, payload = _wait(invocation, process)
            max_memory = _peak_memory_mb(process.pid)
        finally:
            invocation.stopping.set()
            if process.poll() is None:
                process.kill()
            process.wait()
    finally:
        invocation.stopping.set()
        server.shutdown()
        server.server_close()
    init_ms = duration_ms = None
    if invocation.served_at is not None:
        init_ms = (invocation.served_at - invocation.started) * 1000
        end = invocation.finished_at if kind in ("response", "error") else time.monotonic()
        duration_ms = ((end or time.monotonic()) - invocation.served_at) * 1000
    return Outcome(kind, payload, invocation.request_id, init_ms, duration_ms, max_memory)


def _wait(invocation: _Invocation, process: subprocess.Popen[bytes]) -> tuple[str, bytes]:
    timeout = invocation.function.timeout
    first_poll_by = time.monotonic() + INIT_SECONDS + timeout
    while not invocation.finished.wait(0.02):
        if process.poll() is not None:
            if invocation.finished.wait(0.5):  # a POST may still be on its way
                break
            how = (f"signal {-process.returncode}" if process.returncode < 0
                   else f"exit status {process.returncode}")
            return "exit", _error_json("Runtime.ExitError", f"RequestId: {invocation.request_id}"
                                       f" Error: Runtime exited with error: {how}")
        past_deadline = (invocation.deadline_ms is not None
                         and time.time() * 1000 >= invocation.deadline_ms)
        if past_deadline or (invocation.served_at is None and time.monotonic() > first_poll_by):
            return "timeout", _error_json(
                "Sandbox.Timedout", f"RequestId: {invocation.request_id} Error: Task timed out "
                f"after {timeout:.2f} seconds")
    assert invocation.result is not None
    return invocation.result


def _error_json(error_type: str, message: str) -> bytes:
    return json.dumps({"errorType": error_type, "errorMessage": message}).encode()


def _peak_memory_mb(pid: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return math.ceil(int(line.split()[1]) / 1024)
    return None


def _stderr_fd() -> int:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return 2


def _builtin_runtime_client() -> None:  # pragma: no cover (runs in the function's process)
    """A stdlib-only runtime interface client for where awslambdaric is not installed: the
    same Runtime API protocol, error format and log line format, fewer refinements.

    Self-contained: its source is run with ``python -c``.
    """
    import importlib
    import json
    import logging
    import os
    import sys
    import time
    import traceback
    import urllib.request

    api = f"http://{os.environ['AWS_LAMBDA_RUNTIME_API']}/2018-06-01/runtime"
    request_id = ""

    def post(path: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        request = urllib.request.Request(f"{api}{path}", data=body, method="POST",
                                         headers={"Content-Type": "application/json",
                                                  **(headers or {})})
        with urllib.request.urlopen(request) as response:
            response.read()

    def error(exc: BaseException, error_type: str | None = None, message: str | None = None,
              skip: int = 0) -> bytes:
        frames = traceback.extract_tb(exc.__traceback__)[skip:]
        body = {"errorMessage": message or str(exc), "errorType": error_type or
                type(exc).__name__, "requestId": request_id,
                "stackTrace": traceback.format_list(frames)}
        print(f"[ERROR] {body['errorType']}: {body['errorMessage']}", flush=True)
        return json.dumps(body).encode()

    class RequestIdFilter(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            record.aws_request_id = request_id
            return True

    class Context:
        def __init__(self, headers: Any) -> None:
            self.aws_request_id = headers["Lambda-Runtime-Aws-Request-Id"]
            self.invoked_function_arn = headers["Lambda-Runtime-Invoked-Function-Arn"]
            self.function_name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]
            self.function_version = os.environ["AWS_LAMBDA_FUNCTION_VERSION"]
            self.memory_limit_in_mb = os.environ["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"]
            self.log_group_name = os.environ["AWS_LAMBDA_LOG_GROUP_NAME"]
            self.log_stream_name = os.environ["AWS_LAMBDA_LOG_STREAM_NAME"]
            self.client_context = self.identity = None
            self._deadline_ms = int(headers["Lambda-Runtime-Deadline-Ms"])

        def get_remaining_time_in_millis(self) -> int:
            return max(0, self._deadline_ms - int(time.time() * 1000))

    log_handler = logging.StreamHandler(sys.stdout)
    log_handler.setFormatter(logging.Formatter(
        "[%(levelname)s]\t%(asctime)s.%(msecs)03dZ\t%(aws_request_id)s\t%(message)s",
        "%Y-%m-%dT%H:%M:%S"))
    log_handler.addFilter(RequestIdFilter())
    logging.Formatter.converter = time.gmtime
    logging.getLogger().addHandler(log_handler)
    module_name, _, function_name = sys.argv[-1].rpartition(".")
    try:
        handler = getattr(importlib.import_module(module_name.replace("/", ".")), function_name)
    except ImportError as exc:
        post("/init/error", error(exc, "Runtime.ImportModuleError",
                                  f"Unable to import module '{module_name}': {exc}"))
        sys.exit(1)
    except AttributeError as exc:
        post("/init/error", error(exc, "Runtime.HandlerNotFound",
                                  f"Handler '{function_name}' missing on module '{module_name}'"))
        sys.exit(1)
    except Exception as exc:
        post("/init/error", error(exc))
        sys.exit(1)
    while True:
        with urllib.request.urlopen(f"{api}/invocation/next") as response:
            headers, body = response.headers, response.read()
        request_id = headers["Lambda-Runtime-Aws-Request-Id"]
        os.environ["_X_AMZN_TRACE_ID"] = headers.get("Lambda-Runtime-Trace-Id", "")
        try:
            result = json.dumps(handler(json.loads(body), Context(headers))).encode()
        except Exception as exc:
            post(f"/invocation/{request_id}/error", error(exc, skip=1),
                 {"Lambda-Runtime-Function-Error-Type": "Unhandled"})
            continue
        post(f"/invocation/{request_id}/response", result)


# --- the command ---------------------------------------------------------------------------------


def register(commands: Any) -> None:
    """Add ``pgdrain invoke`` to the ``pgdrain`` command's subcommands (an entry point of the
    ``pgdrain.commands`` group: the core CLI finds it where pgdrain-dev is installed)."""
    parser = commands.add_parser(
        "invoke", help="run a function of template.yaml locally, as `sam local invoke` does")
    add_arguments(parser)
    parser.set_defaults(handler=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``pgdrain invoke``'s options (sam local invoke's names)."""
    parser.add_argument("logical_id", metavar="LOGICAL_ID",
                        help="the function's logical id in the template, e.g. DrainFunction")
    parser.add_argument("-e", "--event", metavar="FILE",
                        help="a JSON event file, or - for stdin (default: {})")
    parser.add_argument("-n", "--env-vars", metavar="FILE",
                        help='environment overrides: {"Parameters": {...}} for every function, '
                             '{"LogicalId": {...}} for one; only declared variables')
    parser.add_argument("-t", "--template", default="template.yaml", metavar="FILE",
                        help="the SAM template (default: template.yaml)")
    parser.add_argument("--parameter-overrides", action="append", metavar="NAME=VALUE ...",
                        help="template parameter values, e.g. 'DrainTimeout=30 LogLevel=DEBUG'")
    parser.add_argument("--runtime-client", choices=("auto", "awslambdaric", "builtin"),
                        default="auto", help="auto: awslambdaric when installed (default)")


def run(args: argparse.Namespace) -> int:
    """``pgdrain invoke``: 0 for a response, 1 when the function failed or timed out."""
    template_path = Path(args.template)
    template = load_template(template_path)
    event = read_event(args.event)
    function = resolve_function(
        template, template_path.parent, args.logical_id, env_vars=read_env_vars(args.env_vars),
        parameter_overrides=parse_parameter_overrides(args.parameter_overrides))
    _, client = runtime_client_command(args.runtime_client)
    python = ".".join(map(str, sys.version_info[:3]))
    _say(f"invoking {function.logical_id}: {function.handler} in {_relative(function.code_dir)} "
         f"({function.runtime}; here Python {python} with {client}), "
         f"timeout {function.timeout} s, memory {function.memory} MB")
    try:
        with database_for(function, template_path.parent.absolute()):
            outcome = invoke(function, event, client=args.runtime_client)
    except KeyboardInterrupt:
        _say("interrupted: the function's process was stopped")
        return 130
    _report(function, outcome)
    # The function's answer may quote what a caller sent (a queue name): escaped as the CLI
    # escapes every value it prints, in JSON's own escapes (the answer stays the same JSON).
    sys.stdout.write(escape_json(outcome.payload.decode("utf-8", errors="replace").rstrip("\n"))
                     + "\n")
    sys.stdout.flush()
    return 0 if outcome.ok else 1


def _relative(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd())) or "."
    return str(path)


def _report(function: Function, outcome: Outcome) -> None:
    if outcome.kind == "timeout":
        print(json.loads(outcome.payload)["errorMessage"], file=sys.stderr)
    lines = [f"END RequestId: {outcome.request_id}"]
    report = [f"REPORT RequestId: {outcome.request_id}"]
    if outcome.init_ms is not None:
        report.append(f"Init Duration: {outcome.init_ms:.2f} ms")
    if outcome.duration_ms is not None:
        report += [f"Duration: {outcome.duration_ms:.2f} ms",
                   f"Billed Duration: {math.ceil(outcome.duration_ms)} ms"]
    report.append(f"Memory Size: {function.memory} MB")
    if outcome.max_memory_mb is not None:
        report.append(f"Max Memory Used: {outcome.max_memory_mb} MB")
    if outcome.kind == "timeout":
        report.append("Status: timeout")
    elif outcome.kind in ("exit", "init-error"):
        error_type = json.loads(outcome.payload or b"{}").get("errorType", "Runtime.Unknown")
        report += ["Status: error", f"Error Type: {error_type}"]
    lines.append("\t".join(report))
    print("\n".join(lines), file=sys.stderr, flush=True)


def _default_pgdata(template_dir: Path) -> Path:
    # Under the temp directory, not the project: as root, pgserver makes every ancestor of its
    # data directory readable by others, harmless under /tmp and unwelcome in a checkout.
    digest = hashlib.sha256(str(template_dir.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"pgdrain-local-{os.getuid()}-{digest}"
