"""The README's signup example, run as written: the user and its job commit together, and a
rollback instead of the commit leaves neither."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
EXAMPLE = re.search(r"<!-- signup-example -->\n```python\n(.*?)```", README, re.DOTALL)[1]


@pytest.fixture
def users(sql):
    sql("CREATE TABLE users (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
        "email text UNIQUE NOT NULL)")


def counts(sql):
    return (sql("SELECT count(*) AS n FROM users")[0]["n"],
            sql("SELECT count(*) AS n FROM jobs WHERE job_type = 'send-email'")[0]["n"])


def test_signup_commits_the_user_and_its_job_together(users, sql, database_url, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url)
    namespace: dict = {}
    exec(EXAMPLE, namespace)
    namespace["conn"].close()
    assert counts(sql) == (1, 1)
    [job] = sql("SELECT payload, dedupe_key FROM jobs")
    assert job == {"payload": {"to": "sarah@example.com"},
                   "dedupe_key": "welcome-sarah@example.com"}


def test_rolled_back_signup_leaves_neither(users, sql, database_url, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url)
    assert 'conn.run("COMMIT")' in EXAMPLE
    namespace: dict = {}
    exec(EXAMPLE.replace('conn.run("COMMIT")', 'conn.run("ROLLBACK")'), namespace)
    namespace["conn"].close()
    assert counts(sql) == (0, 0)
