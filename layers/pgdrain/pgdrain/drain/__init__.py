"""One drain pass: the janitor, then claim / run / record until the queue has nothing due,
the job limit is reached, or the deadline is near. Then return a summary.

The drain is what the Lambda function runs on every invocation; it knows nothing of Lambda
itself: the caller passes a ``time_left`` clock (the context's remaining time) and an observer
for logs and metrics.

Time: of the invocation's time left at the start, the safety margin (``Settings.margin_for``)
is kept for recording outcomes and returning: no handler runs into it. Database I/O may use
half of it: every statement, socket read and lock wait is bounded so that it ends before the
other half, which is left for returning. A database that stops answering, or a lock held by
someone else, ends the drain with ``stopped: "database_error"`` and a short ``error``; what it
claimed and did not record comes back when the leases expire, uncharged.

The rooms: ``summary`` (what a drain did; typed stop reasons and counts), ``ports`` (the
store, launcher and observer it needs), ``budget`` (the time budget, pure rules),
``admission`` (whether a claimed job may start), ``planner`` (which claim next, how many),
``attempt`` (one attempt, one transaction protocol), ``outcomes`` (an attempt's end as a
finishing write), ``loop`` and ``running`` (the one loop of N slots, N=1 included, and the
attempts on worker threads), ``run`` (the pass: slot, janitor, fan-out, loop,
continuation), ``postgres`` (the store on PostgreSQL).
"""

from ..store import ControlledClaim
from .budget import IO_SHARE_OF_MARGIN, MIN_CUT_SHORT_SECONDS, Budget, shortest_runnable_seconds
from .planner import (
    CLAIM_AHEAD_SECONDS,
    RATE_WAIT_SLACK_SECONDS,
    RATED_LOOK_SECONDS,
    TENANT_LOOK_SECONDS,
    Pace,
)
from .ports import DrainObserver, DrainStore, Launcher
from .postgres import PostgresStore, SlotLost, record_failure
from .run import drain
from .running import CONTROL_SECONDS, RUNAWAY_GRACE_SECONDS, TICK_SECONDS
from .summary import Count, DrainSummary, Stop

__all__ = [
    "CLAIM_AHEAD_SECONDS",
    "CONTROL_SECONDS",
    "IO_SHARE_OF_MARGIN",
    "MIN_CUT_SHORT_SECONDS",
    "RATED_LOOK_SECONDS",
    "RATE_WAIT_SLACK_SECONDS",
    "RUNAWAY_GRACE_SECONDS",
    "TENANT_LOOK_SECONDS",
    "TICK_SECONDS",
    "Budget",
    "ControlledClaim",
    "Count",
    "DrainObserver",
    "DrainStore",
    "DrainSummary",
    "Launcher",
    "Pace",
    "PostgresStore",
    "SlotLost",
    "Stop",
    "drain",
    "record_failure",
    "shortest_runnable_seconds",
]
