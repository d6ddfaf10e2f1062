"""Fixtures for the Lambda functions: load a function's app.py fresh, with its environment,
and feed it the files in events/, as `sam local invoke -e` would."""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.drains import KEEP_HISTORY_SECONDS
from tests.support.functions import killed_at_exit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def function_env(database_url, monkeypatch):
    """The environment a deployed function would have, pointed at this test's database."""
    # The example (jobs: echo), the demo's stand-ins and the webhook (the event files use
    # their types), and the tests' own.
    env = {"DATABASE_URL": database_url,
           "PGDRAIN_JOBS": ("jobs,pgdrain_dev.demo_jobs.examples,pgdrain_jobs.webhook,"
                            "tests.support.jobs"),
           "POWERTOOLS_SERVICE_NAME": "pgdrain-test",
           "POWERTOOLS_METRICS_NAMESPACE": "pgdrain-test",
           "PGDRAIN_BACKOFF_JITTER": "0",
           # Done rows kept: the tests read them (tests/support/drains.py); a test of the
           # shipped default deletes this.
           "PGDRAIN_RETENTION_SECONDS": str(KEEP_HISTORY_SECONDS)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def load_function(function_env, monkeypatch):
    """``load_function("drain", **env)`` imports functions/<name>/app.py as a cold start would."""
    loaded = []

    def load(name: str, **env: str):
        # Powertools' Logger is a process-wide logging.Logger per service, bound to the stdout
        # of its first creation; a fresh service name binds it to this test's captured output.
        monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", f"pgdrain-test-{uuid.uuid4().hex[:8]}")
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        path = ROOT / "functions" / name / "app.py"
        spec = importlib.util.spec_from_file_location(f"pgdrain_function_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        loaded.append(module)
        return module

    library = logging.getLogger("pgdrain")
    saved = library.handlers[:], library.propagate, library.level
    yield load
    for module in loaded:
        connector = getattr(module, "CONNECTOR", None)
        if connector is not None:
            connector.discard()
    # A function routes the library's loggers through its Powertools handler (bound to this
    # test's captured stdout) and stops their propagation: later tests get them back.
    library.handlers[:], library.propagate = saved[0], saved[1]
    library.setLevel(saved[2])


@pytest.fixture
def drain_process(function_env):
    """Start a drain invocation in its own process: ``drain_process(timeout, **env)``."""
    with killed_at_exit() as started:

        def start(timeout: float, **env: str) -> subprocess.Popen:
            process = subprocess.Popen(
                [sys.executable, str(ROOT / "tests" / "support" / "run_drain.py"),
                 str(timeout)],
                env={**os.environ, **function_env, **env}, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True)
            started.append(process)
            return process

        yield start
