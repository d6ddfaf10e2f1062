"""Connecting fails with a message that says what is wrong and what to do, never a driver's
internals: a server that wants a password none was given, one that never answers."""

from __future__ import annotations

import time

import pytest

from pgdrain.aws.credentials import connect_from_env
from pgdrain.errors import DatabaseConnectError
from tests.support.auth_standin import CLEARTEXT, SCRAM, asking_for_a_password
from tests.support.silent import silent_port


def test_a_scram_server_without_a_password_says_how_to_give_one(tmp_path, monkeypatch):
    # pg8000 itself fails here with AttributeError: 'NoneType' object has no attribute
    # 'decode'.
    with asking_for_a_password(SCRAM) as (port, answers):
        monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.pgpass there
        env = {"DATABASE_URL": f"postgresql://app@127.0.0.1:{port}/appdb?sslmode=disable"}
        with pytest.raises(DatabaseConnectError) as raised:
            connect_from_env(env, timeout=5)
    message = str(raised.value)
    assert f"could not connect to 127.0.0.1:{port}/appdb as app" in message
    assert "SCRAM password authentication, but no password was provided" in message
    assert "PGPASSWORD" in message and "~/.pgpass" in message
    assert "AttributeError" not in message and answers == []


def test_pgpassword_is_what_the_server_gets(tmp_path):
    with asking_for_a_password(CLEARTEXT) as (port, answers):
        env = {"DATABASE_URL": f"postgresql://app@127.0.0.1:{port}/appdb?sslmode=disable",
               "PGPASSWORD": "from-the-environment"}
        with pytest.raises(DatabaseConnectError):  # the stand-in says nothing after it
            connect_from_env(env, timeout=2)
    assert answers == [b"from-the-environment\x00"]


def test_the_command_names_a_host_that_never_answers_within_its_connect_wait(monkeypatch):
    from pgdrain.cli import database

    monkeypatch.setattr(database, "CONNECT_SECONDS", 0.5)
    with silent_port() as (port, _):
        began = time.monotonic()
        with pytest.raises(DatabaseConnectError) as raised:
            database.open_connection(
                {"DATABASE_URL": f"postgresql://app:pw@127.0.0.1:{port}/appdb?sslmode=disable"})
    assert time.monotonic() - began < 5
    assert f"127.0.0.1:{port}/appdb" in str(raised.value) and "pw" not in str(raised.value)
