"""Powertools for the functions: the structured logger and the EMF metrics, the library's own
logs through the same JSON formatter (with the invocation's correlation id), and the
functions' database connection from the environment.

Each function calls ``logger_and_metrics()`` once, at its cold start.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit

from ..db import Connector
from ..settings import Settings, read

LIBRARY_LOGGER = "pgdrain"
Handler = Callable[[Any, Any], Any]


def logger_and_metrics() -> tuple[Logger, Metrics]:
    """A Powertools Logger and Metrics for a function (``POWERTOOLS_SERVICE_NAME``,
    ``POWERTOOLS_METRICS_NAMESPACE``), with pgdrain's own loggers writing through it."""
    service = read("POWERTOOLS_SERVICE_NAME")
    metrics = Metrics(namespace=read("POWERTOOLS_METRICS_NAMESPACE"), service=service)
    return structured_logger(service), metrics


def structured_logger(service: str | None = None) -> Logger:
    """A Powertools Logger for a function, with pgdrain's own loggers writing through it. A
    traceback goes once, as text (``exception``): Powertools' structured copy of the same
    frames (``stack_trace``) doubled every failure's line."""
    logger = Logger(service=service or read("POWERTOOLS_SERVICE_NAME"),
                    serialize_stacktrace=False)
    # The library logs with the standard logging module (it knows nothing of Lambda): its
    # lines come out as the function's JSON, with the correlation id, at its level.
    logging.getLogger(LIBRARY_LOGGER)
    copy_config_to_registered_loggers(source_logger=logger, include={LIBRARY_LOGGER})
    return logger


def with_request_id(logger: Logger) -> Callable[[Handler], Handler]:
    """A function's handler whose every log line carries the invocation's request id
    (``correlation_id``), and nothing else of the Lambda context: its name, ARN and memory
    are the log group's own, and Powertools' ``inject_lambda_context`` repeated them on
    every line (about 450 bytes each)."""
    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        def run(event: Any, context: Any) -> Any:
            logger.set_correlation_id(getattr(context, "aws_request_id", None))
            return handler(event, context)
        return run
    return wrap


def count(metrics: Metrics, counts: Mapping[str, int | float]) -> None:
    """Add ``counts`` to the invocation's metrics (unit Count)."""
    for name, value in counts.items():
        metrics.add_metric(name, MetricUnit.Count, value)


def connector_from_env(settings: Settings, *, prepare: bool) -> Connector:
    """The function's connection keeper: credentials from the environment (a URL, a Secrets
    Manager secret, or RDS IAM), server-side bounds unless behind a pooler."""

    def connect(timeout: float | None = None) -> Any:
        # Imported here: the secret and IAM modes pull boto3 (half a second) when used.
        from .credentials import connect_from_env

        return connect_from_env(os.environ, timeout=timeout)

    # Behind a pooler (PGDRAIN_PREPARED_STATEMENTS=false) session settings would pin it.
    return Connector(connect, prepare=prepare, server_bounds=settings.prepared_statements)
