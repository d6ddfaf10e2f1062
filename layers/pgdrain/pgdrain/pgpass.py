"""A password that a URL leaves out, where libpq looks for it: ``PGPASSWORD``, then the
password file (``PGPASSFILE``, else ``~/.pgpass``), so that ``DATABASE_URL`` needs no secret
in it and ``psql``'s own setup serves pgdrain too.

As libpq reads the file: ``hostname:port:database:username:password`` a line, ``*`` matching
anything, ``\\:`` and ``\\\\`` escaping, ``#`` lines skipped, the first match wins; a Unix
socket matches ``localhost``; a file that others can read (or not a plain file) is ignored
with a warning, as libpq ignores it.
"""

from __future__ import annotations

import logging
import stat
from pathlib import Path

log = logging.getLogger("pgdrain")


def password_for(host: str | None, port: int, database: str, user: str, *,
                 password: str | None = None, passfile: str | None = None) -> str | None:
    """The password libpq would use for this connection when none is given, or None:
    ``password`` (``PGPASSWORD``), else the matching line of ``passfile`` (``PGPASSFILE``, by
    default ``~/.pgpass``)."""
    if password:
        return password
    path = Path(passfile or "~/.pgpass").expanduser()
    try:
        info = path.stat()
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        log.warning("password file %s is not a plain file: ignored", path)
        return None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("password file %s can be read by others (chmod 0600 it): ignored", path)
        return None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    wanted = ("localhost" if host is None or host.startswith("/") else host, str(port),
              database, user)
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = _fields(line)
        if len(fields) == 5 and all(f in ("*", w) for f, w in zip(fields, wanted, strict=False)):
            return fields[4]
    return None


def _fields(line: str) -> list[str]:
    """A password file line split at its unescaped colons, escapes undone."""
    fields: list[str] = []
    current: list[str] = []
    escaped = False
    for char in line:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ":" and len(fields) < 4:
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
    fields.append("".join(current))
    return fields
