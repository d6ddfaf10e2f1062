"""What a schema holds, read from PostgreSQL's catalogue in a form two installs can be compared
by: a fresh install and an upgrade, one in ``public`` and one in a schema of its own."""

from __future__ import annotations

from typing import Any

_RELATIONS = """
SELECT c.relname::text, c.relkind::text, coalesce(array_to_string(c.reloptions, ','), '')
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = :schema AND c.relkind IN ('r', 'S', 'i')
ORDER BY 1
"""
_COLUMNS = """
SELECT c.relname::text, a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       coalesce(pg_get_expr(d.adbin, d.adrelid), '')
FROM pg_attribute AS a
JOIN pg_class AS c ON c.oid = a.attrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = :schema AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY 1, 2
"""
_INDEXES = """
SELECT i.relname::text, pg_get_indexdef(i.oid), x.indisvalid
FROM pg_index AS x
JOIN pg_class AS i ON i.oid = x.indexrelid
JOIN pg_namespace AS n ON n.oid = i.relnamespace
WHERE n.nspname = :schema
ORDER BY 1
"""
_CONSTRAINTS = """
SELECT c.relname::text, k.conname::text, pg_get_constraintdef(k.oid), k.convalidated
FROM pg_constraint AS k
JOIN pg_class AS c ON c.oid = k.conrelid
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = :schema
ORDER BY 1, 2
"""
_FUNCTIONS = """
SELECT p.proname::text, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
       p.prosrc, p.provolatile::text
FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
WHERE n.nspname = :schema
ORDER BY 1, 2
"""


def fingerprint(conn: Any, schema: str) -> dict[str, list[list[Any]]]:
    """Every relation, column, index, constraint and function of ``schema``, with the
    schema's own name (``"queue".``, ``queue.``) taken out of their text."""
    def plain(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        return value.replace(f'"{schema}".', "").replace(f"{schema}.", "")

    return {part: [[plain(v) for v in row] for row in conn.run(query, schema=schema)]
            for part, query in (("relations", _RELATIONS), ("columns", _COLUMNS),
                                ("indexes", _INDEXES), ("constraints", _CONSTRAINTS),
                                ("functions", _FUNCTIONS))}
