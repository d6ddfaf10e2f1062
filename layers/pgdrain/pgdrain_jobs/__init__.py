"""Job handlers pgdrain ships, each loaded only when ``PGDRAIN_JOBS`` names it:

- ``webhook``: ``deliver-webhook``, a real signed webhook delivery
  (``PGDRAIN_JOBS=jobs,pgdrain_jobs.webhook``).

Your own handlers go in ``layers/pgdrain/jobs/`` (the default ``PGDRAIN_JOBS``). The demo's
stand-ins, which only sleep, live in the dev tools (``pgdrain_dev.demo_jobs``) and are never
deployed. This file imports nothing, so that importing one module does not register others.
"""
