"""The benchmark's job type: a handler that does nothing, so the queue's own cost is measured."""

from __future__ import annotations

import pgdrain


@pgdrain.job("noop", timeout=5)
def noop(job: pgdrain.Job) -> None:
    pass
