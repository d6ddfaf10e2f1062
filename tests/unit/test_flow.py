"""Flow control's pure decisions: rates parsed, sliding windows counted with a fake clock,
and the controlled claim's pick under queue and type room."""

from __future__ import annotations

import pytest

from pgdrain.flow import (
    NO_LIMIT,
    Candidate,
    Rate,
    RateError,
    choose,
    parse_rate,
    rate_free_in,
    rate_record,
    rate_room,
    room,
)


@pytest.mark.parametrize(("text", "rate"), [
    ("10/s", Rate(10, 1.0)), ("100/min", Rate(100, 60.0)), ("5/h", Rate(5, 3600.0)),
    ("1000/day", Rate(1000, 86400.0)), ("3/10s", Rate(3, 10.0)), (" 7 / minute ", Rate(7, 60.0)),
    ("10000/S", Rate(10000, 1.0)), ("1/1.5s", Rate(1, 1.5)), ("1/0.5min", Rate(1, 30.0)),
    ("0010/s", Rate(10, 1.0)), ("1/86400s", Rate(1, 86400.0)),
])
def test_rates_parse(text, rate):
    assert parse_rate(text) == rate


@pytest.mark.parametrize(("text", "why"), [
    ("0/min", "from 1 to 10000"), ("10001/s", "from 1 to 10000"), ("10", "not a rate"),
    ("-1/s", "not a rate"), ("1.5/s", "not a rate"), ("5/fortnight", "unknown period"),
    ("5/2day", "from a second to a day"), ("5/0s", "from a second"), (10, "not int"),
    ("", "not a rate"),
    # The docs say a second to a day: shorter periods were accepted.
    ("1/0.5s", "from a second to a day"), ("1/0.000001s", "from a second to a day"),
    ("1/86401s", "from a second to a day"),
    # int() of more than 4,300 digits raises ValueError (not a RateError): it answered 500.
    ("9" * 5000 + "/s", "from 1 to 10000"), ("1" * 4301 + "/min", "from 1 to 10000"),
    ("1/" + "9" * 5000 + "s", "from a second to a day"),
    ("\u0661\u0660/s", "not a rate"),  # Arabic-Indic digits: int() reads them as 10
])
def test_bad_rates_say_what_is_wrong(text, why):
    with pytest.raises(RateError, match=why) as caught:
        parse_rate(text)
    assert len(str(caught.value)) < 200  # the rate is quoted cut short, not 5,000 digits


def test_rates_print_as_written():
    assert [str(parse_rate(t)) for t in ("10/s", "100/min", "5/h", "2/day", "3/10s")] == [
        "10/s", "100/min", "5/h", "2/day", "3/10s"]


def test_a_sliding_window_allows_the_limit_in_any_period_with_a_fake_clock():
    rate, starts, now = Rate(3, 60.0), [], 1000.0
    assert rate_room(starts, now, rate) == 3
    starts = rate_record(starts, now, 2, rate)
    assert rate_room(starts, now + 10, rate) == 1
    starts = rate_record(starts, now + 10, 1, rate)
    assert rate_room(starts, now + 20, rate) == 0
    # The first two starts leave the window 60 s after they were made, the third after 70 s.
    assert rate_free_in(starts, now + 20, rate) == pytest.approx(40.0)
    assert rate_room(starts, now + 59.9, rate) == 0
    assert rate_room(starts, now + 60.0, rate) == 2
    assert rate_free_in(starts, now + 60.0, rate) == 0.0
    assert rate_room(starts, now + 70.0, rate) == 3


def test_a_window_keeps_a_pair_per_claim_and_only_what_can_still_limit():
    rate = Rate(2, 1.0)
    starts = rate_record([], 1.0, 1, rate)
    assert starts == [1.0, 1.0]
    starts = rate_record(starts, 1.2, 1, rate)
    assert starts == [1.0, 1.0, 1.2, 1.0]
    assert rate_free_in(starts, 1.5, rate) == pytest.approx(0.5)
    # Two later starts fill the window: the older pairs can no longer limit anything.
    starts = rate_record(starts, 1.5, 2, rate)
    assert starts == [1.5, 2.0]
    assert rate_free_in(starts, 1.6, rate) == pytest.approx(0.9)
    assert rate_record(starts, 3.0, 0, rate) == []      # left the window


def test_a_big_limit_keeps_one_pair_per_claim_not_one_number_per_job():
    rate, starts = Rate(10_000, 60.0), []
    for i in range(100):
        starts = rate_record(starts, i / 100, 100, rate)
    assert len(starts) == 200 and rate_room(starts, 1.0, rate) == 0
    assert rate_free_in(starts, 1.0, rate) == pytest.approx(59.0)
    assert rate_room(starts, 60.005, rate) == 100


def test_a_lowered_rate_counts_the_starts_already_made():
    starts = rate_record([], 100.0, 10, Rate(10, 60.0))
    assert rate_room(starts, 110.0, Rate(5, 60.0)) == 0
    assert rate_free_in(starts, 110.0, Rate(5, 60.0)) == pytest.approx(50.0)


def test_choose_respects_queue_and_type_room_in_claim_order():
    candidates = [Candidate(1, "api", "sync"), Candidate(2, "api", "mail"),
                  Candidate(3, "api", "sync"), Candidate(4, "other", "sync"),
                  Candidate(5, "other", "mail"), Candidate(6, "api", "mail")]
    picked = choose(candidates, batch_size=10, queue_room={"api": 2}, type_room={"sync": 2})
    assert picked == [1, 2, 4, 5]
    assert choose(candidates, batch_size=3, queue_room={}, type_room={}) == [1, 2, 3]
    assert choose(candidates, batch_size=10, queue_room={"api": 0}, type_room={"sync": 0}) == [5]


def test_room_is_the_smaller_of_the_caps_and_the_rates():
    window = rate_record([], 100.0, 3, Rate(5, 60.0))
    assert room(max_running=None, running=0, rate=None, starts=[], now=0.0) == NO_LIMIT
    assert room(max_running=4, running=1, rate=None, starts=[], now=0.0) == 3
    assert room(max_running=4, running=6, rate=None, starts=[], now=0.0) == 0
    assert room(max_running=None, running=0, rate=Rate(5, 60.0), starts=window,
                now=110.0) == 2
    assert room(max_running=10, running=9, rate=Rate(5, 60.0), starts=window, now=110.0) == 1
