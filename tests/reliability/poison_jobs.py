"""A rate-limited job type for the poison-row suite (test_poison_rows.py): loaded through
PGDRAIN_JOBS only by the tests that need it, and taken out of the process's REGISTRY after
each (a rated type makes every drain of the process claim it through claim_controlled)."""

from __future__ import annotations

import pgdrain

RATED = "test-poison-rated"


# A rate far above the suite's ten jobs: the type takes the rated claim's path (candidates,
# flow.choose, job_claim_ids), yet never holds a job back. Per minute, not per second: a
# rated claim's jobs must start within the rate's slack (period / 20, at least 50 ms), and
# 1000/s left 50 ms for ten jobs and a poison's failure, which a loaded machine missed (jobs
# released late, on 96277a4 as after it): this test is about poison rows, not the slack.
@pgdrain.job(RATED, timeout=5, rate="1000/min")
def rated(job: pgdrain.Job) -> None:
    pass
