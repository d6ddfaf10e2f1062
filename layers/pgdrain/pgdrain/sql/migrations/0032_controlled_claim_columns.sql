-- The controlled claim returns every column the other claims return (job_claim_returning):
-- pgdrain_claim_controlled (0018) returns the columns a job had then, so a job claimed in a
-- capped or rate-limited queue ran without its tenant, its parents' results
-- (after_parents), the signal it received (wait_result), its tags and meta (0028) and its
-- enqueuer's trace context (0031). This function claims through it and adds them, each read
-- by a statement after the claim's (so in a snapshot that sees the claimed row, whichever
-- transaction inserted it). A function of its own, not a replacement: a drain of the previous
-- release, still running during an upgrade, keeps calling the old one with the old columns.
CREATE FUNCTION pgdrain_claim_controlled_jobs(batch_size int, lease_seconds float8,
                                              only_queues text[])
RETURNS TABLE (id bigint, job_type text, payload text, attempts int, max_attempts int,
               queue text, priority smallint, run_at timestamptz, created_at timestamptz,
               claimed_at timestamptz, lease_expires_at timestamptz, lease_token text,
               dedupe_key text, lost_claims int, tenant text, after_parents text,
               wait_result text, tag_list text[], meta_json text, trace_context text,
               rate_limit int, rate_period float8, rate_starts float8[], clock float8)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT * FROM pgdrain_claim_controlled(batch_size, lease_seconds, only_queues)
    LOOP
        id := c.id; job_type := c.job_type; payload := c.payload; attempts := c.attempts;
        max_attempts := c.max_attempts; queue := c.queue; priority := c.priority;
        run_at := c.run_at; created_at := c.created_at; claimed_at := c.claimed_at;
        lease_expires_at := c.lease_expires_at; lease_token := c.lease_token;
        dedupe_key := c.dedupe_key; lost_claims := c.lost_claims;
        rate_limit := c.rate_limit; rate_period := c.rate_period;
        rate_starts := c.rate_starts; clock := c.clock;
        tenant := NULL; after_parents := NULL; wait_result := NULL; tag_list := NULL;
        meta_json := NULL; trace_context := NULL;
        IF c.id IS NOT NULL THEN
            SELECT j.tenant, j.after_parents, j.wait_result::text, j.tags, j.meta::text,
                   j.trace_context::text
            INTO tenant, after_parents, wait_result, tag_list, meta_json, trace_context
            FROM jobs AS j WHERE j.id = c.id;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
