"""The drain function's body: one invocation, from any trigger, to its answer.

Triggers: the EventBridge schedule, ``POST /drain`` through API Gateway, and direct or
asynchronous invokes (the summary itself). ``POST /drain`` starts a drain asynchronously and
answers 202 at once; ``POST /drain?wait=true`` drains in the request for at most 25 s and
answers 200 with the summary (405, 500 or 503 with a short error and the request id).
``functions/drain/app.py`` only wires this up.
"""

from __future__ import annotations

import json
import time
from typing import Any

from aws_lambda_powertools import Logger, Metrics

from ..db import Connector
from ..drain import DrainSummary, drain, shortest_runnable_seconds
from ..registry import Registry
from ..settings import Settings, read
from ..version import VERSION
from .launcher import LambdaLauncher
from .local import may_invoke_lambda
from .observer import DrainObserver
from .powertools import count


def event_kind(event: Any) -> str:
    """``api`` (API Gateway), ``schedule`` (EventBridge) or ``direct``."""
    if isinstance(event, dict):
        if "httpMethod" in event and "requestContext" in event:
            return "api"
        if event.get("source") == "aws.events" or "detail-type" in event:
            return "schedule"
    return "direct"


API_WAIT_SECONDS = 25.0
"""``POST /drain?wait=true`` drains in the request for at most this long: under API Gateway's
29 s, with room for the answer."""


def wants_to_wait(event: dict[str, Any]) -> bool:
    """``?wait=true`` (or 1, yes): drain in the request and answer with its summary."""
    query = event.get("queryStringParameters") or {}
    return str(query.get("wait", "")).strip().lower() in ("true", "1", "yes")


def api_answer(status: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"statusCode": status, "headers": {"Content-Type": "application/json"},
            "body": json.dumps(body)}


class DrainFunction:
    """What one container of the drain function keeps between invocations, and runs in each."""

    def __init__(self, *, settings: Settings, registry: Registry, connector: Connector,
                 logger: Logger, metrics: Metrics):
        self.settings = settings
        self.registry = registry
        self.connector = connector
        self.logger = logger
        self.metrics = metrics
        self.metric_queues = int(read("PGDRAIN_METRIC_QUEUES"))
        self.checked_timeout = False

    def __call__(self, event: Any, context: Any) -> dict[str, Any]:
        request_id = getattr(context, "aws_request_id", None)
        self.logger.set_correlation_id(request_id)
        kind = event_kind(event)
        if kind == "api" and event.get("httpMethod") != "POST":
            count(self.metrics, {"DrainRequestsRefused": 1})
            return api_answer(405, {"error": "use POST /drain"})
        wait = kind == "api" and wants_to_wait(event)
        if kind == "api" and not wait:
            started = self._start_drain(context)
            if started is not None:
                return started
        self._check_timeout(context.get_remaining_time_in_millis() / 1000)
        try:
            summary = self._drain(context, bound=API_WAIT_SECONDS if kind == "api" else None)
        except Exception:
            # The connection may be mid-transaction or dead: the next invocation starts anew.
            self.connector.discard()
            count(self.metrics, {"DrainErrors": 1})
            self.logger.exception("drain failed", extra={"trigger": kind})
            if kind == "api":  # the details are in the log, under this request id
                return api_answer(500, {"error": "the drain failed; see the drain function's "
                                                 "log", "request_id": request_id})
            raise
        return self._answer(kind, summary, request_id)

    def _start_drain(self, context: Any) -> dict[str, Any] | None:
        """``POST /drain``: start a drain asynchronously and answer 202 at once (API Gateway
        gives up on a request after 29 s, a drain may run for minutes). None where there is
        nothing to invoke (a local run): the caller drains here instead, bounded."""
        request_id = getattr(context, "aws_request_id", None)
        time_left = lambda: context.get_remaining_time_in_millis() / 1000  # noqa: E731
        launcher = self._launcher(context, time_left)
        if launcher is None:
            return None
        if launcher.launch(1, "api") == 1:
            count(self.metrics, {"DrainsStarted": 1})
            self.logger.info("drain started for POST /drain", extra={"trigger": "api"})
            return api_answer(202, {"started": True, "request_id": request_id})
        count(self.metrics, {"DrainErrors": 1})
        return api_answer(503, {"error": "could not start a drain (see the drain function's "
                                         "log); the schedule's next tick will drain",
                                "request_id": request_id})

    def _drain(self, context: Any, *, bound: float | None = None) -> DrainSummary:
        observer = DrainObserver(self.logger, self.metrics, self.metric_queues)
        began = time.monotonic()

        def time_left() -> float:
            left = float(context.get_remaining_time_in_millis()) / 1000
            return left if bound is None else min(left, bound - (time.monotonic() - began))
        try:
            summary = drain(self.connector, self.registry, self.settings,
                            time_left=time_left, observer=observer,
                            launcher=self._launcher(context, time_left))
        finally:
            observer.log_done()
        observer.record(summary, self.connector)
        return summary

    @staticmethod
    def _launcher(context: Any, time_left: Any) -> LambdaLauncher | None:
        """Drains start drains in Lambda, or where AWS_ENDPOINT_URL_LAMBDA names a stand-in
        (pgdrain_dev.lambda_standin); a local run has nothing to invoke (aws.local)."""
        if not may_invoke_lambda("the drain (continuation, fan-out, POST /drain)"):
            return None
        arn = getattr(context, "invoked_function_arn", None)
        return LambdaLauncher(arn, time_left=time_left) if arn else None

    def _answer(self, kind: str, summary: DrainSummary, request_id: str | None
                ) -> dict[str, Any]:
        result = summary.as_dict()
        if summary.stopped == "database_error":
            self.logger.error("drain stopped on a database failure",
                              extra={"trigger": kind, **result})
            if kind == "api":
                return api_answer(503, {"error": f"the drain stopped: {summary.error}",
                                        "request_id": request_id, "summary": result})
            return result
        self.logger.info("drain finished", extra={"trigger": kind, **result,
                                                  "pgdrain_version": VERSION})
        return api_answer(200, result) if kind == "api" else result

    def _check_timeout(self, time_left: float) -> None:
        """Once per container: say loudly if this function's timeout cannot run any job."""
        if self.checked_timeout:
            return
        self.checked_timeout = True
        usable = time_left - self.settings.margin_for(time_left)
        needed = shortest_runnable_seconds(self.registry, self.settings)
        if usable < needed:
            self.logger.error(
                "this function's timeout (%.1f s left at the first invocation) cannot run any "
                "job: %.2f s remain after the safety margin and the shortest job needs %.2f s; "
                "raise the function's timeout", time_left, usable, needed,
                extra={"time_left_seconds": round(time_left, 3)})
