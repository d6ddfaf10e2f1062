"""Whether this process may invoke Lambda: in Lambda it may (``AWS_LAMBDA_FUNCTION_NAME``);
in a local invocation (``sam local invoke``, ``sam local start-api``, ``pgdrain invoke``: they
set ``AWS_SAM_LOCAL`` beside a function name that only looks real) it may not, unless
``AWS_ENDPOINT_URL_LAMBDA`` names a stand-in that runs the invoked drains on this machine
(``python -m pgdrain_dev.lambda_standin``). Without this, a local drain's continuation and
fan-out, ``POST /drain`` and the enqueue function's doorbell invoked a Lambda function of that
name in the shell's region with the shell's credentials."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ..settings import read

log = logging.getLogger(__name__)

NOT_INVOKED = ("local invocation (AWS_SAM_LOCAL): %s starts no drain in AWS; set "
               "AWS_ENDPOINT_URL_LAMBDA to `python -m pgdrain_dev.lambda_standin`'s address "
               "to run the drains it would start on this machine")
_said: set[str] = set()


def may_invoke_lambda(what: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether ``what`` (the drain's launches, the doorbell) may invoke Lambda here; where it
    may not because the invocation is local, says so once per process."""
    if read("AWS_ENDPOINT_URL_LAMBDA", env):
        return True
    if read("AWS_SAM_LOCAL", env):
        if what not in _said:
            _said.add(what)
            log.info(NOT_INVOKED, what)
        return False
    return bool(read("AWS_LAMBDA_FUNCTION_NAME", env))
