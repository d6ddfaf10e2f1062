"""The job modules pgdrain ships; the default ``PGDRAIN_JOBS`` is
``pgdrain_jobs.examples,pgdrain_jobs.webhook``.

- ``examples``: the seed article's simulated ``send-email``, ``generate-export``, ``sync-crm``;
- ``webhook``: a real ``deliver-webhook`` handler to keep;
- ``seed``: all four seed jobs simulated (the demo's choice, it needs no network).

Replace them with your own job types, or point ``PGDRAIN_JOBS`` at your modules. This file
imports nothing, so that importing one module does not register the others.
"""
