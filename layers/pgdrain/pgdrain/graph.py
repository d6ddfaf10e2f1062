"""Dependencies (``depends_on``): a batch's graph resolved and checked, and how a job with
parents starts. Pure: ``pgdrain.enqueue`` runs the statements.

A batch names its jobs' parents by job id, by the ``name`` of another item, or by position
(``{"index": n}``). Resolved, each child has the batch positions and the job ids it waits for;
a name or position that is not in the batch, a job that names itself, and a cycle are
refused (InvalidJobError naming the item) before anything is inserted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .errors import InvalidJobError
from .models import NewJob, ParentIndex

FINISHED = ("done", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class Parents:
    """One child's parents: positions in its batch, and ids of jobs enqueued before."""

    in_batch: tuple[int, ...] = ()
    by_id: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Graph:
    parents: dict[int, Parents] = field(default_factory=dict)
    """By the position of each child in the batch."""


def resolve(batch: Sequence[NewJob]) -> Graph:
    """The batch's parents, resolved; InvalidJobError for a name or position not in the
    batch, a name given twice, a job that is its own parent, or a cycle."""
    names: dict[str, int] = {}
    for i, job in enumerate(batch):
        if job.name is not None:
            if job.name in names:
                raise InvalidJobError(f"{job.name!r} names item {names[job.name]} too: a name "
                                      "is unique within its batch", field="name", index=i)
            names[job.name] = i
    parents: dict[int, Parents] = {}
    for i, job in enumerate(batch):
        if not job.depends_on:
            continue
        in_batch: list[int] = []
        by_id: list[int] = []
        for parent in job.depends_on:
            if isinstance(parent, ParentIndex):
                if parent.position >= len(batch):
                    raise InvalidJobError(f"index {parent.position} is not in this batch of "
                                          f"{len(batch)}", field="depends_on", index=i)
                in_batch.append(parent.position)
            elif isinstance(parent, str):
                if parent not in names:
                    raise InvalidJobError(f"no job of this batch is named {parent!r}",
                                          field="depends_on", index=i)
                in_batch.append(names[parent])
            else:
                by_id.append(parent)
        if i in in_batch:
            raise InvalidJobError("a job cannot depend on itself", field="depends_on", index=i)
        parents[i] = Parents(tuple(dict.fromkeys(in_batch)), tuple(dict.fromkeys(by_id)))
    _refuse_cycles(parents)
    return Graph(parents)


def _refuse_cycles(parents: Mapping[int, Parents]) -> None:
    """Kahn's algorithm over the batch's edges: what is left once every job whose parents
    are all placed is placed lies on a cycle (or waits for one)."""
    waiting_on = {child: len(p.in_batch) for child, p in parents.items()}
    children: dict[int, list[int]] = {}
    for child, p in parents.items():
        for parent in p.in_batch:
            children.setdefault(parent, []).append(child)
    nodes = set(children) | set(waiting_on)
    ready = [i for i in nodes if not waiting_on.get(i, 0)]
    while ready:
        for child in children.get(ready.pop(), ()):
            waiting_on[child] -= 1
            if not waiting_on[child]:
                ready.append(child)
    stuck = sorted(i for i, n in waiting_on.items() if n)
    if stuck:
        raise InvalidJobError(f"the batch's depends_on form a cycle (through items "
                              f"{', '.join(map(str, stuck[:10]))})", field="depends_on",
                              index=stuck[0])


@dataclass(frozen=True, slots=True)
class Start:
    """How a child starts: its status, the parents it still waits for, and (cancelled) the
    parent that cancelled it and why."""

    status: str
    parents_left: int
    cancelled_by: int | None = None
    error: str | None = None


def dependent_start(after: str, parents: Mapping[int, str]) -> Start:
    """A child's start from its parents' statuses (id -> status): waiting for those not
    finished; cancelled if it waits for its parents to be done and one ended otherwise; else
    pending (every parent already finished as it needed)."""
    left = sum(1 for status in parents.values() if status not in FINISHED)
    if after == "done":
        for parent in sorted(parents):
            if parents[parent] in ("failed", "cancelled"):
                return Start("cancelled", left, parent,
                             f"parent job {parent} ended {parents[parent]}")
    return Start("waiting" if left else "pending", left)
