"""The enqueue function: the HTTP API in front of the queue (API Gateway REST, proxy events).

``POST /jobs`` inserts one job or a batch in one transaction (201 with the ids; 200 when every
job was a live duplicate), ``GET /jobs/{id}`` shows a job, ``POST /jobs/{id}/retry`` requeues a
failed one. After a commit that created a due job it rings the drain. Wiring only: the routes
are ``pgdrain.http``, the Lambda side ``pgdrain.aws.enqueue_function``.
"""

from __future__ import annotations

from typing import Any

import pgdrain
from pgdrain.aws.doorbell import Doorbell
from pgdrain.aws.enqueue_function import EnqueueFunction
from pgdrain.aws.powertools import connector_from_env, logger_and_metrics, with_request_id
from pgdrain.http.requests import Limits

logger, metrics = logger_and_metrics()
# Loaded once per container: the job types and payload models (not the handlers' own
# dependencies, which job modules import inside their handlers).
SETTINGS = pgdrain.Settings.from_env()
pgdrain.load_job_modules(SETTINGS.job_modules)
# One statement per request: nothing to gain from preparing, and nothing to pin a pooler.
CONNECTOR = connector_from_env(SETTINGS, prepare=False)
FUNCTION = EnqueueFunction(settings=SETTINGS, registry=pgdrain.REGISTRY,
                           limits=Limits.from_env(), connector=CONNECTOR,
                           doorbell=Doorbell.from_env(), logger=logger, metrics=metrics)


@metrics.log_metrics
@with_request_id(logger)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The function's entry point (``functions/enqueue/app.py``, ``lambda_handler``)."""
    return FUNCTION(event, context)
