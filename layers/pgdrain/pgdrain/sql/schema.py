"""Where pgdrain's objects live: statement text rewritten for a schema of the user's choosing.

Unset (the default, and every install before the setting existed), statements name the
objects bare and the connection's ``search_path`` finds them, as it always has. With
``PGDRAIN_SCHEMA`` set, every statement and migration names each of pgdrain's objects with
that schema (``"queue".jobs``), so they are found whatever the connection's ``search_path``
is: the app's own connection too, which pgdrain must never reconfigure, and a database whose
own ``jobs`` table is not pgdrain's.

The objects are the tables, sequences and functions the migrations create: found in the
migrations' text, so a new migration's objects are covered without a list to keep.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_CREATED = re.compile(
    r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:UNLOGGED\s+)?(?:TABLE|SEQUENCE|FUNCTION)\s+(?:IF\s+NOT\s+EXISTS\s+)?"
    r"([a-z_][a-z0-9_]*)", re.IGNORECASE)
# Index names stand alone only where an index is dropped or altered (CREATE INDEX puts the
# index in its table's schema).
_INDEX_NAMED = re.compile(
    r"\b((?:DROP|ALTER)\s+INDEX\s+(?:CONCURRENTLY\s+)?(?:IF\s+EXISTS\s+)?)([a-z_][a-z0-9_]*)",
    re.IGNORECASE)
_CURRENT_SCHEMA = re.compile(r"\bcurrent_schema\(\)", re.IGNORECASE)
# Not a name: a column alias (count(*) AS jobs), or a catalogue lookup by bare table name
# (information_schema's table_name = 'jobs', beside a table_schema test rewritten apart).
_NOT_A_REFERENCE = re.compile(r"(?:\bAS\s+|\btable_name\s*=\s*')$", re.IGNORECASE)


def objects_created(scripts: Iterable[str]) -> frozenset[str]:
    """The names of the tables, sequences and functions these migration scripts create."""
    return frozenset(m[1].lower() for script in scripts for m in _CREATED.finditer(script))


def qualify(sql: str, schema: str, objects: frozenset[str]) -> str:
    """``sql`` with each reference to one of ``objects`` written in ``schema``.

    A name is a reference where it stands as a whole word not already qualified and not
    followed by a dot (``jobs.id`` is a column of the table the statement names): in FROM,
    JOIN, UPDATE, INSERT INTO, ON, CREATE and ALTER, function calls, and the string literals
    that name an object (``'jobs'::regclass``, ``setval('pgdrain_doorbell_ring', …)``, the
    object lists of a GRANT). ``current_schema()`` becomes the schema itself.
    """
    prefix = f'"{schema}".'
    names = "|".join(sorted(objects, key=len, reverse=True))
    reference = re.compile(rf"(?<![\w.\"$])(?:{names})(?![\w\"$.])")

    def named(match: re.Match[str]) -> str:
        text = match.string
        if _NOT_A_REFERENCE.search(text, max(0, match.start() - 40), match.start()):
            return match[0]
        return prefix + match[0]

    def line(text: str) -> str:
        if text.lstrip().startswith("--"):
            return text
        text = reference.sub(named, text)
        text = _INDEX_NAMED.sub(lambda m: m[1] + prefix + m[2], text)
        return _CURRENT_SCHEMA.sub(f"'{schema}'", text)

    return "".join(line(text) for text in sql.splitlines(keepends=True))
