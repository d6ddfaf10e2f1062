"""The migration custom resource: runs ``pgdrain migrate`` when the stack is created or updated,
and answers CloudFormation on every path within the function's timeout. Deleting the stack
leaves the jobs table and its data alone. Wiring only: the body is
``pgdrain.aws.migration_resource``.
"""

from __future__ import annotations

from typing import Any

from pgdrain.aws.migration_resource import ANSWER_SECONDS, handle
from pgdrain.aws.powertools import structured_logger, with_request_id

# JSON lines, the library's own included (a rotated secret's retry, a migration applied).
logger = structured_logger()
__all__ = ["ANSWER_SECONDS", "lambda_handler"]


@with_request_id(logger)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Custom::PgdrainMigration: Create and Update migrate; Delete does nothing."""
    return handle(event, context, logger)
