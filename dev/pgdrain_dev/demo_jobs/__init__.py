"""The demo's stand-ins: jobs that sleep 150 ms and do nothing, for ``make demo``, the tests
and the benchmarks. Never deployed nor installed with the library: a stand-in would mark a
real job done without doing it.

- ``examples``: the seed article's ``send-email``, ``generate-export``, ``sync-crm`` (which
  times out on its first attempt);
- ``seed``: those and a simulated ``deliver-webhook``, so the demo needs no network.

This file imports nothing, so that importing one module does not register the others.
"""
