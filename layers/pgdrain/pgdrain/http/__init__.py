"""The enqueue API's HTTP contract, pure and free of Powertools and AWS.

- ``routes``: every route once (method, path, operation), for the functions' answers, the
  OpenAPI document and the template check;
- ``requests``: ``POST /jobs`` parsed into validated jobs, size limits, ``ApiError``;
- ``service``: the routes as functions of a request and a database session;
- ``openapi``: the OpenAPI 3.1 document, built from the same field list and routes
  (``python -m pgdrain.http.openapi``).
"""
