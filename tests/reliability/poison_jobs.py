"""A rate-limited job type for the poison-row suite (test_poison_rows.py): loaded through
PGDRAIN_JOBS only by the tests that need it, and taken out of the process's REGISTRY after
each (a rated type makes every drain of the process claim it through claim_controlled)."""

from __future__ import annotations

import pgdrain

RATED = "test-poison-rated"


# A rate far above the suite's ten jobs: the type takes the rated claim's path (candidates,
# flow.choose, job_claim_ids), yet never holds a job back.
@pgdrain.job(RATED, timeout=5, rate="1000/s")
def rated(job: pgdrain.Job) -> None:
    pass
