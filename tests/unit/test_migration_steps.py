"""How a migration file is cut into steps: one transaction on a small table; online, each
index build and constraint check alone, on a big one. And every file that has online steps
can be replayed from its start after a run that stopped half way."""

from __future__ import annotations

import re

from pgdrain.migration_steps import (
    Step,
    code_of,
    in_one_transaction,
    is_online,
    plan,
    split_statements,
)
from pgdrain.sql import migrations

SCRIPT = """-- a comment; with a semicolon
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS x text;
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_x_idx ON jobs (x)
    WHERE x <> ';';
DO $$
BEGIN
    PERFORM 1; -- inside the body
END
$$;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_x_check;
DROP INDEX CONCURRENTLY IF EXISTS jobs_old_idx;
"""


def test_statements_split_on_semicolons_outside_strings_bodies_and_comments():
    statements = [code_of(s) for s in split_statements(SCRIPT)]
    assert statements == [
        "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS x text",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_x_idx ON jobs (x)\n    WHERE x <> ';'",
        "DO $$\nBEGIN\n    PERFORM 1; -- inside the body\nEND\n$$",
        "ALTER TABLE jobs VALIDATE CONSTRAINT jobs_x_check",
        "DROP INDEX CONCURRENTLY IF EXISTS jobs_old_idx",
    ]
    assert split_statements("SELECT 'it''s; fine'; SELECT $tag$ ; $tag$") == [
        "SELECT 'it''s; fine'", "SELECT $tag$ ; $tag$"]


def test_a_small_table_gets_one_transaction_without_concurrently():
    assert plan(SCRIPT, online=False) == [Step(in_one_transaction(SCRIPT))]
    assert "CONCURRENTLY" not in in_one_transaction(SCRIPT)
    assert "CREATE INDEX IF NOT EXISTS jobs_x_idx" in in_one_transaction(SCRIPT)


def test_a_big_table_gets_each_build_and_check_alone():
    steps = plan(SCRIPT, online=True)
    assert [(s.alone, s.builds_index) for s in steps] == [
        (False, None), (True, "jobs_x_idx"), (False, None), (True, None), (True, None)]
    assert code_of(steps[0].sql) == "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS x text;"
    assert steps[2].sql.startswith("DO $$") and steps[2].sql.endswith("$$;")


def test_a_file_without_online_statements_is_one_transaction_even_online():
    script = "CREATE TABLE t (id int);\nINSERT INTO t VALUES (1);\n"
    assert plan(script, online=True) == [Step(script)]


def test_a_schema_qualified_index_is_named_with_its_schema():
    step = plan('CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_y_idx ON "q".jobs (y);',
                online=True)[0]
    assert step.builds_index == "jobs_y_idx"
    assert is_online("CREATE UNIQUE INDEX CONCURRENTLY x ON jobs (a)")
    assert not is_online("CREATE INDEX x ON jobs (a)")


# What may stand in a file with online steps: each statement safe to run a second time.
_REPLAYABLE = re.compile(
    r"^(?:CREATE (?:UNIQUE )?INDEX CONCURRENTLY IF NOT EXISTS"
    r"|DROP INDEX CONCURRENTLY IF EXISTS"
    r"|CREATE TABLE IF NOT EXISTS"
    r"|CREATE INDEX IF NOT EXISTS \w+ ON (?!jobs\b)\w+"  # a table of its own, small
    r"|DROP TRIGGER IF EXISTS"
    r"|CREATE TRIGGER"
    r"|CREATE OR REPLACE FUNCTION"
    r"|ALTER TABLE \w+ VALIDATE CONSTRAINT"
    r"|ALTER TABLE \w+ SET \("
    r"|DO \$\$"
    r"|ALTER TABLE \w+\s+(?:(?:ADD COLUMN IF NOT EXISTS|DROP CONSTRAINT IF EXISTS)[^;]*?,\s*)*"
    r"(?:ADD COLUMN IF NOT EXISTS|DROP CONSTRAINT IF EXISTS|ADD CONSTRAINT))")


def test_every_migration_with_online_steps_can_be_replayed_from_its_start():
    online = 0
    for version, name, script in migrations():
        statements = split_statements(script)
        if not any(is_online(s) for s in statements):
            continue
        online += 1
        for statement in statements:
            code = code_of(statement)
            assert _REPLAYABLE.match(code), f"{version:04d}_{name}: {code[:80]!r}"
            if "ADD CONSTRAINT" in code:
                # Re-added only after it is dropped, in the same statement.
                added = re.findall(r"ADD CONSTRAINT (\w+)", code)
                assert all(f"DROP CONSTRAINT IF EXISTS {c}" in code for c in added), code
            if code.startswith("CREATE TRIGGER"):
                # Created only after it is dropped, earlier in the file.
                trigger = code.split()[2]
                assert f"DROP TRIGGER IF EXISTS {trigger} " in script.split(code)[0], code
    assert online >= 10


def test_no_migration_builds_an_index_on_jobs_or_adds_it_a_check_offline():
    for version, name, script in migrations():
        if version == 1:
            continue  # creates the table: nothing to hold back yet
        for statement in split_statements(script):
            code = code_of(statement)
            assert not re.match(r"CREATE (UNIQUE )?INDEX (?!CONCURRENTLY)\S+ ON jobs\b", code), \
                f"{version:04d}_{name}"
            if re.match(r"ALTER TABLE jobs\b", code) and "CHECK" in code:
                assert "NOT VALID" in code, f"{version:04d}_{name}: {code[:80]!r}"
