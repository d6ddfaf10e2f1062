"""The named-query catalogue: every runtime statement, loaded once from ``queries.sql``.

``QUERIES["job_claim_batch"]`` is the statement text with ``:name`` parameters. Migrations are
plain files in ``migrations/`` beside it.
"""

from __future__ import annotations

import re
from importlib import resources
from types import MappingProxyType

_NAME_LINE = re.compile(r"^-- name: ([a-z][a-z0-9_]*)\s*$", re.MULTILINE)


class CatalogueError(ValueError):
    """The query catalogue is malformed (duplicate, unsorted or empty entry)."""


def parse_catalogue(text: str) -> dict[str, str]:
    """Split catalogue text into ``{name: sql}``; description comment lines are dropped."""
    parts = _NAME_LINE.split(text)
    queries: dict[str, str] = {}
    # parts = [preamble, name1, body1, name2, body2, ...]
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise CatalogueError(f"query {name!r} is defined twice")
        sql = "\n".join(
            line for line in body.strip().splitlines() if not line.lstrip().startswith("--")
        ).strip()
        if not sql:
            raise CatalogueError(f"query {name!r} has no SQL")
        queries[name] = sql
    names = list(queries)
    if names != sorted(names):
        raise CatalogueError("queries must be sorted by name")
    return queries


def _load() -> MappingProxyType[str, str]:
    text = resources.files(__name__).joinpath("queries.sql").read_text(encoding="utf-8")
    return MappingProxyType(parse_catalogue(text))


QUERIES = _load()

# `:name` parameters, but not the `::type` casts beside them.
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def to_format(sql: str) -> tuple[str, list[str]]:
    """Rewrite ``:name`` parameters as positional ``%s`` for DB-API drivers.

    Returns the statement and the parameter names in order. ``format`` is the one paramstyle
    that pg8000.dbapi (its default), psycopg2 and psycopg 3 all accept. Catalogue statements
    hold no string literal with a colon, so a plain scan is exact for them.
    """
    names = _PARAM.findall(sql)
    return _PARAM.sub("%s", sql.replace("%", "%%")), names


def migrations() -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` for every migration file, in version order."""
    found = []
    for entry in resources.files(__name__).joinpath("migrations").iterdir():
        match = re.fullmatch(r"(\d{4})_([a-z0-9_]+)\.sql", entry.name)
        if match:
            found.append((int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort()
    versions = [v for v, _, _ in found]
    if len(set(versions)) != len(versions):
        raise CatalogueError("two migrations share a version number")
    return found
