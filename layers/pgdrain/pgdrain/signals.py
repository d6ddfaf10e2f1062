"""Signals: durable waits. A handler raises ``pgdrain.WaitFor(name, timeout=...)`` and its job
waits (status waiting) without holding a drain or an attempt; ``signal(conn, name, payload)``,
in the sender's own transaction, makes every job waiting for ``name`` due with the payload
(``job.signal``), and keeps the signal for ``keep_seconds`` for the jobs that wait for it
later. The janitor ends waits whose timeout passed and forgets expired signals.

Why a wait and a send never miss each other: both write the signal's row in
``pgdrain_signals`` before they look at the other side (see ``job_wait_batch`` and
``signal_keep`` in the catalogue).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .db import Session, as_session
from .errors import InvalidSignal
from .models import DEFAULT_SIGNAL_KEEP_SECONDS, MAX_DELAY_SECONDS, signal_name_problem
from .results import encode_signal_payload


@dataclass(frozen=True, slots=True)
class SignalSent:
    """What ``signal`` did: the jobs it made due (ids), and until when it is kept."""

    name: str
    woken: tuple[int, ...]
    kept_until: datetime | str


def signal(conn: Any, name: str, payload: Any = None, *,
           keep_seconds: float = DEFAULT_SIGNAL_KEEP_SECONDS) -> SignalSent:
    """Send the signal ``name`` on ``conn``, inside its open transaction if any (it takes
    effect when that commits, with the app's own writes): every job waiting for it
    (``raise pgdrain.WaitFor(name, ...)``) becomes due with ``payload`` (JSON, at most
    256 KiB) as ``job.signal.payload``, and a job that waits for it later, within
    ``keep_seconds`` (a week by default), gets it at once. Sending it again replaces the
    payload for later waits. Raises InvalidSignal, writing nothing, for a bad name, payload
    or ``keep_seconds``. Ring the drain after the commit (``pgdrain.aws.ring``) for the jobs
    to start within a second rather than at the next scheduled drain."""
    problem = signal_name_problem(name)
    if problem:
        raise InvalidSignal(problem, field="name")
    try:
        text = encode_signal_payload(payload)
    except ValueError as exc:
        raise InvalidSignal(f"cannot be sent: {exc}", field="payload") from None
    if (isinstance(keep_seconds, bool) or not isinstance(keep_seconds, int | float)
            or not math.isfinite(keep_seconds) or not 0 <= keep_seconds <= MAX_DELAY_SECONDS):
        raise InvalidSignal(f"must be a number of seconds from 0 to {MAX_DELAY_SECONDS} "
                            f"(ten years), not {keep_seconds!r}", field="keep_seconds")
    session = as_session(conn)
    if session.autocommitting():  # a connection in autocommit: a transaction of its own
        with session.transaction():
            return _send(session, name, text, float(keep_seconds))
    return _send(session, name, text, float(keep_seconds))


def _send(session: Session, name: str, text: str, keep_seconds: float) -> SignalSent:
    # Two statements, in this order, in one transaction: signal_wake's snapshot must begin
    # after signal_keep has the row (see the catalogue), and a signal kept must wake its
    # waiting jobs with it, or not at all.
    kept = session.one("signal_keep", name=name, payload=text, keep_seconds=keep_seconds)
    assert kept is not None
    woken = session.values("signal_wake", name=name)
    return SignalSent(name, tuple(sorted(row[0] for row in woken)), kept["expires_at"])


def janitor_pass(conn: Any, *, limit: int) -> tuple[int, int]:
    """The janitor's: up to ``limit`` waits past their timeout made due, and up to ``limit``
    signals past their retention forgotten, in one statement; how many of each."""
    row = as_session(conn).one("janitor_signals_batch", limit=limit)
    return (row["timed_out"], row["purged"]) if row else (0, 0)
