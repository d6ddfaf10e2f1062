-- Tags and metadata (issue 28): what a job was enqueued with to find it by later (tags, a
-- short list of short strings) and to say what it is about (meta, a small JSON object), for
-- the operators' filters and bulk actions (pgdrain.bulk). NULL when unused: a job enqueued
-- without them writes nothing more, and no new column has a default, so nothing is rewritten.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS tags text[];
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS meta jsonb;
-- The filters' indexes (a tag, all of several: tags @> ...; a meta match: meta @> ...),
-- partial on the column being set, so that a job without tags or meta has no entry in them
-- and its insert writes neither. No drain write changes these columns: the claim's and the
-- finish's updates stay HOT.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_tags_idx
    ON jobs USING gin (tags) WHERE tags IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_meta_idx
    ON jobs USING gin (meta jsonb_path_ops) WHERE meta IS NOT NULL;
