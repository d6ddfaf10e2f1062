"""Batches that share dedupe keys never deadlock each other (issue: faults, item 7).

Two transactions inserting the same keys in opposite orders each wait for the other's
uncommitted key: PostgreSQL breaks the cycle by failing one with 40P01. Two clients posting the
same 60 keys, one reversed, got a 503 in 1 of 80 requests; 1 to 3 of 160 library batches
raised. pgdrain now inserts keyed jobs in one fixed order, and retries a deadlock where it can.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

import pgdrain
from pgdrain_dev.context import LambdaContext
from tests.functions import conftest as function_fixtures
from tests.support.functions import load_event

function_env = function_fixtures.function_env
load_function = function_fixtures.load_function

KEYS = 60


def _race(rounds: int, send: Callable[[int, int], Any]) -> list[list[Any]]:
    """``send(client, round)`` from two threads at once, ``rounds`` times; their results."""
    outcomes = []
    for round_no in range(rounds):
        barrier = threading.Barrier(2)
        results: list[Any] = [None, None]

        def run(client: int, round_no: int = round_no, barrier: threading.Barrier = barrier,
                results: list[Any] = results) -> None:
            barrier.wait()
            try:
                results[client] = send(client, round_no)
            except Exception as exc:  # a deadlock surfaced: the failure under test
                results[client] = exc

        threads = [threading.Thread(target=run, args=(client,)) for client in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        outcomes.append(results)
    return outcomes


def _batch(round_no: int, client: int) -> list[dict[str, Any]]:
    keys = [f"r{round_no}-k{i}" for i in range(KEYS)]
    return [{"job_type": "test-noop", "dedupe_key": key}
            for key in (keys if client == 0 else reversed(keys))]


def test_library_batches_with_the_same_keys_in_opposite_orders(connect_to, sql, scaled):
    rounds = scaled(160, "DEADLOCK_ROUNDS")
    conns = [connect_to(), connect_to()]
    outcomes = _race(rounds, lambda client, n: pgdrain.enqueue_many(conns[client],
                                                                    _batch(n, client)))
    errors = [r for pair in outcomes for r in pair if isinstance(r, Exception)]
    assert errors == []
    for n, (first, second) in enumerate(outcomes):
        by_key = [{j["dedupe_key"]: r.id for j, r in zip(_batch(n, c), results, strict=True)}
                  for c, results in enumerate((first, second))]
        assert by_key[0] == by_key[1]  # both clients got the one job of each key
        assert sum(r.created for r in first) + sum(r.created for r in second) == KEYS
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == rounds * KEYS
    print(f"RELIABILITY deadlocks (library): rounds={rounds}, batches={2 * rounds}, "
          f"keys={KEYS}, errors={len(errors)}")


@pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")
def test_api_batches_with_the_same_keys_in_opposite_orders(load_function, sql, scaled):
    rounds = scaled(80, "DEADLOCK_ROUNDS")
    apps = [load_function("enqueue"), load_function("enqueue")]

    def post(client: int, round_no: int) -> tuple[int, dict[str, Any]]:
        event = load_event("enqueue_batch.json")
        event["body"] = json.dumps({"jobs": _batch(round_no, client)})
        response = apps[client].lambda_handler(event, LambdaContext("pgdrain-enqueue"))
        return response["statusCode"], json.loads(response["body"])

    outcomes = _race(rounds, post)
    statuses = sorted(r[0] if isinstance(r, tuple) else repr(r)
                      for pair in outcomes for r in pair)
    assert set(statuses) <= {200, 201}, [s for s in statuses if s not in (200, 201)][:5]
    assert sql("SELECT count(*) AS n FROM jobs")[0]["n"] == rounds * KEYS
    print(f"RELIABILITY deadlocks (API): rounds={rounds}, requests={2 * rounds}, keys={KEYS}, "
          f"answers={dict((s, statuses.count(s)) for s in set(statuses))}")
