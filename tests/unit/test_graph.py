"""The graph of a batch enqueued with depends_on, resolved and checked before anything is
written, and how a child starts from its parents' statuses (pgdrain.graph: pure)."""

from __future__ import annotations

import pytest

from pgdrain import new_job
from pgdrain.errors import InvalidJobError
from pgdrain.graph import Parents, Start, dependent_start, resolve


def _batch(*items: dict) -> list:
    return [new_job("t", **item, index=i) for i, item in enumerate(items)]


def test_parents_by_name_index_and_id_each_once():
    graph = resolve(_batch({"name": "a"}, {"name": "b"},
                           {"depends_on": ["a", {"index": 1}, 42, "a", {"index": 0}, 42]}))
    assert graph.parents == {2: Parents(in_batch=(0, 1), by_id=(42,))}


def test_a_diamond_is_no_cycle_and_a_ring_is_one():
    resolve(_batch({"name": "a"}, {"name": "b", "depends_on": ["a"]},
                   {"name": "c", "depends_on": ["a"]}, {"depends_on": ["b", "c"]}))
    with pytest.raises(InvalidJobError, match="cycle") as refused:
        resolve(_batch({"name": "a", "depends_on": ["c"]}, {"name": "b", "depends_on": ["a"]},
                       {"name": "c", "depends_on": ["b"]}, {"depends_on": ["a"]}))
    assert "through items 0, 1, 2" in str(refused.value) and refused.value.index == 0


def test_a_long_chain_resolves():
    chain = [{"name": "0"}] + [{"name": str(i), "depends_on": [str(i - 1)]}
                               for i in range(1, 5000)]
    assert len(resolve(_batch(*chain)).parents) == 4999


@pytest.mark.parametrize(("parents", "after", "start"), [
    ({1: "pending", 2: "running"}, "done", Start("waiting", 2)),
    ({1: "done", 2: "waiting"}, "done", Start("waiting", 1)),
    ({1: "done", 2: "done"}, "done", Start("pending", 0)),
    ({1: "done", 3: "failed", 2: "cancelled"}, "done",
     Start("cancelled", 0, 2, "parent job 2 ended cancelled")),
    ({1: "pending", 2: "failed"}, "finished", Start("waiting", 1)),
    ({1: "done", 2: "failed"}, "finished", Start("pending", 0)),
])
def test_a_childs_start(parents, after, start):
    assert dependent_start(after, parents) == start
