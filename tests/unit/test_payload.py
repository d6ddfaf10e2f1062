"""Typed payloads: parsing JSON into dataclass models, the errors and their paths, dumping back,
model checks at registration and the JSON Schema for the OpenAPI document.

The models are at module level and this module uses ``from __future__ import annotations``, so
every annotation here is a string that pgdrain.payload must resolve.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import math
from dataclasses import InitVar, dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Annotated, Any, Literal, NewType, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgdrain.errors import ConfigError, InvalidJobError
from pgdrain.payload import MAX_DEPTH, PayloadError, check_model, dump, json_schema, parse

FAST = settings(max_examples=100, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


class Color(str, enum.Enum):  # noqa: UP042 (the classic spelling of a StrEnum)
    """A colour."""

    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


UserId = NewType("UserId", int)


@dataclass
class S:
    v: str


@dataclass
class I:  # noqa: E742
    v: int


@dataclass
class F:
    v: float


@dataclass
class B:
    v: bool


@dataclass
class N:
    v: None


@dataclass
class OptInt:
    v: int | None


@dataclass
class OptStr:
    v: Optional[str]  # noqa: UP045 (the typing spelling must work too)


@dataclass
class Li:
    v: list[int]


@dataclass
class Di:
    v: dict[str, int]


@dataclass
class A:
    v: Any


@dataclass
class BareList:
    v: list


@dataclass
class Lit:
    v: Literal["a", "b", 3]


@dataclass
class DT:
    v: datetime


@dataclass
class OptDT:
    v: datetime | None


@dataclass
class E:
    v: Color


@dataclass
class IE:
    v: Level


@dataclass
class Ann:
    v: Annotated[int, "a note"]


@dataclass
class NT:
    v: UserId


@dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int = 0


@dataclass
class Nest:
    v: Point


@dataclass
class OptLitList:
    v: list[Literal["x"] | None]


@dataclass(frozen=True)
class Item:
    sku: str
    qty: int = 1


@dataclass(frozen=True)
class Order:
    """An order to ship.

    Sent to the warehouse.
    """

    to: str
    items: list[Item]
    total: float = 0.0
    express: bool = False
    note: str | None = None
    kind: Literal["retail", "wholesale"] = "retail"
    color: Color = Color.RED
    level: Level | None = None
    placed_at: datetime | None = None
    tags: dict[str, int] = field(default_factory=dict)
    extra: Any = None
    ref: str = field(default="", metadata={"description": "The caller's reference."})


@dataclass
class Computed:
    a: int
    b: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a must not be negative")
        self.b = self.a * 2


@dataclass
class WithInitVar:
    a: int
    scale: InitVar[int] = 1


# --- parse: valid inputs --------------------------------------------------------------------

T0 = datetime(2024, 5, 1, 12, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("model", "value", "expected"),
    [
        (S, "", ""),
        (S, "héllo", "héllo"),
        (I, 0, 0),
        (I, -(10**30), -(10**30)),
        (I, 2.0, 2),
        (F, 1.5, 1.5),
        (F, 3, 3.0),
        (F, -0.0, -0.0),
        (B, True, True),
        (B, False, False),
        (N, None, None),
        (OptInt, None, None),
        (OptInt, 7, 7),
        (OptStr, None, None),
        (OptStr, "x", "x"),
        (Li, [], []),
        (Li, [1, 2, 3.0], [1, 2, 3]),
        (Di, {}, {}),
        (Di, {"a": 1, "b c": 2}, {"a": 1, "b c": 2}),
        (A, None, None),
        (A, {"k": [1, 2.5, "x", True, None, {}]}, {"k": [1, 2.5, "x", True, None, {}]}),
        (BareList, [1, "a", None], [1, "a", None]),
        (Lit, "a", "a"),
        (Lit, 3, 3),
        (DT, "2024-05-01T12:30:00Z", T0),
        (DT, "2024-05-01T14:30:00+02:00", T0),
        (DT, "2024-05-01 12:30:00.000+00:00", T0),
        (OptDT, None, None),
        (E, "blue", Color.BLUE),
        (IE, 2, Level.HIGH),
        (Ann, 5, 5),
        (NT, 5, 5),
        (Nest, {"x": 1}, Point(1, 0)),
        (Nest, {"x": 1, "y": 2}, Point(1, 2)),
        (OptLitList, ["x", None], ["x", None]),
    ],
)
def test_valid(model, value, expected):
    result = parse(model, {"v": value})
    assert isinstance(result, model)
    assert result.v == expected
    assert type(result.v) is type(expected)


def test_defaults_make_keys_optional():
    order = parse(Order, {"to": "sarah@example.com", "items": [{"sku": "A-1"}]})
    assert order == Order("sarah@example.com", [Item("A-1", 1)])
    assert order.tags == {}
    other = parse(Order, {"to": "x", "items": []})
    assert other.tags is not order.tags  # default_factory runs per instance


def test_fields_not_in_init_are_computed_and_not_accepted():
    assert parse(Computed, {"a": 2}) == Computed(2)
    assert parse(Computed, {"a": 2}).b == 4
    with pytest.raises(PayloadError, match=r"^payload\.b: unknown field$"):
        parse(Computed, {"a": 2, "b": 4})


def test_an_initvar_with_a_default_is_left_at_its_default():
    check_model(WithInitVar)
    assert parse(WithInitVar, {"a": 1}) == WithInitVar(1)
    with pytest.raises(PayloadError, match=r"^payload\.scale: unknown field$"):
        parse(WithInitVar, {"a": 1, "scale": 2})


# --- parse: invalid inputs ------------------------------------------------------------------


class Weird:
    pass


@pytest.mark.parametrize(
    ("model", "value", "path", "message"),
    [
        (S, 1, "payload.v", "must be a string"),
        (S, None, "payload.v", "must be a string"),
        (S, ["a"], "payload.v", "must be a string"),
        (I, True, "payload.v", "must be an integer"),
        (I, 1.5, "payload.v", "must be an integer"),
        (I, "1", "payload.v", "must be an integer"),
        (I, math.inf, "payload.v", "must be an integer"),
        (I, math.nan, "payload.v", "must be an integer"),
        (I, None, "payload.v", "must be an integer"),
        (F, True, "payload.v", "must be a number"),
        (F, "1.5", "payload.v", "must be a number"),
        (F, math.nan, "payload.v", "must be a finite number"),
        (F, -math.inf, "payload.v", "must be a finite number"),
        (F, 10**400, "payload.v", "must be a finite number"),
        (B, 1, "payload.v", "must be a boolean"),
        (B, "true", "payload.v", "must be a boolean"),
        (N, 0, "payload.v", "must be null"),
        (N, False, "payload.v", "must be null"),
        (OptInt, "7", "payload.v", "must be an integer or null"),
        (OptInt, 1.5, "payload.v", "must be an integer or null"),
        (OptStr, 0, "payload.v", "must be a string or null"),
        (Li, {}, "payload.v", "must be an array"),
        (Li, (1, 2), "payload.v", "must be an array"),
        (Li, "12", "payload.v", "must be an array"),
        (Li, [1, "2"], "payload.v[1]", "must be an integer"),
        (Di, [], "payload.v", "must be an object"),
        (Di, {"a": "1"}, "payload.v.a", "must be an integer"),
        (Di, {"b c": None}, 'payload.v["b c"]', "must be an integer"),
        (Di, {"x" * 100: None}, f'payload.v["{"x" * 40}..."]', "must be an integer"),
        (Di, {"\n": None}, 'payload.v["\\n"]', "must be an integer"),
        (Di, {1: 1}, "payload.v", "must have string keys"),
        (A, math.nan, "payload.v", "must be a finite number"),
        (A, {"k": [1, math.inf]}, "payload.v.k[1]", "must be a finite number"),
        (A, {1: "x"}, "payload.v", "must have string keys"),
        (A, (1, 2), "payload.v", "must be a JSON value, not tuple"),
        (A, {"s": {1, 2}}, "payload.v.s", "must be a JSON value, not set"),
        (A, Weird(), "payload.v", "must be a JSON value, not Weird"),
        (Lit, "c", "payload.v", "must be one of 'a', 'b', 3"),
        (Lit, "3", "payload.v", "must be one of 'a', 'b', 3"),
        (Lit, 3.0, "payload.v", "must be one of 'a', 'b', 3"),
        (Lit, None, "payload.v", "must be one of 'a', 'b', 3"),
        (OptLitList, ["y"], "payload.v[0]", "must be one of 'x' or null"),
        (DT, "2024-05-01T12:30:00", "payload.v", "must include a timezone"),
        (DT, "2024-05-01", "payload.v", "must include a timezone"),
        (DT, "yesterday", "payload.v", "must be an ISO 8601 date-time"),
        (DT, "", "payload.v", "must be an ISO 8601 date-time"),
        (DT, 1714566600, "payload.v", "must be a date-time string"),
        (OptDT, 0, "payload.v", "must be a date-time string or null"),
        (OptDT, "2024-05-01T12:30:00", "payload.v", "must include a timezone"),
        (E, "green", "payload.v", "must be one of 'red', 'blue'"),
        (E, "RED", "payload.v", "must be one of 'red', 'blue'"),
        (E, 1, "payload.v", "must be one of 'red', 'blue'"),
        (IE, "1", "payload.v", "must be one of 1, 2"),
        (IE, True, "payload.v", "must be one of 1, 2"),
        (IE, 3, "payload.v", "must be one of 1, 2"),
        (Ann, "5", "payload.v", "must be an integer"),
        (NT, 1.5, "payload.v", "must be an integer"),
        (Nest, [], "payload.v", "must be an object"),
        (Nest, {}, "payload.v.x", "is required"),
        (Nest, {"x": "1"}, "payload.v.x", "must be an integer"),
        (Nest, {"x": 1, "z": 1}, "payload.v.z", "unknown field"),
        (Nest, {"x": 1, 2: 1}, "payload.v", "must have string keys"),
    ],
)
def test_invalid(model, value, path, message):
    with pytest.raises(PayloadError) as info:
        parse(model, {"v": value})
    assert (info.value.field, str(info.value)) == (path, f"{path}: {message}")
    assert info.value.index is None


@pytest.mark.parametrize(
    ("data", "path", "message"),
    [
        ({"items": []}, "payload.to", "is required"),
        ({"to": "x"}, "payload.items", "is required"),
        ({"to": "x", "items": [{"sku": "a"}, {"sku": "b"}, {"qty": 1}]}, "payload.items[2].sku",
         "is required"),
        ({"to": "x", "items": [{"sku": "a", "qty": "2"}]}, "payload.items[0].qty",
         "must be an integer"),
        ({"to": "x", "items": [], "kind": "gift"}, "payload.kind",
         "must be one of 'retail', 'wholesale'"),
        ({"to": "x", "items": [], "level": "low"}, "payload.level", "must be one of 1, 2 or null"),
        ({"to": "x", "items": [], "tags": {"a": 1.5}}, "payload.tags.a", "must be an integer"),
        # an unknown key is reported before a missing one: it is usually the misspelling of it
        ({"too": "x", "items": []}, "payload.too", "unknown field"),
        ({"to": "x", "items": [], "": 1}, 'payload[""]', "unknown field"),
    ],
)
def test_invalid_order(data, path, message):
    with pytest.raises(PayloadError) as info:
        parse(Order, data)
    assert (info.value.field, str(info.value)) == (path, f"{path}: {message}")


@pytest.mark.parametrize("data", [None, [], "x", 1, 1.5, True, ({"to": "x"},)])
def test_top_level_must_be_an_object(data):
    with pytest.raises(PayloadError) as info:
        parse(Order, data)
    assert (info.value.field, str(info.value)) == ("payload", "payload: must be an object")


def test_field_and_index_name_the_job_in_a_batch():
    with pytest.raises(PayloadError) as info:
        parse(Order, {"to": 1, "items": []}, field="body", index=4)
    error = info.value
    assert isinstance(error, InvalidJobError)
    assert isinstance(error, ValueError)
    assert (error.field, error.index) == ("body.to", 4)
    assert str(error) == "jobs[4].body.to: must be a string"


def test_a_value_error_from_post_init_is_a_payload_error():
    with pytest.raises(PayloadError) as info:
        parse(Computed, {"a": -1})
    assert str(info.value) == "payload: a must not be negative"


def test_parsing_an_unsupported_model_is_a_config_error():
    with pytest.raises(ConfigError):
        parse(dict, {})


# --- nesting depth --------------------------------------------------------------------------


def nested_list(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def nested_object(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("nested", [nested_list, nested_object])
def test_deep_nesting_is_a_payload_error_not_a_recursion_error(nested):
    with pytest.raises(PayloadError) as info:
        parse(A, {"v": nested(10_000)})
    assert str(info.value).endswith(f": must not be nested more than {MAX_DEPTH} levels deep")
    assert info.value.field.startswith("payload.v")


def test_nesting_up_to_the_limit_is_accepted():
    # The payload object is level 1, so its field may hold MAX_DEPTH - 1 levels.
    assert parse(A, {"v": nested_list(MAX_DEPTH - 1)}).v == nested_list(MAX_DEPTH - 1)
    with pytest.raises(PayloadError) as info:
        parse(A, {"v": nested_list(MAX_DEPTH)})
    assert info.value.field == "payload.v" + "[0]" * (MAX_DEPTH - 1)


def test_typed_containers_count_towards_the_depth_too():
    @dataclass
    class Deep:
        v: list[list[Any]]

    with pytest.raises(PayloadError, match="must not be nested more than"):
        parse(Deep, {"v": [[nested_list(10_000)]]})


# --- dump -----------------------------------------------------------------------------------


def test_dump():
    order = Order("x", [Item("a", 2)], total=9.5, level=Level.HIGH, placed_at=T0,
                  tags={"t": 1}, extra={"k": [1, None]})
    data = dump(order)
    assert data == {
        "to": "x", "items": [{"sku": "a", "qty": 2}], "total": 9.5, "express": False,
        "note": None, "kind": "retail", "color": "red", "level": 2,
        "placed_at": "2024-05-01T12:30:00+00:00", "tags": {"t": 1}, "extra": {"k": [1, None]},
        "ref": "",
    }
    assert type(data["color"]) is str
    assert type(data["level"]) is int
    assert json.loads(json.dumps(data)) == data
    assert parse(Order, data) == order


def test_dump_leaves_out_fields_not_in_init():
    assert dump(Computed(3)) == {"a": 3}
    assert parse(Computed, dump(Computed(3))) == Computed(3)


@pytest.mark.parametrize("value", [{1, 2}, b"x", object(), {1: "a"}, date(2024, 1, 1)])
def test_dump_rejects_what_is_not_json(value):
    with pytest.raises(TypeError):
        dump(value)


# --- check_model ----------------------------------------------------------------------------


@dataclass
class HasSet:
    ids: set[int]


@dataclass
class HasTuple:
    name: str
    pair: tuple[int, int]


@dataclass
class HasBareTuple:
    pair: tuple


@dataclass
class HasUnion:
    v: int | str


@dataclass
class HasIntKeys:
    v: dict[int, str]


@dataclass
class HasBoolLiteral:
    v: Literal[True]


class FloatEnum(enum.Enum):
    HALF = 0.5


@dataclass
class HasFloatEnum:
    v: FloatEnum


@dataclass
class HasDate:
    v: date


@dataclass
class HasBytes:
    v: bytes


@dataclass
class HasPlainClass:
    v: Weird


@dataclass
class HasOptionalSet:
    v: list[set[int]] | None


@dataclass
class Outer:
    name: str
    inner: HasSet


@dataclass
class Tree:
    children: list[Tree]


@dataclass
class PingA:
    b: PingB | None


@dataclass
class PingB:
    a: PingA | None


@dataclass
class Unresolvable:
    v: NoSuchType  # type: ignore[name-defined]  # noqa: F821


@dataclass
class RequiredInitVar:
    a: int
    scale: InitVar[int]


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (HasSet, "payload model HasSet: field 'ids' has unsupported type set[int]"),
        (HasTuple, "payload model HasTuple: field 'pair' has unsupported type tuple[int, int]"),
        (HasBareTuple, "payload model HasBareTuple: field 'pair' has unsupported type tuple"),
        (HasUnion, "payload model HasUnion: field 'v' has unsupported type int | str (the only "
                   "union allowed is X | None)"),
        (HasIntKeys, "payload model HasIntKeys: field 'v' has unsupported type dict[int, str] "
                     "(dict keys must be str)"),
        (HasBoolLiteral, "payload model HasBoolLiteral: field 'v' has unsupported type "
                         "Literal[True] (Literal values must be strings or integers)"),
        (HasFloatEnum, f"payload model HasFloatEnum: field 'v' has unsupported type {__name__}."
                       "FloatEnum (enum values must be strings or integers)"),
        (HasDate, "payload model HasDate: field 'v' has unsupported type datetime.date"),
        (HasBytes, "payload model HasBytes: field 'v' has unsupported type bytes"),
        (HasPlainClass, f"payload model HasPlainClass: field 'v' has unsupported type "
                        f"{__name__}.Weird"),
        (HasOptionalSet, "payload model HasOptionalSet: field 'v' has unsupported type set[int]"),
        (Outer, "payload model HasSet: field 'ids' has unsupported type set[int] (in payload "
                "model Outer)"),
        (Tree, "payload model Tree: recursive models are not supported (Tree -> Tree)"),
        (PingA, "payload model PingA: recursive models are not supported (PingA -> PingB -> "
                "PingA)"),
        (Unresolvable, "payload model Unresolvable: cannot resolve its type annotations: name "
                       "'NoSuchType' is not defined"),
        (RequiredInitVar, "payload model RequiredInitVar: field 'scale' is an InitVar without a "
                          "default, which a payload cannot fill"),
        (Weird, "payload model must be a dataclass type, not Weird"),
        (dict, "payload model must be a dataclass type, not dict"),
        (Point(1), "payload model must be a dataclass type, not Point(x=1, y=0)"),
        (None, "payload model must be a dataclass type, not None"),
        ("Order", "payload model must be a dataclass type, not 'Order'"),
    ],
)
def test_check_model_rejects(model, message):
    with pytest.raises(ConfigError) as info:
        check_model(model)
    assert str(info.value) == message


@pytest.mark.parametrize("model", [S, I, F, B, N, OptInt, OptStr, Li, Di, A, BareList, Lit, DT,
                                   OptDT, E, IE, Ann, NT, Nest, OptLitList, Order, Computed])
def test_check_model_accepts(model):
    assert check_model(model) is None


def test_a_model_local_to_a_function_resolves_its_own_types():
    @dataclass
    class Local:
        when: datetime
        color: Color | None = None

    check_model(Local)
    assert parse(Local, {"when": "2024-05-01T12:30:00Z"}) == Local(T0)


# --- json_schema ----------------------------------------------------------------------------


def test_json_schema():
    assert json_schema(Order) == {
        "title": "Order",
        "description": "An order to ship.\n\nSent to the warehouse.",
        "type": "object",
        "properties": {
            "to": {"type": "string"},
            "items": {
                "type": "array",
                "items": {
                    "title": "Item",
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string"},
                        "qty": {"type": "integer", "default": 1},
                    },
                    "required": ["sku"],
                    "additionalProperties": False,
                },
            },
            "total": {"type": "number", "default": 0.0},
            "express": {"type": "boolean", "default": False},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "kind": {"type": "string", "enum": ["retail", "wholesale"], "default": "retail"},
            "color": {"description": "A colour.", "type": "string", "enum": ["red", "blue"],
                      "default": "red"},
            "level": {"anyOf": [{"type": "integer", "enum": [1, 2]}, {"type": "null"}],
                      "default": None},
            "placed_at": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}],
                          "default": None},
            "tags": {"type": "object", "additionalProperties": {"type": "integer"}},
            "extra": {"default": None},
            "ref": {"description": "The caller's reference.", "type": "string", "default": ""},
        },
        "required": ["to", "items"],
        "additionalProperties": False,
    }
    json.dumps(json_schema(Order), allow_nan=False)  # JSON as it is


@pytest.mark.parametrize(
    ("model", "schema"),
    [
        (N, {"type": "null"}),
        (A, {}),
        (BareList, {"type": "array", "items": {}}),
        (Lit, {"enum": ["a", "b", 3]}),
        (Nest, {"title": "Point", "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}},
                "required": ["x"], "additionalProperties": False}),
    ],
)
def test_json_schema_of_a_field(model, schema):
    assert json_schema(model)["properties"]["v"] == schema


def test_json_schema_skips_the_generated_docstring():
    assert Point.__doc__  # dataclasses writes "Point(x: int, y: int = 0)"
    assert "description" not in json_schema(Point)
    assert "description" not in json_schema(Computed)


# --- properties -----------------------------------------------------------------------------

JSON_SCALARS = (st.none() | st.booleans() | st.integers() | st.text(max_size=8)
                | st.floats(allow_nan=False, allow_infinity=False))
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=3),
    max_leaves=8,
)
TIMEZONES = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
ITEMS = st.builds(Item, sku=st.text(max_size=8), qty=st.integers())
ORDERS = st.builds(
    Order,
    to=st.text(max_size=20),
    items=st.lists(ITEMS, max_size=4),
    total=st.floats(allow_nan=False, allow_infinity=False),
    express=st.booleans(),
    note=st.none() | st.text(max_size=8),
    kind=st.sampled_from(["retail", "wholesale"]),
    color=st.sampled_from(Color),
    level=st.none() | st.sampled_from(Level),
    placed_at=st.none() | st.datetimes(timezones=TIMEZONES),
    tags=st.dictionaries(st.text(max_size=6), st.integers(), max_size=3),
    extra=JSON_VALUES,
    ref=st.text(max_size=8),
)


@FAST
@given(ORDERS)
def test_round_trip_through_json_text(order):
    data = json.loads(json.dumps(dump(order), allow_nan=False))
    parsed = parse(Order, data)
    assert parsed == order
    assert dump(parsed) == dump(order)


def all_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    paths = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            paths += all_paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            paths += all_paths(item, (*prefix, i))
    return paths


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = replaced(value[path[0]], path[1:], new)
    return copy


ANYTHING = (JSON_VALUES | st.floats() | st.integers(min_value=10**300) | st.tuples(st.integers())
            | st.frozensets(st.integers(), max_size=2) | st.binary(max_size=3)
            | st.dictionaries(st.integers(), st.integers(), min_size=1, max_size=2)
            | st.datetimes() | st.sampled_from(Color))


@FAST
@given(ORDERS, st.data())
def test_any_mutation_parses_or_is_a_payload_error(order, data):
    doc = dump(order)
    path = data.draw(st.sampled_from(all_paths(doc)))
    mutated = replaced(doc, path, data.draw(ANYTHING))
    try:
        result = parse(Order, mutated)
    except PayloadError as exc:
        assert exc.field.startswith("payload")
    else:
        assert isinstance(result, Order)


@FAST
@given(JSON_VALUES)
def test_arbitrary_json_parses_or_is_a_payload_error(data):
    with contextlib.suppress(PayloadError):
        parse(Order, data)


REQUIRED = {"to", "items"}
TYPED_STRINGS = {"to", "ref"}


@FAST
@given(ORDERS.filter(lambda o: o.items), st.data())
def test_invalid_mutations_are_rejected_at_their_path(order, data):
    doc = dump(order)
    i = data.draw(st.integers(0, len(order.items) - 1))
    mutation = data.draw(st.sampled_from(["drop", "unknown", "unknown-item", "wrong-type",
                                          "wrong-item"]))
    if mutation == "drop":
        key = data.draw(st.sampled_from(sorted(REQUIRED)))
        del doc[key]
        expected = (f"payload.{key}", "is required")
    elif mutation == "unknown":
        doc["shipping"] = data.draw(JSON_VALUES)
        expected = ("payload.shipping", "unknown field")
    elif mutation == "unknown-item":
        doc["items"][i]["colour"] = data.draw(JSON_VALUES)
        expected = (f"payload.items[{i}].colour", "unknown field")
    elif mutation == "wrong-type":
        key = data.draw(st.sampled_from(sorted(TYPED_STRINGS)))
        doc[key] = data.draw(JSON_VALUES.filter(lambda v: not isinstance(v, str)))
        expected = (f"payload.{key}", "must be a string")
    else:
        doc["items"][i]["qty"] = data.draw(st.text(max_size=3) | st.booleans() | st.just(0.5))
        expected = (f"payload.items[{i}].qty", "must be an integer")
    with pytest.raises(PayloadError) as info:
        parse(Order, doc)
    assert (info.value.field, str(info.value)) == (expected[0], f"{expected[0]}: {expected[1]}")


def test_parse_does_not_mutate_its_input():
    data = {"to": "x", "items": [{"sku": "a", "qty": 2.0}], "tags": {"a": 1}}
    before = json.dumps(data)
    parse(Order, data)
    assert json.dumps(data) == before


def test_models_are_ordinary_dataclasses():
    order = parse(Order, {"to": "x", "items": []})
    with pytest.raises(dataclasses.FrozenInstanceError):
        order.to = "y"  # type: ignore[misc]
