"""All four of the seed article's jobs simulated, ``deliver-webhook`` included, so the demo runs
without a network. ``PGDRAIN_JOBS=pgdrain_dev.demo_jobs.seed`` selects it (make demo)."""

from __future__ import annotations

import time

import pgdrain

from . import examples


@pgdrain.job("deliver-webhook", timeout=10)
def deliver_webhook(job: pgdrain.Job) -> None:
    time.sleep(examples.WORK_SECONDS)
