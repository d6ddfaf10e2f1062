"""The rate windows' rules written twice: in pgdrain.flow (pure, the spec) and in SQL for the
one-call claim of capped and rate-limited queues (migration 0018). Both must say the same on
any window, so random windows (a fixed seed: a failure repeats) go through each and the
answers are compared exactly."""

from __future__ import annotations

import math
import random

import pytest

from pgdrain import flow
from pgdrain.flow import Rate

ROUNDS = 300


def random_window(rng: random.Random, now: float, rate: Rate, slack: float) -> list[float]:
    """Flat [at, count, ...] pairs, oldest first, some outside the window, some exactly on
    its edge, counts from 1 to the limit (what claims write)."""
    edge = now - rate.period - slack
    ats = sorted(rng.choice([edge, math.nextafter(edge, math.inf),
                             now - rng.uniform(0, 2 * (rate.period + slack))])
                 for _ in range(rng.randint(0, 12)))
    return [x for at in ats for x in (at, float(rng.randint(1, rate.limit)))]


def random_case(rng: random.Random) -> tuple[list[float], float, Rate, float]:
    rate = Rate(rng.choice([1, 2, 5, 10, 100, rng.randint(1, 10_000)]),
                rng.choice([1.0, 10.0, 60.0, 3600.0, 86_400.0, rng.uniform(1.0, 86_400.0)]))
    now = 1.8e9 + rng.uniform(0, 1e6)
    slack = flow.start_slack(rate)
    return random_window(rng, now, rate, slack), now, rate, slack


def test_the_slack_agrees(conn):
    rng = random.Random(18)
    periods = [1.0, 19.99, 20.0, 20.01, 60.0, 86_400.0] + [rng.uniform(1, 86_400)
                                                          for _ in range(50)]
    [[got]] = conn.run("SELECT array_agg(pgdrain_start_slack(p) ORDER BY i) "
                       "FROM unnest(:periods::float8[]) WITH ORDINALITY AS t(p, i)",
                       periods=periods)
    assert got == [flow.start_slack(Rate(1, p)) for p in periods]


@pytest.mark.parametrize("seed", range(3))
def test_the_room_and_the_record_agree_on_random_windows(conn, seed):
    rng = random.Random(seed)
    for _ in range(ROUNDS // 3):
        starts, now, rate, slack = random_case(rng)
        started = rng.choice([0, 1, rng.randint(1, rate.limit)])
        [[room, record]] = conn.run(
            "SELECT pgdrain_rate_room(:starts::float8[], :now::float8, :limit::int, "
            ":period::float8, :slack::float8), "
            "pgdrain_rate_record(:starts::float8[], :now::float8, :started::int, :limit::int, "
            ":period::float8, :slack::float8)",
            starts=starts, now=now, started=started, limit=rate.limit, period=rate.period,
            slack=slack)
        case = (starts, now, rate, started)
        assert room == flow.rate_room(starts, now, rate, slack=slack), case
        assert record == flow.rate_record(starts, now, started, rate, slack=slack), case


def test_an_empty_window_has_the_whole_limit_and_records_one_pair(conn):
    [[room, record, unknown]] = conn.run(
        "SELECT pgdrain_rate_room('{}', 100, 5, 1, 0.05), "
        "pgdrain_rate_record('{}', 100, 3, 5, 1, 0.05), "
        "pgdrain_rate_room(NULL, 100, 5, 1, 0.05)")
    assert (room, record, unknown) == (5, [100.0, 3.0], 5)
    assert flow.rate_record([], 100.0, 3, Rate(5, 1.0), slack=0.05) == record
