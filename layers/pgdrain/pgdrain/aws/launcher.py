"""Starting more drains: an asynchronous invoke of the drain function itself.

A drain that leaves due work behind (it stopped on PGDRAIN_MAX_JOBS or its deadline) invokes
its own function (``context.invoked_function_arn``) before it returns, and one that finds a
backlog larger than it runs at once starts more (fan-out); PostgreSQL caps how many run
(PGDRAIN_MAX_DRAINS slots), so a surplus invoke returns at once with ``stopped: "busy"``.

Lambda's recursive loop detection stops a chain of a function invoking itself after about
16 hops; the template sets the drain's ``RecursiveLoop: Allow`` so that a long backlog keeps
draining, and the guard rails are here: a drain continues only with due work left, and never
past the database's cap.

Each invoke is one attempt, with connect and read timeouts cut to the invocation's time left
(an asynchronous invoke answers 202 in milliseconds). boto3 is imported on the first launch
only, through ``prepare``, which the drain calls as soon as it knows it will launch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# Each invoke may take at most this share of the time left, and never more than these.
SHARE_OF_TIME_LEFT = 0.25
MAX_CONNECT_SECONDS = 2.0
MAX_READ_SECONDS = 3.0
# Below this much time left no invoke is tried: the schedule's next tick will look instead.
MIN_TIME_LEFT_SECONDS = 0.2


class LambdaLauncher:
    """``launch(count, reason)`` invokes ``function_arn`` asynchronously ``count`` times."""

    def __init__(self, function_arn: str, *, time_left: Callable[[], float],
                 client_factory: Callable[[float, float], Any] | None = None):
        self.function_arn = function_arn
        self.time_left = time_left
        self._client_factory = client_factory or lambda_client
        self._client: Any = None

    def prepare(self) -> None:
        """Import boto3 and make the client now, while there is time to spare."""
        if self._client is None:
            left = max(self.time_left(), MIN_TIME_LEFT_SECONDS)
            self._client = self._client_factory(
                min(MAX_CONNECT_SECONDS, left * SHARE_OF_TIME_LEFT),
                min(MAX_READ_SECONDS, left * SHARE_OF_TIME_LEFT))

    def launch(self, count: int, reason: str) -> int:
        """Start ``count`` drains; returns how many invokes Lambda accepted. Never raises."""
        started = 0
        payload = json.dumps({"source": "pgdrain.drain", "reason": reason}).encode()
        try:
            for _ in range(count):
                if self.time_left() < MIN_TIME_LEFT_SECONDS:
                    break
                self.prepare()
                self._client.invoke(FunctionName=self.function_arn, InvocationType="Event",
                                    Payload=payload)
                started += 1
        except Exception as exc:  # throttling, recursion stopped, a network failure
            log.warning("could not start a drain (%s) by invoking %s: %s: %s; the schedule's "
                        "next tick will drain what is left", reason, self.function_arn,
                        type(exc).__name__, exc)
        return started


def lambda_client(connect_timeout: float, read_timeout: float) -> Any:
    """A boto3 Lambda client with one attempt and these timeouts (AWS_ENDPOINT_URL_LAMBDA,
    if set, points it at a stand-in, as for every boto3 client)."""
    import boto3
    from botocore.config import Config

    return boto3.client("lambda", config=Config(
        connect_timeout=connect_timeout, read_timeout=read_timeout,
        retries={"total_max_attempts": 1}))
