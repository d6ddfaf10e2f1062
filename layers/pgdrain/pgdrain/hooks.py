"""Dead-letter hooks: ``@pgdrain.job(..., on_failed=fn)``.

Every write that ends a job ``failed`` (the drain's finishing write, the janitor's after a lost
lease, expiry, ``pgdrain.fail``) also inserts, for a type with a hook, a job of type
``pgdrain.on-failed`` naming it, in the same transaction: once per failure, never lost and never
doubled. Which types have a hook is read in SQL from ``pgdrain_hooked_types``, where each drain
records its own (``store.declare_hooked_types``), so a process without the job modules (the
CLI's ``pgdrain janitor``) hooks its failures as a drain does. A drain runs that job like any
other, with the handler installed here, which calls the hook with the failed job and its last
error; a hook that raises is retried with backoff.
"""

from __future__ import annotations

from typing import Any

from . import store
from .errors import Discard
from .models import Job
from .registry import Handler, Registry

HOOK_JOB_TYPE = "pgdrain.on-failed"


def install(registry: Registry) -> None:
    """Register the handler of ``pgdrain.on-failed`` jobs in ``registry`` when a type there has
    a hook (once)."""
    if HOOK_JOB_TYPE in registry or not registry.hooked_types():
        return

    def call_hook(job: Job, conn: Any) -> None:
        run_hook(registry, job, conn)

    registry.register(Handler(HOOK_JOB_TYPE, call_hook, transactional=True))


def run_hook(registry: Registry, job: Job, conn: Any) -> None:
    """Call the hook of the failed job ``job.payload`` names, inside the hook job's
    transaction (what it writes commits with its done)."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    handler = registry.get(str(payload.get("job_type")))
    if handler is None or handler.on_failed is None:
        raise Discard(f"no on_failed hook for job type {payload.get('job_type')!r} here")
    failed = store.get_job(conn, payload["job_id"]) or {
        "id": payload["job_id"], "job_type": payload["job_type"], "status": "failed"}
    handler.on_failed(failed, payload.get("error"))
