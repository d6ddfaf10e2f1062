"""A password the URL leaves out comes from where libpq finds it: PGPASSWORD, then the
password file (PGPASSFILE or ~/.pgpass), read as libpq reads it."""

from __future__ import annotations

import os

import pytest

from pgdrain.aws.credentials import connect_params_from_env
from pgdrain.pgpass import password_for


def _file(tmp_path, text: str, mode: int = 0o600):
    path = tmp_path / "pgpass"
    path.write_text(text)
    os.chmod(path, mode)
    return {"passfile": str(path)}


def test_pgpassword_comes_first(tmp_path):
    env = {**_file(tmp_path, "*:*:*:*:from-file\n"), "password": "from-env"}
    assert password_for("db.example.com", 5432, "app", "app", **env) == "from-env"


def test_the_first_matching_line_wins_with_wildcards_and_escapes(tmp_path):
    env = _file(tmp_path, "# a comment\n"
                          "other.example.com:5432:app:app:no\n"
                          "db.example.com:6543:*:app:wrong-port\n"
                          "db.example.com:5432:*:app:p\\:ss\\\\word:with:colons\n"
                          "*:*:*:*:fallback\n")
    assert password_for("db.example.com", 5432, "app", "app", **env) == "p:ss\\word:with:colons"
    assert password_for("db.example.com", 5432, "other", "someone", **env) == "fallback"


def test_a_unix_socket_matches_localhost(tmp_path):
    env = _file(tmp_path, "localhost:5432:app:app:local\n")
    assert password_for(None, 5432, "app", "app", **env) == "local"


@pytest.mark.parametrize("mode", [0o644, 0o640])
def test_a_file_others_can_read_is_ignored_as_libpq_does(tmp_path, mode, caplog):
    env = _file(tmp_path, "*:*:*:*:secret\n", mode)
    assert password_for("h", 5432, "d", "u", **env) is None
    assert "can be read by others" in caplog.text and "secret" not in caplog.text


def test_no_file_no_password(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert password_for("h", 5432, "d", "u") is None


def test_home_pgpass_is_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".pgpass").write_text("h:5432:d:u:home\n")
    os.chmod(tmp_path / ".pgpass", 0o600)
    assert password_for("h", 5432, "d", "u") == "home"


def test_database_url_without_a_password_takes_it_from_there(tmp_path):
    env = {"DATABASE_URL": "postgresql://app@db.example.com:5433/appdb",
           "PGPASSFILE": _file(tmp_path, "db.example.com:5433:appdb:app:found\n")["passfile"]}
    assert connect_params_from_env(env).password == "found"
    env["DATABASE_URL"] = "postgresql://app:given@db.example.com:5433/appdb"
    assert connect_params_from_env(env).password == "given"  # the URL's own wins
