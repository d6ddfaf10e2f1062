"""pgdrain's development tools, kept out of the Lambda layer.

- ``context``: ``LambdaContext``, a context object with a real deadline, for calling the
  functions' ``lambda_handler`` outside Lambda (demo, benchmarks, tests);
- ``embedded``: a private PostgreSQL from the ``pgserver`` wheel, for commands and tests when
  ``DATABASE_URL`` is unset;
- ``local_invoke``: ``pgdrain invoke``, ``sam local invoke`` without Docker (registered as a
  ``pgdrain.commands`` entry point).
- ``first_deploy``: ``make deploy``'s first run, which asks only how to reach the database,
  the network and the alarms' e-mail, then runs ``sam deploy`` (standard library only).

``make`` installs it (``pip install -e dev/``); the library and the functions never import it.
"""
