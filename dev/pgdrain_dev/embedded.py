"""A private PostgreSQL for local commands and tests, from the ``pgserver`` package.

Used only when ``DATABASE_URL`` is unset. The server listens on a Unix socket in its data
directory (no TCP port to clash with), starts in about a second, and also works as root (it
runs PostgreSQL as a ``pgserver`` system user).
"""

from __future__ import annotations

import os
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class EmbeddedPostgres:
    """A running embedded server; ``url`` connects to its ``postgres`` database."""

    url: str
    datadir: Path
    _server: Any

    def url_for(self, database: str) -> str:
        """The URL of another database on this server."""
        return self._server.get_uri(database)

    def stop(self) -> None:
        """Stop the server (and delete its data directory if it was temporary)."""
        self._server.cleanup()


def start(datadir: str | Path | None = None) -> EmbeddedPostgres:
    """Start (or attach to) an embedded server in ``datadir``; a temporary one if None.

    A temporary server's data directory is deleted when it stops.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR is not set
            import pgserver
    except ImportError:
        from pgdrain.errors import ConfigError

        raise ConfigError(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed: "
            "`pip install -e dev/` (pgdrain-dev; make does this) or set DATABASE_URL"
        ) from None
    if datadir is None:
        # Under the system temp dir: as root, pgserver opens every ancestor of its data
        # directory to other users, which is harmless there and not in a home folder.
        datadir = Path(tempfile.mkdtemp(prefix="pgdrain-pg-"))
        cleanup = "delete"
    else:
        datadir = Path(datadir)
        cleanup = "stop"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR is not set
        server = pgserver.get_server(datadir, cleanup_mode=cleanup)
    return EmbeddedPostgres(url=server.get_uri("postgres"), datadir=datadir, _server=server)


@contextmanager
def scratch_database(prefix: str = "pgdrain", server_url: str | None = None) -> Iterator[str]:
    """A URL to a new, empty database, dropped afterwards (for demos and benchmarks).

    On the server in ``server_url`` (default: ``DATABASE_URL``), or else on a temporary
    embedded server that is stopped and deleted afterwards.
    """
    from pgdrain.db import connect, with_database

    server_url = server_url or os.environ.get("DATABASE_URL") or None
    server = start() if server_url is None else None
    admin_url = server.url if server is not None else server_url
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = connect(admin_url)
    try:
        admin.run(f'CREATE DATABASE "{name}"')
        try:
            yield with_database(admin_url, name)
        finally:
            admin.run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()
        if server is not None:
            server.stop()


# --- the demo's database, kept for the operator's commands afterwards --------------------------

DEMO_DATABASE = "pgdrain_demo"
_demo_server: EmbeddedPostgres | None = None


def demo_datadir() -> Path:
    """Where ``make demo`` keeps its embedded server (per user, under the system temp dir)."""
    return Path(tempfile.gettempdir()) / f"pgdrain-demo-{os.getuid()}"


@contextmanager
def demo_database() -> Iterator[str]:
    """A fresh ``pgdrain_demo`` database on the demo's embedded server, kept afterwards: the
    server stops when the block ends, and ``pgdrain`` commands start it again."""
    from pgdrain.db import connect

    server = start(demo_datadir())
    try:
        admin = connect(server.url)
        try:
            admin.run(f'DROP DATABASE IF EXISTS "{DEMO_DATABASE}" WITH (FORCE)')
            admin.run(f'CREATE DATABASE "{DEMO_DATABASE}"')
        finally:
            admin.close()
        yield server.url_for(DEMO_DATABASE)
    finally:
        server.stop()


def demo_database_url() -> str | None:
    """The demo's database, if ``make demo`` ran on this machine (an entry point of the
    ``pgdrain.databases`` group: the ``pgdrain`` command's database when none is configured).
    Starts the server for the life of this process."""
    global _demo_server
    if not demo_datadir().is_dir():
        return None
    if _demo_server is None:
        _demo_server = start(demo_datadir())
    return _demo_server.url_for(DEMO_DATABASE)
