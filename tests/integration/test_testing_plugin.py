"""The pytest plugin (entry point pytest11 ``pgdrain``), as a user's suite loads it: in a
pytest run of its own (pytester, in a subprocess: the user's jobs register in pgdrain's
global registry there, not in this suite's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.db

USERS_TEST = '''
import pgdrain
import pgdrain.testing as pgt


@pgdrain.job("send-email")
def send_email(job):
    return {"sent_to": job.payload["to"]}


def signup(conn, email):
    pgdrain.enqueue(conn, "send-email", {"to": email, "template": "welcome"})


def test_signup_sends_the_welcome_email(pgdrain_conn):
    signup(pgdrain_conn, "sarah@example.com")
    pgt.assert_enqueued(pgdrain_conn, "send-email", {"to": "sarah@example.com"})
    drained = pgt.drain_all(pgdrain_conn)
    assert [(r.job_type, r.outcome, r.result) for r in drained] == [
        ("send-email", "done", {"sent_to": "sarah@example.com"})]


def test_each_test_has_a_database_of_its_own(pgdrain_conn, pgdrain_database):
    assert pgt.enqueued(pgdrain_conn, "send-email") == []
    assert pgdrain_database.startswith("postgresql://")
'''


def test_the_fixtures_give_each_test_a_migrated_database(pytester):
    pytester.makepyfile(test_users=USERS_TEST)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_without_a_server_the_fixture_says_how_to_get_one(pytester, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    pytester.makeconftest("import sys\nsys.modules['pgdrain_dev'] = None\n")
    pytester.makepyfile(test_users="def test_it(pgdrain_conn):\n    pass\n")
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*set DATABASE_URL*pip install pgdrain-dev*"])


def test_the_plugin_imports_nothing_of_pgdrain_until_a_fixture_is_used():
    code = ("import sys, pgdrain_pytest; "
            "print(sorted(m for m in sys.modules if m.startswith('pgdrain')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "['pgdrain_pytest']"


def test_the_plugins_fixtures_do_not_clash_with_this_suites(request):
    ours = {"server_url", "template_database", "database_url", "empty_database_url", "conn",
            "connect_to", "sql", "session", "aws"}
    plugin = request.config.pluginmanager.get_plugin("pgdrain")
    assert plugin is not None, "pgdrain's pytest11 entry point is not loaded"
    names = {name for name in vars(plugin) if name.startswith("pgdrain_")}
    assert names == {"pgdrain_server", "pgdrain_template", "pgdrain_database", "pgdrain_conn"}
    assert not names & ours
