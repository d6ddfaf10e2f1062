"""The named-query catalogue: every runtime statement, loaded once from ``queries.sql``.

``QUERIES["job_claim_batch"]`` is the statement text with ``:name`` parameters. Migrations are
plain files in ``migrations/`` beside it.

A filter or clause that several statements share is written once, as a fragment
(``-- fragment: job_claimable(j)``), and used as ``{{job_claimable(w)}}``: at load its text
replaces the use, with each parameter's ``param.`` written as the argument's ``arg.`` (the
row alias of the statement using it). Fragments may use fragments. So each statement the
server sees is still plain SQL, planned whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from importlib import resources

from .schema import objects_created, qualify

_ENTRY_LINE = re.compile(
    r"^-- (name|fragment): ([a-z][a-z0-9_]*)(?:\(([a-z_, ]*)\))?\s*$", re.MULTILINE)
_USE = re.compile(r"\{\{\s*([a-z][a-z0-9_]*)\s*(?:\(([A-Za-z0-9_, ]*)\))?\s*\}\}")


class CatalogueError(ValueError):
    """The query catalogue is malformed (duplicate, unsorted or empty entry, or a fragment
    unknown, unused, used with the wrong arguments, or using itself)."""


def _sql_of(body: str) -> str:
    return "\n".join(
        line for line in body.strip().splitlines() if not line.lstrip().startswith("--")
    ).strip()


def _names(params: str | None) -> list[str]:
    return [p.strip() for p in params.split(",")] if params and params.strip() else []


class _Fragments:
    """Expands fragment uses, recording which fragments were used and refusing cycles."""

    def __init__(self, fragments: dict[str, tuple[list[str], str]]):
        self.fragments = fragments
        self.used: set[str] = set()

    def expand(self, sql: str, stack: tuple[str, ...]) -> str:
        def used(m: re.Match[str]) -> str:
            # Indented as the use, so that the text the server logs and EXPLAIN shows reads.
            margin = " " * (m.start() - sql.rfind("\n", 0, m.start()) - 1)
            return self._one(m[1], _names(m[2]), stack).replace("\n", "\n" + margin)
        return _USE.sub(used, sql)

    def _one(self, name: str, args: list[str], stack: tuple[str, ...]) -> str:
        if name not in self.fragments:
            raise CatalogueError(f"{stack[0]!r} uses the unknown fragment {name!r}")
        if name in stack:
            chain = " -> ".join((*stack, name))
            raise CatalogueError(f"fragment {name!r} uses itself: {chain}")
        params, body = self.fragments[name]
        if len(args) != len(params):
            raise CatalogueError(
                f"{stack[-1]!r} uses fragment {name!r} with {len(args)} arguments, "
                f"not {len(params)}")
        self.used.add(name)
        # Nested uses first, so that a fragment's row passed on to another is renamed too.
        body = self.expand(body, (*stack, name))
        for param, arg in zip(params, args, strict=True):
            body = re.sub(rf"\b{param}\.", f"{arg}.", body)
        return body


def parse_catalogue(text: str) -> dict[str, str]:
    """Split catalogue text into ``{name: sql}``, fragments expanded; description comment
    lines are dropped. Statements and fragments are each sorted by name."""
    parts = _ENTRY_LINE.split(text)
    queries: dict[str, str] = {}
    fragments: dict[str, tuple[list[str], str]] = {}
    # parts = [preamble, kind1, name1, params1, body1, kind2, ...]
    for kind, name, params, body in zip(parts[1::4], parts[2::4], parts[3::4], parts[4::4],
                                        strict=True):
        if name in (queries if kind == "name" else fragments):
            raise CatalogueError(f"{kind} {name!r} is defined twice")
        sql = _sql_of(body)
        if not sql:
            raise CatalogueError(f"{kind} {name!r} has no SQL")
        if kind == "name":
            queries[name] = sql
        else:
            fragments[name] = (_names(params), sql)
    for entries in (list(queries), list(fragments)):
        if entries != sorted(entries):
            raise CatalogueError("queries must be sorted by name, and fragments too")
    expander = _Fragments(fragments)
    expanded = {name: expander.expand(sql, (name,)) for name, sql in queries.items()}
    unused = sorted(set(fragments) - expander.used)
    if unused:
        raise CatalogueError(f"fragments no statement uses: {', '.join(unused)}")
    return expanded


def _load() -> dict[str, str]:
    text = resources.files(__name__).joinpath("queries.sql").read_text(encoding="utf-8")
    return parse_catalogue(text)


class _Catalogue(Mapping[str, str]):
    """The statements written for the schema in use; or, when the schema setting was refused,
    that refusal, raised by the first statement anything runs (not by ``import pgdrain``, so
    that the CLI and the functions report it as they report any bad setting)."""

    def __init__(self) -> None:
        self.statements: dict[str, str] = {}
        self.refused: Exception | None = None

    def __getitem__(self, name: str) -> str:
        if self.refused is not None:
            raise self.refused
        return self.statements[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.statements)

    def __len__(self) -> int:
        return len(self.statements)


_PLAIN = _load()
_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_CATALOGUE = _Catalogue()
QUERIES: Mapping[str, str] = _CATALOGUE
"""Every statement by name, written for the schema in use (``use_schema``)."""
_schema: str | None = None


def schema_in_use() -> str | None:
    """The schema pgdrain's objects are named in (PGDRAIN_SCHEMA), or None: the connection's
    ``search_path`` finds them."""
    return _schema


def use_schema(name: str | None) -> None:
    """Name pgdrain's objects in schema ``name`` in every statement and migration from now on
    (None: bare, found by ``search_path``). ``import pgdrain`` sets it from PGDRAIN_SCHEMA; a
    process that sets it itself does so before its first statement (a connection's prepared
    statements keep the text they were prepared with)."""
    global _schema
    if name is not None and not _PLAIN_NAME.fullmatch(name):
        # PGDRAIN_SCHEMA's parser refuses such a name with its reasons; this guards the quoting.
        raise ValueError(f"not a schema name pgdrain writes into its statements: {name!r}")
    if name is None:
        rendered = dict(_PLAIN)
    else:
        created = objects()
        rendered = {key: qualify(sql, name, created) for key, sql in _PLAIN.items()}
    _CATALOGUE.statements = rendered
    _CATALOGUE.refused = None
    _schema = name


def refuse_statements(error: Exception) -> None:
    """Make every statement and migration raise ``error`` (a refused schema setting)."""
    _CATALOGUE.refused = error


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
    """``(version, name, sql)`` for every migration file, in version order, written for the
    schema in use."""
    if _CATALOGUE.refused is not None:
        raise _CATALOGUE.refused
    if _schema is None:
        return _migration_files()
    created = objects()
    return [(v, n, qualify(sql, _schema, created)) for v, n, sql in _migration_files()]


def objects() -> frozenset[str]:
    """What pgdrain creates: the migrations' objects and the migration record's table."""
    return objects_created([*(sql for _, _, sql in _migration_files()), *_PLAIN.values()])


def _migration_files() -> list[tuple[int, str, str]]:
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


use_schema(None)
