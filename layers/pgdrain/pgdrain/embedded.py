"""A private PostgreSQL for local commands and tests, from the ``pgserver`` package.

Used only when ``DATABASE_URL`` is unset. The server listens on a Unix socket in its data
directory (no TCP port to clash with), starts in about a second, and also works as root (it
runs PostgreSQL as a ``pgserver`` system user).
"""

from __future__ import annotations

import tempfile
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
        import pgserver
    except ImportError:
        from .errors import ConfigError

        raise ConfigError(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed: "
            "`pip install 'pgdrain[embedded]'` (make does this) or set DATABASE_URL"
        ) from None
    if datadir is None:
        # Under the system temp dir: as root, pgserver opens every ancestor of its data
        # directory to other users, which is harmless there and not in a home folder.
        datadir = Path(tempfile.mkdtemp(prefix="pgdrain-pg-"))
        cleanup = "delete"
    else:
        datadir = Path(datadir)
        cleanup = "stop"
    server = pgserver.get_server(datadir, cleanup_mode=cleanup)
    return EmbeddedPostgres(url=server.get_uri("postgres"), datadir=datadir, _server=server)
