-- Schedules made at run time (issue 28): `pgdrain.schedule(conn, ...)`, `PUT /schedules/{name}`,
-- `pgdrain schedule set` store an entry here, beside the ticks of the entries job modules
-- declare. A stored row (source 'stored') holds what to enqueue (cron, zone, type, payload,
-- options) and next_tick, the first tick it waits for, computed by pgdrain when the entry is
-- written or ticked: a drain asks for the stored entries whose next_tick has come through the
-- partial index below, one probe however many customers have a report scheduled. A paused
-- entry has no next_tick (it is not in the index). A declared entry's row keeps its shape
-- (source 'declared', only last_tick and last_job_id); it never has a next_tick.
-- The table holds one row per declared entry until now (a few dozen): small, so the file runs
-- in one transaction whatever the size of jobs, and its locks on pgdrain_schedules last an
-- instant (the new columns are nullable or have a constant default: nothing is rewritten; the
-- index and the check read a few rows). A drain's tick waits that instant, nothing more.
ALTER TABLE pgdrain_schedules ALTER COLUMN last_tick DROP NOT NULL;
ALTER TABLE pgdrain_schedules
    ADD COLUMN IF NOT EXISTS source     text NOT NULL DEFAULT 'declared',
    ADD COLUMN IF NOT EXISTS cron       text,
    ADD COLUMN IF NOT EXISTS tz         text,
    ADD COLUMN IF NOT EXISTS job_type   text,
    ADD COLUMN IF NOT EXISTS payload    jsonb,
    ADD COLUMN IF NOT EXISTS options    jsonb,
    ADD COLUMN IF NOT EXISTS next_tick  timestamptz,
    ADD COLUMN IF NOT EXISTS paused_at  timestamptz,
    ADD COLUMN IF NOT EXISTS created_at timestamptz;
ALTER TABLE pgdrain_schedules DROP CONSTRAINT IF EXISTS pgdrain_schedules_stored_check,
    ADD CONSTRAINT pgdrain_schedules_stored_check CHECK (
    source = 'declared' AND cron IS NULL AND next_tick IS NULL AND paused_at IS NULL
    OR source = 'stored' AND cron IS NOT NULL AND job_type IS NOT NULL AND payload IS NOT NULL
       AND options IS NOT NULL AND created_at IS NOT NULL
       AND (next_tick IS NULL) = (paused_at IS NOT NULL));

CREATE INDEX IF NOT EXISTS pgdrain_schedules_next_tick_idx
    ON pgdrain_schedules (next_tick) WHERE next_tick IS NOT NULL;

-- Who enqueues may now schedule (the enqueue API's PUT /schedules/{name}), and who schedules
-- may delete an entry: the roles that could insert jobs get the table whole, and may read the
-- declarations (a stored entry may not take a declared entry's name).
DO $$
DECLARE
    grantee text;
    who text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = current_schema() AND g.table_name = 'jobs'
          AND g.privilege_type = 'INSERT' AND g.grantee <> current_user
    LOOP
        who := CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END;
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s', 'pgdrain_schedules',
                       who);
        EXECUTE format('GRANT SELECT ON %s TO %s', 'pgdrain_schedule_declarations', who);
    END LOOP;
END
$$;
