"""A rate-limited job type for the partition suite (test_partitions.py): loaded through
PGDRAIN_JOBS only by the test that needs it, and taken out of the process's REGISTRY after it
(a rated type makes every drain of the process claim it through claim_controlled)."""

from __future__ import annotations

import pgdrain

RATED = "test-partition-rated"


# A rate far above the suite's jobs: the type takes the rated claim's path (candidates,
# flow.choose, job_claim_ids, the type's row locked), yet never holds a job back.
@pgdrain.job(RATED, timeout=5, rate="1000/s")
def rated(job: pgdrain.Job) -> None:
    pass
