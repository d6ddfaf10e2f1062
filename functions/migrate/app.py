"""The migration custom resource: runs ``pgdrain migrate`` when the stack is created or updated,
so the schema is in place before the first drain.

CloudFormation waits for an answer PUT to the pre-signed ``ResponseURL``; every path answers,
failures included (otherwise the stack hangs for an hour). Deleting the stack leaves the jobs
table and its data alone.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from aws_lambda_powertools import Logger

from pgdrain.migrate import migrate

logger = Logger(service="pgdrain-migrate")


def _connect() -> Any:
    from pgdrain.aws.credentials import connect_from_env

    return connect_from_env()


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
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Custom::PgdrainMigration: Create and Update migrate; Delete does nothing."""
    kind = event.get("RequestType")
    status, reason, data = "SUCCESS", "nothing to do on delete", {"Applied": ""}
    if kind in ("Create", "Update"):
        try:
            conn = _connect()
            try:
                applied = migrate(conn)
            finally:
                conn.close()
            reason = f"applied {', '.join(applied)}" if applied else "schema is up to date"
            data = {"Applied": ",".join(applied)}
            logger.info("migrated", extra={"applied": applied})
        except Exception as exc:  # answer FAILED instead of leaving the stack waiting
            logger.exception("migration failed")
            status, reason = "FAILED", f"pgdrain migrate failed: {type(exc).__name__}: {exc}"
    _answer(event, context, status, reason, data)
    return {"Status": status, "Reason": reason, "Data": data}
