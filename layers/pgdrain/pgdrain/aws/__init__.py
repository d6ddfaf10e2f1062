"""The functions' AWS side: the only library code that imports boto3 or Powertools.

- ``credentials``: the database from ``DATABASE_URL``, a Secrets Manager secret, or RDS IAM;
- ``doorbell``: the asynchronous invoke of the drain after a commit (the enqueue function's,
  and ``ring(conn)`` for an app that enqueues on its own connection);
- ``launcher``: a drain starting drains (continuation, fan-out);
- ``powertools``: the functions' structured logs (the library's own included) and metrics;
- ``observer``: the drain's per-job logs and its metrics;
- ``drain_function``: the drain function's body, from any trigger to its answer.

Install it with ``pip install 'pgdrain[aws]'`` (the Lambda layer has it).
"""

from .doorbell import ring

__all__ = ["ring"]
