"""Periodic job types for `pgdrain schedules` (PGDRAIN_JOBS=tests.support.scheduled_jobs)."""

from __future__ import annotations

import pgdrain


@pgdrain.job("nightly-report", cron="0 3 * * *", tz="Europe/Paris")
def nightly_report(job: pgdrain.Job) -> None:
    pass


pgdrain.schedule("*/15 * * * *", "nightly-report", {"kind": "quarter-hour"}, queue="reports",
                 name="quarter-hour-report")
