"""pgdrain's pytest plugin (entry point ``pytest11``): fixtures for testing your jobs.

- ``pgdrain_database``: the URL of a fresh, migrated database of the test's own, dropped
  afterwards. On the server in ``DATABASE_URL`` when it is set (the role must be allowed to
  create databases), else on an embedded PostgreSQL started once per session (the
  ``pgdrain-dev`` package, ``pip install pgdrain-dev``; in pgdrain's repository
  ``pip install -e dev/``).
- ``pgdrain_conn``: an autocommit pg8000 connection to it, which ``pgdrain.testing``'s
  helpers accept in place of the URL.

Loaded by every pytest run where pgdrain is installed, so this module imports nothing but
pytest: pgdrain and the server load only when a test asks for a fixture. The names all begin
with ``pgdrain_``, clear of a suite's own ``database_url`` or ``conn``. Disable it with
``-p no:pgdrain``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def pgdrain_server() -> Iterator[str]:
    """An admin URL on the PostgreSQL server pgdrain's fixtures create databases on."""
    from pgdrain.settings import read

    url = read("DATABASE_URL")  # pgdrain's reading of it, as every command's
    if url:
        yield url
        return
    try:
        from pgdrain_dev import embedded
    except ImportError:
        pytest.fail("pgdrain's fixtures need a PostgreSQL: set DATABASE_URL to a server where "
                    "the tests may create databases, or install the embedded one with "
                    "`pip install pgdrain-dev` (in pgdrain's repository: pip install -e dev/)",
                    pytrace=False)
    server = embedded.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pgdrain_template(pgdrain_server: str) -> Iterator[str]:
    """A database migrated once per session, which each test's database is cloned from."""
    from pgdrain.db import connect, with_database
    from pgdrain.migrate import migrate

    name = f"pgdrain_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    _admin(pgdrain_server, f'CREATE DATABASE "{name}"')
    conn = connect(with_database(pgdrain_server, name))
    try:
        migrate(conn)
    finally:
        conn.close()
    try:
        yield name
    finally:
        _admin(pgdrain_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pgdrain_database(pgdrain_server: str, pgdrain_template: str) -> Iterator[str]:
    """The URL of a fresh, migrated database of this test's own, dropped afterwards."""
    from pgdrain.db import with_database

    name = f"pgdrain_t_{uuid.uuid4().hex[:12]}"
    _admin(pgdrain_server, f'CREATE DATABASE "{name}" TEMPLATE "{pgdrain_template}"')
    try:
        yield with_database(pgdrain_server, name)
    finally:
        _admin(pgdrain_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pgdrain_conn(pgdrain_database: str) -> Iterator[Any]:
    """An autocommit pg8000 native connection to ``pgdrain_database``, known to
    ``pgdrain.testing`` (``drain_all(pgdrain_conn)`` finds the URL)."""
    from pgdrain.testing import connect

    conn = connect(pgdrain_database)
    try:
        yield conn
    finally:
        conn.close()


def _admin(server_url: str, statement: str) -> None:
    # Database DDL names a database, which no parameter can: the names are ours (above).
    from pgdrain.db import connect

    admin = connect(server_url)
    try:
        admin.run(statement)
    finally:
        admin.close()
