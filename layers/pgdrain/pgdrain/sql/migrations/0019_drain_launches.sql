-- Drains launched and not yet started (fan-out and continuation; see pgdrain.fanout). A drain
-- that starts drains counted only the slots taken (PGDRAIN_MAX_DRAINS), not the drains it or
-- another had launched a moment before that were still on their way: each drain of a burst
-- then launched again for the same free slots, and the surplus started only to find every slot
-- taken ("busy"). A launch now reserves room here first, within the slots minus those taken
-- minus the launches on their way; a starting drain takes one reservation off as it tries for
-- its slot. Each reservation is the time it lapses: a launch that Lambda lost, or that starts
-- very late, holds no room for longer than that.
--
-- One row, so that every reservation and every start serializes on its lock for the length
-- of one statement (autocommit: never held across a round trip), and an array of lapse times
-- rather than a row per launch: a reservation reads and writes the whole ledger in one
-- statement.
CREATE TABLE pgdrain_drain_launches (
    one      boolean PRIMARY KEY DEFAULT true CHECK (one),
    launched timestamptz[] NOT NULL DEFAULT '{}'
);
INSERT INTO pgdrain_drain_launches DEFAULT VALUES;

-- As 0015: roles that could update jobs (the drain's, or one app role) may use the new table
-- too, so that an upgrade does not stop a drain at its start (every drain writes it).
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = current_schema() AND g.table_name = 'jobs'
          AND g.privilege_type = 'UPDATE' AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT, UPDATE ON %s TO %s', 'pgdrain_drain_launches',
                       CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END);
    END LOOP;
END
$$;
