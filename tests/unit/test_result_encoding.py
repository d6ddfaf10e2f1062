"""How a handler's return value and progress reports are stored (pgdrain.results): exact
round trips, the size cap counted in UTF-8 bytes, and clear reasons for what cannot be."""

from __future__ import annotations

import json

import pytest

from pgdrain.results import encode_progress, encode_result


@pytest.mark.parametrize("value", [0, "", "é\u2028\U0001f600", [1, 2.5, None, True],
                                   {"nested": {"a": [{"b": "\\u0000 is text here"}]}}])
def test_json_values_round_trip_exactly(value):
    text, problem = encode_result(value, 65_536)
    assert problem is None and json.loads(text) == value


def test_none_is_no_result():
    assert encode_result(None, 10) == (None, None)


def test_the_cap_counts_utf8_bytes_and_is_inclusive():
    text, _ = encode_result("é" * 4, 10)  # "ééé" + quotes: 2 + 8 bytes
    assert text == '"éééé"'
    assert encode_result("é" * 5, 10) == (
        None, "result not stored: 12 bytes of JSON, above PGDRAIN_RESULT_MAX_BYTES (10)")


@pytest.mark.parametrize(("value", "words"), [
    (object(), "not JSON"), (float("inf"), "not JSON"), ("\ud800", "lone surrogate"),
    ({"k": "a\x00"}, "NUL character"),
])
def test_what_cannot_be_stored_says_why(value, words):
    text, problem = encode_result(value, 65_536)
    assert text is None and words in problem


def test_a_cycle_is_not_json():
    loop: list = []
    loop.append(loop)
    assert "not JSON" in encode_result(loop, 65_536)[1]


def test_progress_reports():
    assert json.loads(encode_progress(0)) == {"fraction": 0.0}
    assert json.loads(encode_progress(1, "7 of 7")) == {"fraction": 1.0, "message": "7 of 7"}
    assert json.loads(encode_progress(0.5, "\ud800"))["message"] == "\\ud800"
