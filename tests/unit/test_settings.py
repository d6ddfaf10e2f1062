"""Settings from the environment: defaults, parsing and clear errors."""

from __future__ import annotations

import pytest

from pgdrain.errors import ConfigError
from pgdrain.policy import Backoff
from pgdrain.settings import (
    CREDENTIAL_SETTINGS,
    FUNCTION_SETTINGS,
    SCHEMA_SETTINGS,
    SETTINGS,
    Settings,
)


def test_defaults():
    settings = Settings.from_env({})
    assert settings == Settings()
    assert settings.database_url is None
    assert settings.queues == ()
    # The lease follows the invocation: its time left plus a minute, unless set.
    assert settings.lease_seconds is None
    assert settings.lease_for(119.5) == 180 and settings.lease_for(900) == 960
    assert (settings.concurrency, settings.batch_size, settings.max_drains) == (10, 100, 4)


def test_every_variable_is_read():
    env = {
        "DATABASE_URL": "postgresql://u@h/db",
        "PGDRAIN_LEASE_SECONDS": "120",
        "PGDRAIN_BATCH_SIZE": "25",
        "PGDRAIN_CONCURRENCY": "50",
        "PGDRAIN_POOL_SIZE": "2",
        "PGDRAIN_MAX_DRAINS": "16",
        "PGDRAIN_QUEUES": " emails, webhooks ,,",
        "PGDRAIN_RETENTION_SECONDS": "0",
        "PGDRAIN_PURGE_BATCH_SIZE": "50",
        "PGDRAIN_PURGE_MAX_BATCHES": "0",
        "PGDRAIN_RECLAIM_BATCH_SIZE": "7",
        "PGDRAIN_BACKOFF_BASE_SECONDS": "0.5",
        "PGDRAIN_BACKOFF_CAP_SECONDS": "60",
        "PGDRAIN_BACKOFF_JITTER": "0",
        "PGDRAIN_MAX_JOBS": "50",
        "PGDRAIN_SAFETY_MARGIN_SECONDS": "0.5",
        "PGDRAIN_JOB_TIMEOUT_SECONDS": "4",
        "PGDRAIN_JOBS": "my.jobs,other.jobs",
        "PGDRAIN_TRACING": "true",
        "PGDRAIN_PREPARED_STATEMENTS": "false",
        "PGDRAIN_VACUUM_DEAD_TUPLES": "0",
        "PGDRAIN_VACUUM_INTERVAL_SECONDS": "30",
        "PGDRAIN_FAILED_RETENTION_SECONDS": "86400",
        "PGDRAIN_RESULT_MAX_BYTES": "1024",
    }
    assert Settings.from_env(env) == Settings(
        database_url="postgresql://u@h/db", lease_seconds=120, batch_size=25,
        concurrency=50, pool_size=2, max_drains=16,
        queues=("emails", "webhooks"), retention_seconds=0, failed_retention_seconds=86400,
        purge_batch_size=50,
        purge_max_batches=0, reclaim_batch_size=7, max_jobs=50, safety_margin_seconds=0.5,
        job_timeout_seconds=4, job_modules="my.jobs,other.jobs",
        tracing=True, prepared_statements=False, vacuum_dead_tuples=0,
        vacuum_interval_seconds=30, result_max_bytes=1024,
        backoff=Backoff(base_seconds=0.5, cap_seconds=60, jitter=0),
    )
    # SETTINGS documents exactly what from_env reads (the README table is checked against it).
    # (The credential variables are read by pgdrain.aws.credentials; see test_credentials.py.)
    read_elsewhere = set(CREDENTIAL_SETTINGS) | set(FUNCTION_SETTINGS) | set(SCHEMA_SETTINGS)
    assert {s.name for s in SETTINGS} - read_elsewhere == set(env)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("PGDRAIN_BATCH_SIZE", "ten", "PGDRAIN_BATCH_SIZE must be an integer, got 'ten'"),
        ("PGDRAIN_BATCH_SIZE", "0", "PGDRAIN_BATCH_SIZE must be at least 1, got 0"),
        ("PGDRAIN_LEASE_SECONDS", "-5", "PGDRAIN_LEASE_SECONDS must be at least 1, got -5"),
        ("PGDRAIN_RETENTION_SECONDS", "1.5", "must be an integer"),
        ("PGDRAIN_BACKOFF_BASE_SECONDS", "fast", "must be a number"),
        ("PGDRAIN_BACKOFF_CAP_SECONDS", "nan", "must be a finite number"),
        ("PGDRAIN_BACKOFF_JITTER", "2", "jitter must be between 0 and 1"),
    ],
)
def test_invalid_values_name_the_setting(name, value, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Settings.from_env({name: value})


@pytest.mark.parametrize(("time_left", "margin"), [
    (3, 0.3), (1, 0.2), (0.5, 0.2), (10, 1.0), (20, 2.0), (120, 2.0), (900, 2.0)])
def test_the_safety_margin_scales_with_the_time_an_invocation_has(time_left, margin):
    assert Settings().margin_for(time_left) == pytest.approx(margin)


def test_an_explicit_safety_margin_wins():
    settings = Settings.from_env({"PGDRAIN_SAFETY_MARGIN_SECONDS": "5"})
    assert settings.margin_for(3) == settings.margin_for(900) == 5


def test_the_root_cert_setting_says_what_an_unset_one_does():
    # Unset, db.ssl_context_for verifies an RDS host against the shipped bundle, any other
    # against the system's CAs: the generated README table must say both, not "system CAs".
    from pgdrain.db import RDS_CA_BUNDLE, ConnectParams, ssl_context_for

    rds = ssl_context_for(ConnectParams(user="u", database="d", sslmode="verify-full",
                                        host="db.c9akciq32.eu-west-1.rds.amazonaws.com"))
    bundled = RDS_CA_BUNDLE.read_text().count("BEGIN CERTIFICATE")
    assert rds.cert_store_stats()["x509_ca"] == bundled
    setting = next(s for s in SETTINGS if s.name == "DB_SSL_ROOT_CERT")
    assert "RDS bundle for RDS hosts" in setting.shown and "system" in setting.shown
    assert "rds-ca-bundle.pem" in setting.doc and "truststore" not in setting.doc
