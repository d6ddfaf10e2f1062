"""``pgdrain console`` as the operator runs it: a process that prints its URL first, answers
the token it printed, and stops on Ctrl-C; and what the command says where the console is not
installed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest

URL = re.compile(r"http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]{43})")


def _start(database_url: str, *options: str) -> subprocess.Popen[str]:
    env = {**os.environ, "DATABASE_URL": database_url}
    return subprocess.Popen([sys.executable, "-m", "pgdrain", "console", "--port", "0",
                             *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def test_the_console_prints_its_url_first_and_answers_only_that_token(database_url):
    process = _start(database_url)
    try:
        first = process.stdout.readline().strip()
        found = URL.fullmatch(first)
        assert found, first
        port, token = found.groups()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
        assert refused.value.code == 403
        refused.value.close()
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with browser.open(first, timeout=10) as page:
            assert page.status == 200
            body = page.read().decode()
        assert "read-only" in body and "Overview" in body
        database = urllib.parse.urlsplit(database_url).path.lstrip("/")
        assert f"/{database} (DATABASE_URL)" in body  # says which database it is on
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=20)
    assert process.returncode == 0
    assert "read-only" in err and token not in err  # the log never holds the token


def test_the_console_refuses_a_port_that_is_taken(database_url):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "pgdrain", "console", "--port",
                                 str(port)], capture_output=True, text=True, timeout=60,
                                env={**os.environ, "DATABASE_URL": database_url})
    assert result.returncode == 1 and result.stdout == ""
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_without_the_console_installed_the_command_says_how_to_get_it(monkeypatch, capsys):
    import importlib.metadata

    from pgdrain import cli

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    assert cli.main(["console", "--port", "9"]) == 2
    assert "pip install ./console" in capsys.readouterr().err
