"""pgdrain.wait's pure rules: what a timeout may be, what counts as finished, how a waiter
that cannot listen spaces its reads; and GET /jobs/{id}?wait='s parsing."""

from __future__ import annotations

import itertools
import math

import pytest

from pgdrain.http.requests import ApiError, parse_wait
from pgdrain.waiting import backoff_delays, is_finished, timeout_problem


@pytest.mark.parametrize("value", [0, 0.5, 30, 900, 900.0])
def test_a_timeout_is_seconds_from_0_to_900(value):
    assert timeout_problem(value) is None


@pytest.mark.parametrize("value", [-1, -0.001, 900.5, math.nan, math.inf, -math.inf, True,
                                   None, "5", [5]])
def test_anything_else_is_refused_saying_what_it_is(value):
    assert timeout_problem(value) == \
        f"must be a number of seconds from 0 to 900, not {value!r}"


def test_finished_is_done_failed_or_cancelled_and_nothing_else():
    assert [s for s in ("pending", "running", "waiting", "done", "failed", "cancelled", None)
            if is_finished(s)] == ["done", "failed", "cancelled"]


def test_a_polling_waiter_reads_at_once_then_backs_off_to_once_a_second():
    assert list(itertools.islice(backoff_delays(), 7)) == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]


@pytest.mark.parametrize(("raw", "seconds"), [(None, None), ("0", 0.0), ("5", 5.0),
                                              ("2.5", 2.5), ("25", 25.0), ("025.000", 25.0)])
def test_the_api_wait_is_a_decimal_number_of_seconds_up_to_25(raw, seconds):
    assert parse_wait(raw) == seconds


@pytest.mark.parametrize("raw", ["", "-1", "25.001", "26", "1e1", "nan", "inf", "0x1", " 1",
                                 "1 ", "1.", ".5", "1.2345", "1000"])
def test_any_other_api_wait_is_a_400_naming_it(raw):
    with pytest.raises(ApiError) as refused:
        parse_wait(raw)
    assert refused.value.status == 400
    assert refused.value.details == {"wait": raw}
