"""Statements written for a schema of pgdrain's own (PGDRAIN_SCHEMA): each reference to one of
pgdrain's objects is named in the schema, and nothing else changes."""

from __future__ import annotations

import pytest

from pgdrain import sql as catalogue
from pgdrain.settings import schema_name
from pgdrain.sql.schema import objects_created, qualify

OBJECTS = frozenset({"jobs", "pgdrain_queues", "pgdrain_doorbell_ring", "pgdrain_claim"})


@pytest.mark.parametrize(("before", "after"), [
    ("SELECT id FROM jobs AS j WHERE j.queue = :q",
     'SELECT id FROM "q".jobs AS j WHERE j.queue = :q'),
    ("UPDATE jobs SET x = 1 RETURNING jobs.id", 'UPDATE "q".jobs SET x = 1 RETURNING jobs.id'),
    ("SELECT count(*) AS jobs FROM jobs", 'SELECT count(*) AS jobs FROM "q".jobs'),
    ("SELECT setval('pgdrain_doorbell_ring', 0)",
     "SELECT setval('\"q\".pgdrain_doorbell_ring', 0)"),
    ("SELECT * FROM pgdrain_claim(1, 2.0)", 'SELECT * FROM "q".pgdrain_claim(1, 2.0)'),
    ("CREATE INDEX jobs_x_idx ON jobs (x)", 'CREATE INDEX jobs_x_idx ON "q".jobs (x)'),
    ("DROP INDEX CONCURRENTLY IF EXISTS jobs_x_idx",
     'DROP INDEX CONCURRENTLY IF EXISTS "q".jobs_x_idx'),
    ("WHERE g.table_schema = current_schema() AND g.table_name = 'jobs'",
     "WHERE g.table_schema = 'q' AND g.table_name = 'jobs'"),
    ("ALTER TABLE pgdrain_queues ADD CONSTRAINT pgdrain_queues_rate_check CHECK (true)",
     'ALTER TABLE "q".pgdrain_queues ADD CONSTRAINT pgdrain_queues_rate_check CHECK (true)'),
    ("-- the jobs table\nSELECT 1 FROM \"q\".jobs", "-- the jobs table\nSELECT 1 FROM \"q\".jobs"),
    ("SELECT myjobs, jobs_total, x.jobs FROM t", "SELECT myjobs, jobs_total, x.jobs FROM t"),
])
def test_references_are_named_in_the_schema(before, after):
    assert qualify(before, "q", OBJECTS) == after


def test_the_objects_are_what_the_migrations_create():
    assert objects_created(["CREATE TABLE IF NOT EXISTS a (x int);\nCREATE SEQUENCE b;",
                            "CREATE OR REPLACE FUNCTION c(x int) RETURNS int",
                            "CREATE INDEX d ON a (x)"]) == {"a", "b", "c"}
    assert {"jobs", "pgdrain_queues", "pgdrain_migrations",
            "pgdrain_claim_controlled"} <= catalogue.objects()


@pytest.mark.parametrize("bad", ["Queue", "1abc", "my-schema", "a b", "pg_queue", "x" * 64, ""])
def test_a_schema_name_must_be_plain(bad):
    with pytest.raises(ValueError, match="must"):
        schema_name(bad)


def test_the_default_leaves_every_statement_as_written():
    assert catalogue.schema_in_use() is None
    assert 'FROM jobs' in catalogue.QUERIES["migration_jobs_rows"]


def test_only_a_plain_name_is_written_into_the_statements():
    with pytest.raises(ValueError, match="not a schema name"):
        catalogue.use_schema('x"; DROP TABLE jobs; --')
    assert catalogue.schema_in_use() is None
