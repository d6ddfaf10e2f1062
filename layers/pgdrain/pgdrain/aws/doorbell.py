"""The doorbell: after an enqueue commits, invoke the drain function asynchronously so a new job
starts within about a second instead of at the next scheduled drain.

The table stays the source of truth and the one-minute schedule the fallback: a doorbell that
fails, or is skipped because another rang it a moment ago, loses nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..settings import DEFAULT_DOORBELL_WINDOW_SECONDS, read

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

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Doorbell:
        """``DRAIN_FUNCTION_NAME`` (unset: no doorbell), ``PGDRAIN_DOORBELL_WINDOW_SECONDS``."""
        return cls(read("DRAIN_FUNCTION_NAME", env),
                   window_seconds=read("PGDRAIN_DOORBELL_WINDOW_SECONDS", env))

    def ring(self, *, time_left: float | None = None) -> str:
        """Invoke the drain asynchronously; returns ``rung``, ``skipped``, ``late``, ``off`` or
        ``failed``.

        Never raises: a failed ring is logged and the caller's request still succeeds. With
        ``time_left`` (the caller's seconds until its deadline) shorter than the longest a
        ring can take, it does not ring (``late``): the scheduled drain picks the job up.
        """
        if not self.function_name:
            return "off"
        if time_left is not None and time_left < LONGEST_RING_SECONDS:
            return "late"
        now = self._clock()
        if self._last_ring is not None and now - self._last_ring < self.window_seconds:
            return "skipped"
        self._last_ring = now
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
