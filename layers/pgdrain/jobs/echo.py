"""The example job: ``echo`` finishes with its payload as its result. It does what it says,
so a first deploy can be checked end to end: ``POST /jobs`` with ``{"job_type": "echo",
"payload": {"hello": "world"}}``, then ``GET /jobs/{id}`` shows it done with that result.

A job of your own looks the same: a function decorated with ``@pgdrain.job``, in a module of
this folder."""

from __future__ import annotations

from typing import Any

import pgdrain


@pgdrain.job("echo", timeout=5)
def echo(job: pgdrain.Job) -> Any:
    return job.payload  # whatever JSON it was given: an object, a list, a string
