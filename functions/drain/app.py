"""The drain function: janitor, then a bounded, deadline-aware drain of due jobs, then exit.

Triggered by the EventBridge schedule (every minute), by ``POST /drain`` through API Gateway,
and by direct or asynchronous invokes (the enqueue function's doorbell). Returns the summary
(``reclaimed``, ``claimed``, ``done``, ``retried``, ``failed``, ``released``, ...); through API
Gateway the same object is the JSON body of a 200. Wiring only: the body is
``pgdrain.aws.drain_function``.
"""

from __future__ import annotations

from typing import Any

import pgdrain
from pgdrain.aws.drain_function import DrainFunction
from pgdrain.aws.powertools import connector_from_env, logger_and_metrics, with_request_id

logger, metrics = logger_and_metrics()
# Settings and job modules load once per container; a bad setting fails the cold start loudly.
SETTINGS = pgdrain.Settings.from_env()
pgdrain.load_job_modules(SETTINGS.job_modules)
CONNECTOR = connector_from_env(SETTINGS, prepare=SETTINGS.prepared_statements)
FUNCTION = DrainFunction(settings=SETTINGS, registry=pgdrain.REGISTRY, connector=CONNECTOR,
                         logger=logger, metrics=metrics)


def _invoke(event: Any, context: Any) -> dict[str, Any]:
    return FUNCTION(event, context)


_handler = metrics.log_metrics(with_request_id(logger)(_invoke))
if SETTINGS.tracing:
    # Powertools' Tracer imports the X-Ray SDK (about a second of cold start): only on request.
    from aws_lambda_powertools import Tracer

    _handler = Tracer(service=logger.service).capture_lambda_handler(_handler)


def lambda_handler(event: Any, context: Any) -> dict[str, Any]:
    """The function's entry point (``functions/drain/app.py``, ``lambda_handler``)."""
    return _handler(event, context)
