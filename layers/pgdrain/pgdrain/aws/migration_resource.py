"""The migration custom resource's body: ``pgdrain migrate`` on stack Create and Update, so the
schema is in place before the first drain; Delete leaves the jobs table and its data alone.

CloudFormation waits for an answer PUT to the pre-signed ``ResponseURL``; every path answers,
failures included, before the function's timeout: the connection, the secret's fetch and every
statement are bounded by the invocation's time left less the time the answer needs (a
database that accepts TCP and never answers costs that long, then FAILED). The template's
``ServiceTimeout`` bounds CloudFormation's own wait if the function dies without answering.
"""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from aws_lambda_powertools import Logger

from ..migrate import migrate

# Kept for the answer to CloudFormation (its PUT is one short request to S3).
ANSWER_SECONDS = 20.0
# The connect and login never take more than this, whatever the time left.
CONNECT_SECONDS = 15.0


def _connect(seconds: float) -> Any:
    """A connection whose connect, secret fetch, socket reads and statements all end within
    ``seconds`` (a lock wait within a tenth of it)."""
    from ..db import as_session, server_bounds
    from .credentials import connect_from_env

    if seconds <= 1:
        raise TimeoutError(f"only {seconds:.1f} s were left to migrate in; raise the "
                           "function's timeout")
    conn = connect_from_env(timeout=min(CONNECT_SECONDS, seconds))
    as_session(conn).one("connection_bound", **server_bounds(int(seconds * 1000)))
    return conn


def _seconds_for_work(context: Any) -> float:
    return float(context.get_remaining_time_in_millis()) / 1000 - ANSWER_SECONDS


def _answer(event: dict[str, Any], context: Any, status: str, reason: str,
            data: dict[str, Any]) -> None:
    body = json.dumps({
        "Status": status,
        "Reason": f"{reason} (log stream {getattr(context, 'log_stream_name', '?')})"[:1000],
        "PhysicalResourceId": event.get("PhysicalResourceId") or "pgdrain-schema",
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "Data": data,
    }).encode()
    # The pre-signed S3 URL CloudFormation gave; its signature covers an empty Content-Type.
    request = urllib.request.Request(event["ResponseURL"], data=body, method="PUT",
                                     headers={"Content-Type": "",
                                              "Content-Length": str(len(body))})
    left = context.get_remaining_time_in_millis() / 1000 if context is not None else 30.0
    with urllib.request.urlopen(request, timeout=max(1.0, min(30.0, left - 1))) as response:
        response.read()


def handle(event: dict[str, Any], context: Any, logger: Logger) -> dict[str, Any]:
    """Custom::PgdrainMigration: Create and Update migrate; Delete does nothing. Always
    answers CloudFormation; returns what it answered."""
    logger.set_correlation_id(getattr(context, "aws_request_id", None))
    kind = event.get("RequestType")
    status, reason, data = "SUCCESS", "nothing to do on delete", {"Applied": ""}
    if kind in ("Create", "Update"):
        try:
            seconds = _seconds_for_work(context)
            deadline = time.monotonic() + seconds
            conn = _connect(seconds)
            try:
                # An online step of a big table's upgrade may take most of the time left; a
                # step cut short is resumed by the next update (or `pgdrain migrate`).
                applied = migrate(conn, deadline=deadline)
            finally:
                conn.close()
            reason = f"applied {', '.join(applied)}" if applied else "schema is up to date"
            data = {"Applied": ",".join(applied)}
            logger.info("migrated", extra={"applied": applied})
        except Exception as exc:  # answer FAILED instead of leaving the stack waiting
            logger.exception("migration failed")
            status = "FAILED"
            reason = f"pgdrain migrate failed: {type(exc).__name__}: {exc}"[:500]
    _answer(event, context, status, reason, data)
    return {"Status": status, "Reason": reason, "Data": data}
