"""The enqueue function's body: API Gateway (REST, proxy) events to ``pgdrain.http.service``
and its answers back, the database bounded by the invocation's time left, the drain rung after
a commit that created a due job. ``functions/enqueue/app.py`` only wires this up.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError

from ..db import Connector, Session
from ..http import service
from ..http.requests import Limits
from ..http.routes import match
from ..registry import Registry
from ..settings import Settings
from .doorbell import Doorbell
from .powertools import count

# Powertools' resolver takes every request to one handler, which finds its route with
# ``pgdrain.http.routes.match``: Powertools' own patterns take only some characters in a path
# parameter (a queue named with an ESC or U+202E matched no route) and leave it
# percent-encoded. ``(?s:.*)`` matches any path, newlines included.
ANY_PATH = "(?s:.*)"
# Lower case, then upper: the catalogue's test reads a quoted upper-case DELETE as SQL.
METHODS = [m.upper() for m in ("get", "post", "put", "patch", "delete", "head", "options")]


class EnqueueFunction:
    """What one container of the enqueue function keeps between invocations: the resolver
    (its one handler serves the routes of ``pgdrain.http.routes`` for this function), and its
    connection."""

    def __init__(self, *, settings: Settings, registry: Registry, limits: Limits,
                 connector: Connector, doorbell: Doorbell, logger: Logger, metrics: Metrics):
        self.settings = settings
        self.connector = connector
        self.doorbell = doorbell
        self.logger = logger
        self.metrics = metrics
        self.app = app = APIGatewayRestResolver()
        self.api = service.EnqueueApi(registry=registry, limits=limits, session=self.session,
                                      wait_budget=self.wait_budget,
                                      # Behind a pooler a LISTEN would pin the session or
                                      # reach another client's backend: poll instead.
                                      wait_listens=settings.prepared_statements,
                                      time_left=self.time_left)
        app.route(ANY_PATH, method=METHODS)(self._serve)
        # A method outside METHODS reaches no handler: answered the same way (405 or 404).
        app.exception_handler(NotFoundError)(self._no_route)
        app.exception_handler(Exception)(self._failed)

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.logger.set_correlation_id(getattr(context, "aws_request_id", None))
        count(self.metrics, {"Requests": 1})
        return self.app.resolve(event, context)

    def time_left(self) -> float:
        return self.app.lambda_context.get_remaining_time_in_millis() / 1000

    def wait_budget(self) -> float:
        """How long a ``GET /jobs/{id}?wait=`` may still wait: the time left less the whole
        margin (its statements may run until half of it is left; the rest is for answering)."""
        left = self.time_left()
        return left - self.settings.margin_for(left)

    def session(self) -> Session:
        """The connection, every statement bounded by the time left less half the margin
        (the other half is for answering)."""
        left = self.time_left()
        self.connector.open(time.monotonic() + left - self.settings.margin_for(left) / 2)
        return self.connector.session()

    def _serve(self) -> Response[Any]:
        event = self.app.current_event
        found = match(event.http_method, event.path or "", "enqueue")
        if found is None:
            return self._answer(service.no_route(event.http_method, event.path or ""))
        headers = {k.lower(): v for k, v in (event.headers or {}).items()}
        request = service.Request(body=event.body, base64_encoded=bool(event.is_base64_encoded),
                                  headers=headers, path_params=found.params,
                                  query=dict(event.query_string_parameters or {}))
        return self._answer(self.api.handle(found.route.operation_id, request))

    def _no_route(self, error: NotFoundError) -> Response[Any]:
        return self._serve()

    def _failed(self, error: Exception) -> Response[Any]:
        request_id = getattr(self.app.lambda_context, "aws_request_id", None)
        return self._answer(service.error_response(error, request_id))

    def _answer(self, response: service.Response) -> Response[Any]:
        if response.drop_connection:
            self.connector.discard()
        line = response.log
        if line is not None:
            getattr(self.logger, line.level)(line.message, extra=line.fields,
                                             exc_info=line.error)
        count(self.metrics, response.metrics)
        if response.ring:  # rung, skipped, late, off or failed; never fails the request
            # The database decides whether a ring is needed (a drain may be running, or on
            # its way), on the request's connection, now that its commit is done.
            conn = self.connector.session() if self.connector.connected else None
            outcome = self.doorbell.ring(conn, time_left=self.time_left())
            if outcome != "off":
                count(self.metrics, {f"Doorbell{outcome.capitalize()}": 1})
        return Response(status_code=response.status,
                        content_type=content_types.APPLICATION_JSON, body=response.body,
                        headers=response.headers or None)
