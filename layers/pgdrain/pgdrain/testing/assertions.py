"""What is enqueued: ``enqueued``, ``assert_enqueued`` and ``refute_enqueued``, on the test's
own connection (so they see its open transaction's jobs too)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..db import as_session

SHOWN = 5
"""How many jobs of the type a failing assertion lists."""

_FILTERS = ("queue", "tenant", "priority")
"""The filters besides the payload: each a column, None meaning any."""


def enqueued(conn: Any, job_type: str, payload_subset: Any = None, *,
             status: str | Sequence[str] = "pending", limit: int = 100,
             **filters: Any) -> list[dict[str, Any]]:
    """The jobs of ``job_type`` in ``status`` (default pending; a list for several) whose
    payload contains ``payload_subset`` (JSON containment, as PostgreSQL's ``@>``: nested
    objects match on the keys given, arrays on the elements given), with ``filters``
    (``queue``, ``tenant``, ``priority``), oldest first, at most ``limit``: each a dict
    (id, payload decoded, status, queue, priority, tenant, run_at, attempts, ...)."""
    unknown = sorted(set(filters) - set(_FILTERS))
    if unknown:
        raise TypeError(f"enqueued: unknown filter {', '.join(unknown)} (known: "
                        f"{', '.join(_FILTERS)})")
    statuses = [status] if isinstance(status, str) else list(status)
    rows = as_session(conn).rows(
        "job_enqueued_list", job_type=job_type, statuses=statuses,
        payload=None if payload_subset is None else _json(payload_subset), limit=limit,
        **{name: filters.get(name) for name in _FILTERS})
    for row in rows:
        row["payload"] = json.loads(row["payload"])
    return rows


def assert_enqueued(conn: Any, job_type: str, payload_subset: Any = None,
                    **filters: Any) -> dict[str, Any]:
    """Assert that a job of ``job_type`` is enqueued (pending, or ``status=``) whose payload
    contains ``payload_subset``, matching ``filters`` (see ``enqueued``); return the first
    such job. The AssertionError lists what is enqueued of that type instead."""
    found = enqueued(conn, job_type, payload_subset, limit=1, **filters)
    if found:
        return found[0]
    raise AssertionError(_missing(conn, job_type, payload_subset, filters))


def refute_enqueued(conn: Any, job_type: str, payload_subset: Any = None,
                    **filters: Any) -> None:
    """Assert that no such job is enqueued (see ``assert_enqueued``); the AssertionError
    lists the ones that are."""
    found = enqueued(conn, job_type, payload_subset, limit=SHOWN, **filters)
    if found:
        raise AssertionError(f"expected {_wanted(job_type, payload_subset, filters, 'no')}, "
                             f"found:\n{_listed(found)}")


def _missing(conn: Any, job_type: str, payload_subset: Any, filters: dict[str, Any]) -> str:
    status = filters.get("status", "pending")
    others = enqueued(conn, job_type, status=status, limit=SHOWN)
    message = f"expected {_wanted(job_type, payload_subset, filters)}"
    if not others:
        return (f"{message}; no {job_type!r} job is {_statuses(status)} at all (jobs "
                "enqueued in a transaction still open on another connection are not "
                "visible here)")
    return (f"{message}; the {job_type!r} jobs {_statuses(status)} are (first "
            f"{SHOWN}):\n{_listed(others)}")


def _wanted(job_type: str, payload_subset: Any, filters: dict[str, Any],
            article: str = "a") -> str:
    parts = [f"{article} {job_type!r} job"]
    if payload_subset is not None:
        parts.append(f"with a payload containing {_json(payload_subset)}")
    parts += [f"{name}={value!r}" for name, value in filters.items()]
    if "status" not in filters:
        parts.append("pending")
    return " ".join(parts[:1]) + (" " + ", ".join(parts[1:]) if parts[1:] else "")


def _statuses(status: str | Sequence[str]) -> str:
    return status if isinstance(status, str) else " or ".join(status)


def _listed(rows: list[dict[str, Any]]) -> str:
    return "\n".join(f"  job {r['id']}: payload {json.dumps(r['payload'], default=str)}, "
                     f"queue {r['queue']!r}, priority {r['priority']}, status {r['status']}"
                     + (f", tenant {r['tenant']!r}" if r["tenant"] is not None else "")
                     for r in rows)


def _json(value: Any) -> str:
    dump = getattr(value, "model_dump", None)  # a pydantic model: its JSON form
    if callable(dump):
        value = dump(mode="json")
    return json.dumps(value, default=str)
