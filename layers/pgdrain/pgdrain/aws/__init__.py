"""The functions' AWS side: the only library code that imports boto3 or Powertools.

- ``credentials``: the database from ``DATABASE_URL``, a Secrets Manager secret, or RDS IAM;
- ``doorbell``: the enqueue function's asynchronous invoke of the drain after a commit;
- ``powertools``: the functions' structured logs (the library's own included) and metrics;
- ``observer``: the drain's per-job logs and its metrics;
- ``drain_function``: the drain function's body, from any trigger to its answer.

Install it with ``pip install 'pgdrain[aws]'`` (the Lambda layer has it).
"""
