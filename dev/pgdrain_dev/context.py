"""Running the functions outside Lambda: a context object with a real deadline.

Used by ``make demo``, the benchmarks and the tests, which call ``lambda_handler`` directly.
"""

from __future__ import annotations

import time
import uuid


class LambdaContext:
    """The parts of Lambda's context object the functions and Powertools read.

    ``get_remaining_time_in_millis()`` counts down from ``timeout_seconds`` in real time, as it
    does in Lambda.
    """

    def __init__(self, function_name: str = "pgdrain-local", timeout_seconds: float = 60.0,
                 memory_limit_in_mb: int = 256, request_id: str | None = None):
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = (
            f"arn:aws:lambda:eu-west-1:000000000000:function:{function_name}")
        self.memory_limit_in_mb = memory_limit_in_mb
        self.aws_request_id = request_id or str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))
