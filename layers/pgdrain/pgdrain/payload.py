"""Typed job payloads: a job type's payload declared as a standard-library ``@dataclass``.

``@pgdrain.job("send-email", payload=Email)`` names the model. The enqueue function checks each
payload against it (``parse``; a mismatch is a ``PayloadError`` naming the path of the bad
value, such as ``payload.items[2].sku``), the drain parses the stored JSON into an ``Email`` for
the handler, and the OpenAPI document describes it with ``json_schema``::

    @dataclass(frozen=True)
    class Email:
        \"\"\"An email to send.\"\"\"
        to: str
        subject: str
        cc: list[str] = field(default_factory=list)
        send_after: datetime | None = None

Field types: ``str``, ``int``, ``float``, ``bool``, ``None``, ``X | None`` (``Optional[X]``),
``list[X]``, ``dict[str, X]``, ``Any`` (any JSON value), ``Literal[...]`` of strings and
integers, ``datetime`` (an ISO 8601 string with a timezone), ``enum.Enum`` subclasses with string
or integer values, and other such dataclasses (not recursive ones). ``Annotated[X, ...]`` and
``NewType`` are treated as ``X``. A field with a default or ``default_factory`` may be left out;
keys the model does not name are errors. A ``ValueError`` from the model's ``__post_init__``
becomes a ``PayloadError`` at the object's path, so a model can add its own checks.

Parsing is strict, as JSON has it: no string-to-number coercion, ``bool`` is not an ``int``,
an integer is accepted for a ``float`` (and an integral float for an ``int``), and non-finite
numbers are rejected. Objects and arrays may nest at most ``MAX_DEPTH`` levels.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import math
import re
import types
import typing
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from .errors import ConfigError, InvalidJobError

T = TypeVar("T")

MAX_DEPTH = 32
"""Objects and arrays nested deeper than this are rejected (the payload object is level 1)."""

_KEY_SHOWN = 40  # characters of an unknown key quoted in a field path
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class PayloadError(InvalidJobError):
    """A payload does not match its job type's model.

    ``field`` is the path of the offending value inside the payload (``payload.items[2].sku``).
    """


# --- paths and internal errors -------------------------------------------------------------

# A path is built per value, so it is kept cheap: the root field name, or (parent, segment)
# where a segment is a key (str) or an array index (int). It is rendered only for an error.
_Path = str | tuple[Any, str | int]


def _render(path: _Path) -> str:
    parts: list[str] = []
    while isinstance(path, tuple):
        path, segment = path
        if isinstance(segment, int):
            parts.append(f"[{segment}]")
        elif len(segment) <= _KEY_SHOWN and _IDENTIFIER.match(segment):
            parts.append(f".{segment}")
        else:
            shown = segment if len(segment) <= _KEY_SHOWN else segment[:_KEY_SHOWN] + "..."
            parts.append(f"[{json.dumps(shown)}]")
    return path + "".join(reversed(parts))


class _Invalid(Exception):
    """Raised inside parsing; ``parse`` turns it into a PayloadError with the rendered path."""

    def __init__(self, path: _Path, message: str, *, mismatch: bool = False):
        super().__init__(message)
        self.path = path
        self.message = message
        self.mismatch = mismatch
        """The value is of the wrong JSON kind (so ``X | None`` can say "... or null")."""


def _enter(path: _Path, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _Invalid(path, f"must not be nested more than {MAX_DEPTH} levels deep")


# --- the compiled form of a model ----------------------------------------------------------


class _Node:
    """How to parse and describe the values of one field type."""

    expected = "a JSON value"  # for "must be ..." messages

    def parse(self, value: Any, path: _Path, depth: int) -> Any:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def mismatch(self, path: _Path) -> _Invalid:
        return _Invalid(path, f"must be {self.expected}", mismatch=True)


class _Str(_Node):
    expected = "a string"

    def parse(self, value: Any, path: _Path, depth: int) -> Any:
        if not isinstance(value, str):
            raise self.mismatch(path)
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "string"}


class _Int(_Node):
    expected = "an integer"

    def parse(self, value: Any, path: _Path, depth: int) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        raise self.mismatch(path)

    def schema(self) -> dict[str, Any]:
        return {"type": "integer"}


class _Float(_Node):
    expected = "a number"

    def parse(self, value: Any, path: _Path, depth: int) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.mismatch(path)
        try:
            number = float(value)
        except OverflowError:  # an integer beyond the float range
            number = math.inf
        if not math.isfinite(number):
            raise _Invalid(path, "must be a finite number")
        return number

    def schema(self) -> dict[str, Any]:
        return {"type": "number"}


class _Bool(_Node):
    expected = "a boolean"

    def parse(self, value: Any, path: _Path, depth: int) -> Any:
        if not isinstance(value, bool):
            raise self.mismatch(path)
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


class _Null(_Node):
    expected = "null"

    def parse(self, value: Any, path: _Path, depth: int) -> Any:
        if value is not None:
            raise self.mismatch(path)
        return None

    def schema(self) -> dict[str, Any]:
        return {"type": "null"}


class _AnyJson(_Node):
    """Any JSON value, returned as it is after checking it is one."""

    def parse(self, value: Any, path: _Path, depth: int) -> Any:
        if value is None or isinstance(value, str | bool | int):
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise _Invalid(path, "must be a finite number")
            return value
        if isinstance(value, list):
            _enter(path, depth)
            for i, item in enumerate(value):
                self.parse(item, (path, i), depth + 1)
            return value
        if isinstance(value, dict):
            _enter(path, depth)
            for key, item in value.items():
                if not isinstance(key, str):
                    raise _Invalid(path, "must have string keys")
                self.parse(item, (path, key), depth + 1)
            return value
        raise _Invalid(path, f"must be a JSON value, not {type(value).__name__}")

    def schema(self) -> dict[str, Any]:
        return {}


class _Optional(_Node):
    def __init__(self, inner: _Node):
        self.inner = inner
        self.expected = f"{inner.expected} or null"

    def parse(self, value: Any, path: _Path, depth: int) -> Any:
        if value is None:
            return None
        try:
            return self.inner.parse(value, path, depth)
        except _Invalid as exc:
            if exc.mismatch and exc.path is path:
                raise self.mismatch(path) from None
            raise

    def schema(self) -> dict[str, Any]:
        inner = self.inner.schema()
        return {"anyOf": [inner, {"type": "null"}]} if inner else {}  # {} already allows null


class _List(_Node):
    expected = "an array"

    def __init__(self, item: _Node):
        self.item = item

    def parse(self, value: Any, path: _Path, depth: int) -> Any:
        if not isinstance(value, list):
            raise self.mismatch(path)
        _enter(path, depth)
        parse_item = self.item.parse
        return [parse_item(item, (path, i), depth + 1) for i, item in enumerate(value)]

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "items": self.item.schema()}


class _Dict(_Node):
    expected = "an object"

    def __init__(self, value: _Node):
        self.value = value

    def parse(self, value: Any, path: _Path, depth: int) -> Any:
        if not isinstance(value, dict):
            raise self.mismatch(path)
        _enter(path, depth)
        parse_value = self.value.parse
        result = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Invalid(path, "must have string keys")
            result[key] = parse_value(item, (path, key), depth + 1)
        return result

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": self.value.schema()}


def _choices(values: typing.Iterable[Any]) -> str:
    return "one of " + ", ".join(repr(v) for v in values)


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    if all(isinstance(v, str) for v in values):
        return {"type": "string", "enum": values}
    if all(isinstance(v, int) for v in values):
        return {"type": "integer", "enum": values}
    return {"enum": values}


class _Literal(_Node):
    def __init__(self, values: tuple[Any, ...]):
        self.values = list(dict.fromkeys(values))
        self.allowed = frozenset(self.values)
        self.expected = _choices(self.values)

    def parse(self, value: Any, path: _Path, depth: int) -> Any:
        # bool is excluded (True == 1); str and int never compare equal to each other.
        if isinstance(value, bool) or not isinstance(value, str | int) or value not in self.allowed:
            raise self.mismatch(path)
        return value

    def schema(self) -> dict[str, Any]:
        return _enum_schema(list(self.values))


class _Enum(_Node):
    def __init__(self, cls: type[enum.Enum]):
        self.cls = cls
        self.members = {m.value: m for m in cls}
        self.expected = _choices(self.members)

    def parse(self, value: Any, path: _Path, depth: int) -> Any:
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise self.mismatch(path)
        member = self.members.get(value)
        if member is None:
            raise self.mismatch(path)
        return member

    def schema(self) -> dict[str, Any]:
        schema = _enum_schema(list(self.members))
        doc = _own_doc(self.cls)
        return {"description": doc, **schema} if doc else schema


class _DateTime(_Node):
    expected = "a date-time string"

    def parse(self, value: Any, path: _Path, depth: int) -> Any:
        if not isinstance(value, str):
            raise self.mismatch(path)
        try:
            result = datetime.fromisoformat(value)
        except ValueError:
            raise _Invalid(path, "must be an ISO 8601 date-time") from None
        if result.tzinfo is None or result.utcoffset() is None:
            raise _Invalid(path, "must include a timezone")
        return result

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "format": "date-time"}


@dataclasses.dataclass(slots=True)
class _Field:
    name: str
    node: _Node
    required: bool
    field: dataclasses.Field[Any]


class _Dataclass(_Node):
    expected = "an object"

    def __init__(self, cls: type):
        self.cls = cls
        self.fields: list[_Field] = []
        self.by_name: dict[str, _Field] = {}

    def parse(self, value: Any, path: _Path, depth: int) -> Any:
        if not isinstance(value, dict):
            raise self.mismatch(path)
        _enter(path, depth)
        by_name = self.by_name
        for key in value:
            if not isinstance(key, str):
                raise _Invalid(path, "must have string keys")
            if key not in by_name:
                raise _Invalid((path, key), "unknown field")
        kwargs = {}
        for f in self.fields:
            if f.name in value:
                kwargs[f.name] = f.node.parse(value[f.name], (path, f.name), depth + 1)
            elif f.required:
                raise _Invalid((path, f.name), "is required")
        try:
            return self.cls(**kwargs)
        except PayloadError:
            raise
        except ValueError as exc:  # the model's own check in __post_init__
            raise _Invalid(path, str(exc) or "is invalid") from exc

    def schema(self) -> dict[str, Any]:
        properties = {}
        for f in self.fields:
            prop = f.node.schema()
            description = f.field.metadata.get("description")
            if isinstance(description, str) and description:
                prop = {"description": description, **prop}
            if f.field.default is not dataclasses.MISSING:
                try:
                    default = dump(f.field.default)
                    json.dumps(default, allow_nan=False)
                except (TypeError, ValueError):
                    pass
                else:
                    prop = {**prop, "default": default}
            properties[f.name] = prop
        schema: dict[str, Any] = {"title": self.cls.__name__}
        doc = _own_doc(self.cls)
        if doc:
            schema["description"] = doc
        schema["type"] = "object"
        schema["properties"] = properties
        required = [f.name for f in self.fields if f.required]
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
        return schema


def _own_doc(cls: type) -> str | None:
    """The class's explicit docstring; None for a generated one (dataclasses' ``Name(a: int)``)."""
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str) or not doc.strip() or doc == "An enumeration.":
        return None
    if dataclasses.is_dataclass(cls):
        try:
            generated = cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")
        except (TypeError, ValueError):
            generated = cls.__name__
        if doc in (generated, cls.__name__):
            return None
    return inspect.cleandoc(doc)


# --- compiling models ----------------------------------------------------------------------

_COMPILED: dict[type, _Dataclass] = {}
_SCALARS: dict[Any, Callable[[], _Node]] = {
    str: _Str, int: _Int, float: _Float, bool: _Bool, type(None): _Null, None: _Null,
    datetime: _DateTime,
}


class _Unsupported(Exception):
    """A field type this module cannot handle; the message says why."""


def _type_name(tp: Any) -> str:
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__qualname__ if tp.__module__ == "builtins" else f"{tp.__module__}.{tp.__name__}"
    return repr(tp).replace("typing.", "")


def _compile_type(tp: Any, stack: list[type]) -> _Node:
    tp = _unwrapped(tp)
    if tp is Any:
        return _AnyJson()
    try:
        scalar = _SCALARS.get(tp)
    except TypeError:  # an unhashable annotation
        scalar = None
    if scalar is not None:
        return scalar()
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _compile_optional(tp, args, stack)
    if origin is typing.Literal:
        return _compile_literal(tp, args)
    if tp is list or origin is list:
        return _List(_compile_type(args[0], stack) if args else _AnyJson())
    if tp is dict or origin is dict:
        if args and args[0] is not str:
            raise _Unsupported(f"unsupported type {_type_name(tp)} (dict keys must be str)")
        return _Dict(_compile_type(args[1], stack) if args else _AnyJson())
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _compile_enum(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _compile_dataclass(tp, stack)
    raise _Unsupported(f"unsupported type {_type_name(tp)}")


def _unwrapped(tp: Any) -> Any:
    """``tp`` without ``Annotated[...]`` and ``NewType`` wrappers."""
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif isinstance(tp, typing.NewType):
            tp = tp.__supertype__
        else:
            return tp


def _compile_optional(tp: Any, args: tuple[Any, ...], stack: list[type]) -> _Node:
    others = [a for a in args if a is not type(None)]
    if len(others) != 1 or len(others) == len(args):
        raise _Unsupported(f"unsupported type {_type_name(tp)} (the only union allowed is "
                           "X | None)")
    return _Optional(_compile_type(others[0], stack))


def _compile_literal(tp: Any, args: tuple[Any, ...]) -> _Node:
    if not args or any(isinstance(a, bool) or not isinstance(a, str | int) for a in args):
        raise _Unsupported(f"unsupported type {_type_name(tp)} (Literal values must be "
                           "strings or integers)")
    return _Literal(args)


def _compile_enum(tp: type[enum.Enum]) -> _Node:
    values = [m.value for m in tp]
    if not values:
        raise _Unsupported(f"enum {_type_name(tp)} has no members")
    if any(isinstance(v, bool) or not isinstance(v, str | int) for v in values):
        raise _Unsupported(f"unsupported type {_type_name(tp)} (enum values must be strings "
                           "or integers)")
    return _Enum(tp)


def _compile_dataclass(cls: type, stack: list[type]) -> _Dataclass:
    compiled = _COMPILED.get(cls)
    if compiled is not None:
        return compiled
    if cls in stack:
        cycle = " -> ".join(c.__qualname__ for c in [*stack[stack.index(cls):], cls])
        raise ConfigError(f"payload model {stack[0].__qualname__}: recursive models are not "
                          f"supported ({cycle})")
    stack.append(cls)
    try:
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except Exception as exc:  # NameError for an unresolvable forward reference, and others
            raise ConfigError(f"payload model {cls.__qualname__}: cannot resolve its type "
                              f"annotations: {exc}") from exc
        node = _Dataclass(cls)
        all_fields: dict[str, dataclasses.Field[Any]] = cls.__dataclass_fields__  # type: ignore
        for name, f in all_fields.items():
            if isinstance(hints.get(name), dataclasses.InitVar) and (
                    f.default is dataclasses.MISSING):
                raise ConfigError(f"payload model {cls.__qualname__}: field {name!r} is an "
                                  "InitVar without a default, which a payload cannot fill")
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            try:
                field_node = _compile_type(hints.get(f.name, f.type), stack)
            except _Unsupported as exc:
                where = "" if cls is stack[0] else f" (in payload model {stack[0].__qualname__})"
                raise ConfigError(f"payload model {cls.__qualname__}: field {f.name!r} has "
                                  f"{exc}{where}") from None
            required = (f.default is dataclasses.MISSING and
                        f.default_factory is dataclasses.MISSING)
            node.fields.append(_Field(f.name, field_node, required, f))
        node.by_name = {f.name: f for f in node.fields}
    finally:
        stack.pop()
    _COMPILED[cls] = node
    return node


def _compile(model: Any) -> _Dataclass:
    if not (isinstance(model, type) and dataclasses.is_dataclass(model)):
        shown = model.__qualname__ if isinstance(model, type) else repr(model)
        raise ConfigError(f"payload model must be a dataclass type, not {shown}")
    return _compile_dataclass(model, [])


# --- the public functions ------------------------------------------------------------------


def check_model(model: Any) -> None:
    """Raise ConfigError unless ``model`` is a dataclass type whose fields are all supported.

    The message names the model, the field and its type. Called when a handler is registered.
    """
    _compile(model)


def parse(model: type[T], data: Any, *, field: str = "payload", index: int | None = None) -> T:
    """Validate JSON-decoded ``data`` against ``model`` and return the model instance.

    Raises PayloadError with ``field`` set to the path of the first bad value (``field`` is the
    root of that path) and ``index`` passed through (a job's position in a batch).
    """
    node = _compile(model)
    try:
        return node.parse(data, field, 1)  # type: ignore[no-any-return]
    except _Invalid as exc:
        raise PayloadError(exc.message, field=_render(exc.path), index=index) from None


def dump(value: Any) -> Any:
    """``value`` (a model instance, or any supported value) as JSON-compatible data.

    Datetimes become ISO 8601 strings, enum members their values, dataclasses objects of their
    ``init`` fields; ``parse(Model, dump(instance)) == instance``.
    """
    if isinstance(value, enum.Enum):
        return value.value
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: dump(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, list | tuple):
        return [dump(item) for item in value]
    if isinstance(value, dict):
        result = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"cannot dump a dict with a {type(key).__name__} key")
            result[key] = dump(item)
        return result
    raise TypeError(f"cannot dump a {type(value).__name__} as JSON")


def json_schema(model: Any) -> dict[str, Any]:
    """A JSON Schema (the draft 2020-12 subset of OpenAPI 3.1) describing ``model``'s payloads.

    Nested dataclasses are inlined; ``X | None`` is ``anyOf`` with ``{"type": "null"}``. A class's
    own docstring becomes ``description``, as does a field's ``metadata["description"]``.
    """
    return _compile(model).schema()
