-- The doorbell's shared state without a row lock (see pgdrain.aws.doorbell). Until now a ring
-- and every drain's start UPDATEd the one row of pgdrain_doorbell, so an application session
-- that rang on a DB-API connection and then sat idle in the transaction the ring's own
-- statements had opened held that row: every drain then waited on it at its start and
-- stopped at its lock_timeout, and every ring waited too, until the application committed.
--
-- A sequence written with setval() is not transactional: the new value is seen by every
-- session at once, a rollback does not undo it, and neither setval() nor a read of
-- last_value takes a row lock or waits for another session's transaction (the relation locks
-- they take conflict only with ALTER and DROP of the sequence, and LOCK TABLE refuses a
-- sequence). So nothing an application session holds can hold up a drain or a ring.
--
-- One sequence, not two (a last ring and a last drain start compared by time): setval() is
-- last-writer-wins, and a drain whose stamp was computed before another's but written after
-- it would move "the last drain start" back, before a ring that drain did not answer. Here
-- the order of the writes themselves decides: a ring writes its time (epoch milliseconds of
-- the database's clock) before it invokes the drain; a drain writes 0 before it tries for a
-- slot, answering every ring written before. A value other than 0 is a ring no drain has
-- tried for a slot since; 0 (also the start) means none.
CREATE SEQUENCE pgdrain_doorbell_ring AS bigint MINVALUE 0 START WITH 0 NO CYCLE;

-- pgdrain_doorbell stays, unused by this version: during a rolling deploy the old code's warm
-- containers still stamp it at each drain's start and read it at each ring, and without the
-- table each of their drains would stop at its start. Between old and new code the two states
-- do not see each other, which can delay a job by at most one doorbell window, as a failed
-- ring does (the old rings skip for one window after an old ring; the new ones ring more).
-- A later migration may drop it once no old code runs.

-- The roles that could update pgdrain_doorbell (the functions' roles of
-- docs/database-roles.md, and an application's that rings) ring and stamp through the
-- sequence now: reading it needs SELECT, setval() UPDATE.
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = current_schema() AND g.table_name = 'pgdrain_doorbell'
          AND g.privilege_type = 'UPDATE' AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT, UPDATE ON SEQUENCE %s TO %s', 'pgdrain_doorbell_ring',
                       CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END);
    END LOOP;
END
$$;
