"""Run one drain invocation in this process and print its summary as JSON.

    python tests/support/run_drain.py <timeout_seconds>

The environment configures it as in Lambda (DATABASE_URL, PGDRAIN_JOBS, ...).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "functions" / "drain"), str(ROOT / "layers" / "pgdrain"), str(ROOT)]

import app  # noqa: E402  (the path must be set first, as Lambda's task root would be)

from pgdrain_dev.context import LambdaContext  # noqa: E402

summary = app.lambda_handler({}, LambdaContext("pgdrain-drain", float(sys.argv[1])))
print("SUMMARY " + json.dumps(summary), flush=True)
