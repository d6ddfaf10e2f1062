"""Array parameters: every element quoted, so each is its exact text (no SQL NULL by accident);
and job ids checked before they reach int() or the database."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from pgdrain.db import array_literal
from pgdrain.errors import InvalidJobId
from pgdrain.models import MAX_JOB_ID
from pgdrain.store import job_id


@pytest.mark.parametrize(("values", "literal"), [
    ([], "{}"),
    (["null", "Null", "NULL", None], '{"null","Null","NULL",NULL}'),
    (['say "hi"', "back\\slash", "{a,b}", " "], '{"say \\"hi\\"","back\\\\slash","{a,b}"," "}'),
    ([1, 2**62, -3], '{"1","4611686018427387904","-3"}'),
    ([0.5, 1e-05], '{"0.5","1e-05"}'),
    ([True, False], '{"t","f"}'),
    # In UTC: PostgreSQL refuses offsets past 15:59, which Python allows.
    ([datetime(2030, 1, 1, 23, 0, tzinfo=timezone(timedelta(hours=-23, minutes=-59)))],
     '{"2030-01-02T22:59:00+00:00"}'),
])
def test_every_element_is_quoted(values, literal):
    assert array_literal(values) == literal


def test_an_unknown_element_type_is_refused():
    with pytest.raises(TypeError, match="no array element form for dict"):
        array_literal([{}])


@pytest.mark.parametrize("value", [1, "1", MAX_JOB_ID, str(MAX_JOB_ID)])
def test_job_ids(value):
    assert job_id(value) == int(value)


@pytest.mark.parametrize("value", [0, -1, MAX_JOB_ID + 1, "9" * 20, "9" * 5000,
                                   pytest.param(10**5000, id="10**5000"), True, "1.0", " 1",
                                   "\u0661", None, 1.0])
def test_what_cannot_be_a_job_id_is_refused_with_a_readable_message(value):
    with pytest.raises(InvalidJobId, match="a job id is an integer from 1 to 9223372036854775807"
                       ) as info:
        job_id(value)
    assert len(str(info.value)) < 140


def test_int_and_float_subclasses_are_written_as_numbers():
    import enum

    class Level(enum.IntEnum):
        HIGH = -1

    class Ratio(float):
        def __repr__(self) -> str:
            return "Ratio(...)"

    assert array_literal([Level.HIGH, Ratio(0.5)]) == '{"-1","0.5"}'


def test_a_payload_too_big_for_memory_fails_its_job_alone(monkeypatch):
    import json

    from pgdrain import claimed

    def out_of_memory(text):
        raise MemoryError

    monkeypatch.setattr(json, "loads", out_of_memory)
    assert claimed.decode_json('{"x": 1}') == (
        None, "the stored JSON (8 characters) does not fit in this process's memory once "
              "decoded")
