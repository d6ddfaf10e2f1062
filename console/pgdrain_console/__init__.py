"""pgdrain console: the queue in a web page, for operators.

``pgdrain console`` serves it from the operator's machine against the database the CLI
reaches: the queues at a glance with a chart of the last hour, jobs filtered and paged, one job
whole, the schedules; with ``--allow-actions``, the CLI's actions on one job, on a queue, or on
everything a filter selects. It binds to 127.0.0.1, answers only requests that carry the random
token it prints, renders every value from the database as text, and sends a strict
Content-Security-Policy: no script runs on its pages.
"""
