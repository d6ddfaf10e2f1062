"""The doorbell: after an enqueue commits, invoke the drain function asynchronously so a new job
starts within about a second instead of at the next scheduled drain.

The enqueue function rings after each commit; an app that enqueues with ``pgdrain.enqueue``
on its own connection rings with ``pgdrain.aws.ring(conn)`` right after ``conn.commit()``
(or from an after-commit hook).

A ring is skipped when it is not needed, and never when it is (no lost wake-up), decided in
the database (``doorbell_state``), not in one container's memory:

- a drain holds a slot (PGDRAIN_MAX_DRAINS): it will see the job. It claims again until the
  queue is empty, and after giving its slot back it looks for due work once more and starts
  a drain if there is any; the job committed before this check, so before that last look;
- a ring younger than the window is on its way and no drain has taken a slot since (a drain
  answers the rings, ``doorbell_drain_started``, before it tries for its slot): that drain
  has not claimed yet, and will see the job. If it finds every slot taken, the drains
  holding them held them after the job's commit, and will make their last look after it.
  The ring is written before the invoke, so a drain's answer is always later.

That state is one sequence (``pgdrain_doorbell_ring``, migration 0014): a ring sets it to its
time, a drain to 0, with ``setval``, which is not transactional and waits on no row lock. No
session's open transaction, an application's included, can hold up a drain's start or a ring.

On a DB-API connection (pg8000.dbapi, psycopg 3, psycopg2) that is not in autocommit, the
ring's statements open a transaction: the ring rolls it back (it wrote nothing the caller
owns), so the connection is left idle, as it was found. Called with the caller's transaction
still open (before the commit: a misuse, whose job a drain may look for before it commits),
it does not ask the database at all, so it neither ends that transaction nor takes a lock in
it, and warns once.

Otherwise it rings. The table stays the source of truth and the one-minute schedule the
fallback: a ring that fails costs at most one window (the next enqueue rings again).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from .. import store
from ..db import in_transaction, roll_back
from ..settings import DEFAULT_DOORBELL_WINDOW_SECONDS, read
from .local import may_invoke_lambda

log = logging.getLogger(__name__)


class Doorbell:
    """Rings the drain at most once per ``window_seconds`` per container.

    ``client_factory`` makes the boto3 Lambda client on the first ring (boto3 costs about half
    a second to import, so a container that never rings never pays for it).
    """

    def __init__(self, function_name: str | None, *,
                 window_seconds: float = DEFAULT_DOORBELL_WINDOW_SECONDS,
                 client_factory: Callable[[], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.function_name = function_name
        self.window_seconds = window_seconds
        self._client_factory = client_factory or _lambda_client
        self._client: Any = None
        self._clock = clock
        self._last_ring: float | None = None
        self._warned: set[str] = set()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Doorbell:
        """``DRAIN_FUNCTION_NAME`` (unset: no doorbell; none either in a local invocation with
        no stand-in to invoke, aws.local), ``PGDRAIN_DOORBELL_WINDOW_SECONDS``."""
        name = read("DRAIN_FUNCTION_NAME", env)
        if name and read("AWS_SAM_LOCAL", env) and not may_invoke_lambda("the doorbell", env):
            name = None
        return cls(name, window_seconds=read("PGDRAIN_DOORBELL_WINDOW_SECONDS", env))

    def ring(self, conn: Any = None, *, time_left: float | None = None) -> str:
        """Invoke the drain asynchronously; returns ``rung``, ``skipped``, ``late``, ``off`` or
        ``failed``.

        ``conn`` (pg8000, native or DB-API, psycopg 3 or psycopg2, with no transaction open:
        call this after the commit) lets the database say whether a ring is needed (see the
        module docstring), and is left as it was found. Without it, or with a transaction
        still open on it, this container rings at most once per window, which can leave a job
        to the schedule when a drain was just finishing.

        Never raises: a failed ring is logged and the caller's request still succeeds. With
        ``time_left`` (the caller's seconds until its deadline) shorter than the longest a
        ring can take, it does not ring (``late``): the scheduled drain picks the job up.
        """
        if not self.function_name:
            return "off"
        if time_left is not None and time_left < LONGEST_RING_SECONDS:
            return "late"
        if conn is not None:
            open_before = in_transaction(conn)
            if open_before is False:
                return self._invoke() if self._needed(conn) else "skipped"
            self._warn_once("in transaction" if open_before else "unknown", conn)
        now = self._clock()
        if self._last_ring is not None and now - self._last_ring < self.window_seconds:
            return "skipped"
        self._last_ring = now
        return self._invoke()

    def _needed(self, conn: Any) -> bool:
        """Ask the database whether to ring, and stamp the ring if so, on an idle ``conn``;
        leave it idle."""
        try:
            drains, on_its_way = store.doorbell_state(conn, window_seconds=self.window_seconds)
            if drains or on_its_way:
                return False
            store.doorbell_rung(conn)
        except Exception as exc:  # the database said nothing: ring, to be sure
            log.warning("doorbell: could not read its state (%s: %s); ringing",
                        type(exc).__name__, exc)
        finally:
            self._end_own_transaction(conn)
        return True

    @staticmethod
    def _end_own_transaction(conn: Any) -> None:
        # A DB-API connection outside autocommit began a transaction at the first statement
        # (pg8000.dbapi, psycopg), which would stay open, holding its locks, until the
        # application's next commit; a pooled idle connection may never have one. It holds
        # only the ring's statements: roll it back (the ring's stamp is a setval, which a
        # rollback keeps), also after a failed statement left it aborted.
        try:
            if in_transaction(conn):
                roll_back(conn)
        except Exception as exc:  # a broken connection: the caller will find out on its own
            log.warning("doorbell: could not end the transaction its statements opened "
                        "(%s: %s)", type(exc).__name__, exc)

    def _warn_once(self, why: str, conn: Any) -> None:
        if why in self._warned:
            return
        self._warned.add(why)
        if why == "in transaction":
            log.warning("doorbell: ring(conn) was called with a transaction open on conn; it "
                        "belongs after the commit (a drain it starts may look before the job "
                        "is committed). It rings without asking the database (at most once "
                        "per window), and leaves that transaction alone")
        else:
            log.warning("doorbell: cannot tell whether the %s given to ring(conn) has a "
                        "transaction open; it rings without asking the database (pass a "
                        "pg8000, psycopg 3 or psycopg2 connection, after the commit)",
                        type(conn).__name__)

    def _invoke(self) -> str:
        try:
            if self._client is None:
                self._client = self._client_factory()
            self._client.invoke(FunctionName=self.function_name, InvocationType="Event",
                                Payload=b'{"source": "pgdrain.doorbell"}')
        except Exception as exc:  # botocore's errors, throttling, a network failure
            log.warning("doorbell failed: could not invoke %s (%s: %s); the scheduled drain "
                        "will pick the job up", self.function_name, type(exc).__name__, exc)
            return "failed"
        return "rung"


# An asynchronous invoke answers 202 in milliseconds. botocore's defaults (60 s to connect,
# three attempts) would let an unreachable Lambda endpoint (a VPC with no NAT or endpoint)
# hold the enqueue request past its own timeout, after its jobs had committed.
CONNECT_TIMEOUT_SECONDS = 2
READ_TIMEOUT_SECONDS = 3
CLIENT_TIMEOUTS = {"connect_timeout": CONNECT_TIMEOUT_SECONDS,
                   "read_timeout": READ_TIMEOUT_SECONDS, "retries": {"total_max_attempts": 1}}
# One attempt: the connect, the read, and a little for the rest.
LONGEST_RING_SECONDS = CONNECT_TIMEOUT_SECONDS + READ_TIMEOUT_SECONDS + 0.5


def _lambda_client() -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("lambda", config=Config(**CLIENT_TIMEOUTS))


_APP_DOORBELL: Doorbell | None = None


def ring(conn: Any = None, *, time_left: float | None = None) -> str:
    """Ring the drain after your own commit: ``pgdrain.aws.ring(conn)`` right after
    ``conn.commit()``, or from an after-commit hook. Reads DRAIN_FUNCTION_NAME and
    PGDRAIN_DOORBELL_WINDOW_SECONDS once; needs ``lambda:InvokeFunction`` on the drain.
    Returns what ``Doorbell.ring`` returns (count it as the enqueue function does:
    ``Doorbell<Outcome>``); never raises."""
    global _APP_DOORBELL
    if _APP_DOORBELL is None:
        _APP_DOORBELL = Doorbell.from_env()
    return _APP_DOORBELL.ring(conn, time_left=time_left)
