"""How one migration file runs: all in one transaction, or online, step by step.

A migration that builds an index on ``jobs`` writes it ``CREATE INDEX CONCURRENTLY``, and one
that adds a CHECK writes it ``NOT VALID`` then ``VALIDATE CONSTRAINT``. On a small table (a
fresh install, a test) the file runs in one transaction with ``CONCURRENTLY`` dropped: the
build takes milliseconds, and the migration is applied whole or not at all. On a big table
it runs online: each such statement alone, outside any transaction, so that writes go on while
the index is built and the rows are checked; the statements between them in transactions of
their own. An online file must therefore be safe to run again from its start (``IF NOT
EXISTS``, ``IF EXISTS``, a constraint dropped before it is added): a run that stopped half
way leaves its version unrecorded and the next run replays the file.

Pure: text in, steps out; ``pgdrain.migrate`` runs them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DOLLAR_QUOTE = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")
_CONCURRENTLY = re.compile(r"\b(INDEX\s+)CONCURRENTLY\s+", re.IGNORECASE)
_ONLINE = re.compile(
    r"^\s*(?:(?:CREATE\s+(?:UNIQUE\s+)?|DROP\s+)INDEX\s+CONCURRENTLY\b"
    r"|ALTER\s+TABLE\b.*\bVALIDATE\s+CONSTRAINT\b)", re.IGNORECASE | re.DOTALL)
_BUILT_INDEX = re.compile(
    r"^\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?"
    r"((?:\"[^\"]+\"\.)?[a-z_][a-z0-9_]*)", re.IGNORECASE)


@dataclass(frozen=True)
class Step:
    """Statements run together: in one transaction, or (``alone``) outside any."""

    sql: str
    alone: bool = False
    builds_index: str | None = None
    """The index a CREATE INDEX CONCURRENTLY builds: a failed build leaves it invalid, to be
    dropped before the build is tried again."""


def code_of(statement: str) -> str:
    """The statement without its comment lines."""
    return "\n".join(line for line in statement.splitlines()
                     if not line.lstrip().startswith("--")).strip()


def split_statements(script: str) -> list[str]:
    """The script's statements, each without its closing semicolon. Semicolons inside string
    literals, dollar-quoted bodies (a function's, a DO block's) and comments do not split."""
    statements: list[str] = []
    start = i = 0
    n = len(script)
    while i < n:
        char = script[i]
        if script.startswith("--", i):
            end = script.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if char == "'":
            i += 1
            while i < n and not (script[i] == "'" and not script.startswith("''", i)):
                i += 2 if script.startswith("''", i) else 1
            i += 1
            continue
        if char == "$":
            tag = _DOLLAR_QUOTE.match(script, i)
            if tag:
                end = script.find(tag[0], tag.end())
                i = n if end < 0 else end + len(tag[0])
                continue
        if char == ";":
            statements.append(script[start:i])
            start = i + 1
        i += 1
    statements.append(script[start:])
    return [s.strip() for s in statements if code_of(s)]


def is_online(statement: str) -> bool:
    """Whether the statement must run alone, outside a transaction, on a big table."""
    return bool(_ONLINE.match(code_of(statement)))


def in_one_transaction(script: str) -> str:
    """The script as one transaction runs it: CREATE/DROP INDEX without CONCURRENTLY."""
    return _CONCURRENTLY.sub(r"\1", script)


def plan(script: str, *, online: bool) -> list[Step]:
    """The steps that apply ``script``: one transaction, unless ``online`` and the script has
    statements that must run alone."""
    statements = split_statements(script)
    if not online or not any(is_online(s) for s in statements):
        return [Step(in_one_transaction(script))]
    steps: list[Step] = []
    together: list[str] = []
    for statement in statements:
        if not is_online(statement):
            together.append(statement)
            continue
        if together:
            steps.append(Step(";\n".join(together) + ";"))
            together = []
        built = _BUILT_INDEX.match(code_of(statement))
        steps.append(Step(statement, alone=True, builds_index=built[1] if built else None))
    if together:
        steps.append(Step(";\n".join(together) + ";"))
    return steps
