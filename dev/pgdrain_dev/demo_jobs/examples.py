"""The seed article's simulated jobs: about 150 ms of work each; ``sync-crm`` times out on its
first attempt, as in the article's demo."""

from __future__ import annotations

import time

import pgdrain

WORK_SECONDS = 0.15


@pgdrain.job("send-email", timeout=10)
def send_email(job: pgdrain.Job) -> None:
    time.sleep(WORK_SECONDS)


@pgdrain.job("generate-export", timeout=10)
def generate_export(job: pgdrain.Job) -> None:
    time.sleep(WORK_SECONDS)


@pgdrain.job("sync-crm", timeout=10)
def sync_crm(job: pgdrain.Job) -> None:
    time.sleep(WORK_SECONDS)
    if job.attempts == 1:
        raise TimeoutError("CRM API timed out")
