"""@pgdrain.job and the registry: options checked when the module loads, per-type policy, and
PGDRAIN_JOBS."""

from __future__ import annotations

import math
import sys

import pytest

import pgdrain
from pgdrain.errors import ConfigError
from pgdrain.policy import DEFAULT_POLICY, Backoff, TypePolicy
from pgdrain.registry import REGISTRY, Registry, load_job_modules


def handler(job):
    pass


def other(job):
    pass


def test_a_handler_is_registered_with_its_options():
    registry = Registry()
    pgdrain.job("t", max_attempts=5, timeout=2.5, registry=registry)(handler)
    got = registry.get("t")
    assert (got.func, got.max_attempts, got.timeout, got.transactional) == (handler, 5, 2.5,
                                                                            False)
    assert got.policy is DEFAULT_POLICY
    assert "t" in registry and registry.job_types() == ["t"] and len(registry) == 1
    assert "t" not in REGISTRY  # an explicit registry, even an empty (falsy) one


def test_a_type_registered_twice_names_both_handlers():
    registry = Registry()
    pgdrain.job("t", registry=registry)(handler)
    pgdrain.job("t", registry=registry)(handler)  # the same function again: a reload, fine
    with pytest.raises(ConfigError, match=r"registered twice \(test_registry.handler and "
                                          r"test_registry.other\)"):
        pgdrain.job("t", registry=registry)(other)


@pytest.mark.parametrize(("options", "message"), [
    ({"max_attempts": 0}, "max_attempts must be a positive integer"),
    ({"max_attempts": True}, "max_attempts must be a positive integer"),
    ({"timeout": -1}, "timeout must be a positive number of seconds"),
    ({"timeout": math.inf}, "timeout must be a positive number of seconds"),
    ({"timeout": "5"}, "timeout must be a positive number of seconds"),
    ({"backoff": 5}, "backoff must be a pgdrain.Backoff or a function"),
    ({"retry_on": ValueError("x")}, "retry_on must be an exception class or a tuple"),
    ({"retry_on": (ValueError, int)}, "retry_on must be an exception class or a tuple"),
    ({"retry_on": ()}, "retry_on must be an exception class or a tuple"),
])
def test_bad_options_fail_when_the_module_loads(options, message):
    with pytest.raises(ConfigError, match=f"t: {message}"):
        pgdrain.job("t", registry=Registry(), **options)


@pytest.mark.parametrize("job_type", ["", "  ", None, 5])
def test_the_job_type_must_be_a_non_empty_string(job_type):
    with pytest.raises(ConfigError, match="job_type must be a non-empty string"):
        pgdrain.job(job_type, registry=Registry())


def test_per_type_policy():
    registry = Registry()
    backoff = Backoff(1, 10, jitter=0)
    pgdrain.job("a", backoff=backoff, retry_on=TimeoutError, registry=registry)(handler)
    assert registry.get("a").policy == TypePolicy(backoff=backoff, retry_on=(TimeoutError,))
    pgdrain.job("b", retry_on=(TimeoutError, ConnectionError), registry=registry)(handler)
    assert registry.get("b").policy.retry_on == (TimeoutError, ConnectionError)


def test_job_modules_are_imported(monkeypatch, tmp_path):
    (tmp_path / "my_jobs_for_registry_test.py").write_text(
        "import pgdrain\n@pgdrain.job('from-module-test')\ndef run(job):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert load_job_modules(" my_jobs_for_registry_test , ") == ["my_jobs_for_registry_test"]
        assert "from-module-test" in REGISTRY
    finally:
        REGISTRY._handlers.pop("from-module-test", None)
        sys.modules.pop("my_jobs_for_registry_test", None)


def test_a_missing_job_module_names_the_setting():
    with pytest.raises(ConfigError, match="PGDRAIN_JOBS: cannot import job module "
                                          "'no_such_module_here'"):
        load_job_modules("no_such_module_here")
