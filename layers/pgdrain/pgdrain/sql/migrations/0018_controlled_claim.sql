-- The controlled claim of capped and rate-limited queues in one call (job_claim_controlled):
-- lock the queues' rows, read their room, pick and claim the jobs that fit and append the
-- claim's starts to the rate windows, in one round trip instead of six (BEGIN, flow_lock,
-- flow_rooms, the claim, flow_starts_write, COMMIT), so that a cap or a rate that does not bind
-- costs about what the plain claim does (bench/queue_controls.py, docs/benchmarks.md).
--
-- Why a function and not one statement: in READ COMMITTED each statement of a VOLATILE
-- function takes a snapshot of its own, so the room, read by the statement after the row
-- locks, sees every claim committed before them (one statement's snapshot is older than its
-- locks: a claim committed in between would be missed, and a cap exceeded).
--
-- The window rules below are pgdrain.flow's (start_slack, rate_room, rate_record), which stay
-- their spec: tests/integration/test_flow_sql.py checks that both agree on random windows.
-- A job type's rate is not here: a drain that declares rated types claims through flow_lock,
-- flow_rooms, job_claim_candidates (flow.choose in Python), job_claim_ids, flow_starts_write.

-- flow.start_slack: a twentieth of the period, from 50 ms to a second.
CREATE FUNCTION pgdrain_start_slack(rate_period float8) RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT least(1.0::float8, greatest(0.05::float8, rate_period * 0.05::float8))
$$;

-- flow.rate_room: the starts a window of flat [at, count, ...] pairs still allows at clock.
CREATE FUNCTION pgdrain_rate_room(window_starts float8[], clock float8, rate_limit int,
                                  rate_period float8, slack float8) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT greatest(0, rate_limit - coalesce(sum(trunc(window_starts[i + 1])), 0))::int
    FROM generate_series(1, cardinality(window_starts) - 1, 2) AS i
    WHERE window_starts[i] > clock - rate_period - slack
$$;

-- flow.rate_record: the window with started starts at clock added, less the pairs that left
-- it or that the newer pairs make irrelevant (those after a pair fill the limit alone).
CREATE FUNCTION pgdrain_rate_record(window_starts float8[], clock float8, started int,
                                    rate_limit int, rate_period float8, slack float8)
RETURNS float8[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(e.v ORDER BY w.k, e.half), '{}'::float8[])
    FROM (
        SELECT p.k, p.at, p.n,
               coalesce(sum(p.n) OVER (ORDER BY p.k ROWS BETWEEN 1 FOLLOWING
                                                     AND UNBOUNDED FOLLOWING), 0) AS later
        FROM (SELECT i AS k, window_starts[i] AS at, trunc(window_starts[i + 1]) AS n
              FROM generate_series(1, cardinality(window_starts) - 1, 2) AS i
              WHERE window_starts[i] > clock - rate_period - slack
              UNION ALL
              SELECT coalesce(cardinality(window_starts), 0) + 1, clock, started
              WHERE started > 0) AS p
    ) AS w
    CROSS JOIN LATERAL (VALUES (1, w.at), (2, w.n)) AS e(half, v)
    WHERE w.later < rate_limit
$$;

-- The claim. Rows with an id are the jobs claimed, in claim order, each with its queue's rate
-- (NULL: none) for the start slack the drain gives it. When it claimed nothing, one row per
-- locked rate-limited queue without an id instead: its window as read, and the clock, from
-- which the caller tells how long until the rate lets one more start.
CREATE FUNCTION pgdrain_claim_controlled(batch_size int, lease_seconds float8,
                                         only_queues text[])
RETURNS TABLE (id bigint, job_type text, payload text, attempts int, max_attempts int,
               queue text, priority smallint, run_at timestamptz, created_at timestamptz,
               claimed_at timestamptz, lease_expires_at timestamptz, lease_token text,
               dedupe_key text, lost_claims int, rate_limit int, rate_period float8,
               rate_starts float8[], clock float8)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    locked text[];
    room_queues text[];
    queue_rooms int[];
    tenanted boolean;
    picked bigint[];
    now_epoch float8;
BEGIN
    -- 1. The rows of the queues under a cap or a rate that this drain serves, skipping any
    -- another transaction holds (that queue is being claimed right now: its jobs are left
    -- alone this time). Never waits, so never deadlocks.
    SELECT array_agg(l.queue ORDER BY l.queue) INTO locked
    FROM (SELECT q.queue FROM pgdrain_queues AS q
          WHERE (q.max_running IS NOT NULL OR q.rate_limit IS NOT NULL) AND q.paused_at IS NULL
            AND (only_queues IS NULL OR q.queue = ANY (only_queues))
          ORDER BY q.queue
          FOR UPDATE SKIP LOCKED) AS l;
    IF locked IS NULL THEN
        RETURN;
    END IF;
    -- 2. Each locked queue's room (flow.room), in a snapshot taken after the locks: running
    -- jobs (claimed but not started included) under the cap, the window under the rate. The
    -- clock is read after the locks too, so windows are written in the order locks were held.
    now_epoch := EXTRACT(EPOCH FROM clock_timestamp())::float8;
    SELECT array_agg(q.queue),
           array_agg(least(
               CASE WHEN q.max_running IS NULL THEN 2147483647
                    ELSE greatest(0, q.max_running - (
                        SELECT count(*) FROM jobs AS r
                        WHERE r.status = 'running' AND r.queue = q.queue))::int END,
               CASE WHEN q.rate_limit IS NULL THEN 2147483647
                    ELSE pgdrain_rate_room(q.rate_starts, now_epoch, q.rate_limit,
                                           q.rate_period, pgdrain_start_slack(q.rate_period))
               END)),
           -- As jobs_tenanted: a probe of jobs_pending_tenant_idx, empty unless tenants are
           -- used (then each queue's window is read whole, to take from each tenant in turn).
           (SELECT t.tenant FROM jobs AS t WHERE t.status = 'pending' AND t.tenant IS NOT NULL
            ORDER BY t.tenant LIMIT 1) IS NOT NULL
    INTO room_queues, queue_rooms, tenanted
    FROM pgdrain_queues AS q
    WHERE q.queue = ANY (locked);
    -- 3. The jobs that fit, read without locks: only a controlled claim holding a queue's row
    -- takes its jobs, and the claim below takes only those still pending. Each queue's due
    -- jobs are one range of jobs_pending_queue_idx, read through a window of at most 1,000
    -- (as job_claim_candidates). The filter is the catalogue's job_due and job_ordering_head
    -- fragments, written out (a migration cannot use them; tests/integration/test_queue_caps.py
    -- checks that both paths leave out the same jobs); paused queues are never locked.
    IF tenanted THEN
        -- Fair sharing inside the queue: each tenant's first job in the window (jobs without
        -- a tenant are one more group) before any tenant's second; a tenant counts only with
        -- a job this claim may take.
        SELECT array_agg(c.id ORDER BY c.turn, c.priority, c.run_at, c.id) INTO picked
        FROM (
            SELECT d.*
            FROM unnest(room_queues, queue_rooms) AS r(queue, room)
            CROSS JOIN LATERAL (
                SELECT w.id, w.priority, w.run_at,
                       row_number() OVER (PARTITION BY w.tenant
                                          ORDER BY w.priority, w.run_at, w.id) AS turn
                FROM (
                    SELECT j.id, j.priority, j.run_at, j.tenant
                    FROM jobs AS j
                    WHERE j.status = 'pending' AND j.queue = r.queue AND j.run_at <= now()
                      AND (j.queue, j.priority) >= (r.queue, -32768)
                      AND (j.expires_at IS NULL OR j.expires_at > now())
                      AND j.cancel_requested_at IS NULL
                      AND (only_queues IS NULL OR j.queue = ANY (only_queues))
                      AND (j.ordering_key IS NULL OR NOT EXISTS (
                               SELECT FROM jobs AS o
                               WHERE o.ordering_key = j.ordering_key
                                 AND o.status IN ('pending', 'running')
                                 AND (o.status = 'running' OR o.id < j.id)))
                    ORDER BY j.priority, j.run_at, j.id
                    LIMIT 1000
                ) AS w
                ORDER BY turn, w.priority, w.run_at, w.id
                LIMIT least(r.room, batch_size)
            ) AS d
            WHERE r.room > 0
            ORDER BY d.turn, d.priority, d.run_at, d.id
            LIMIT batch_size
        ) AS c;
    ELSE
        SELECT array_agg(c.id ORDER BY c.priority, c.run_at, c.id) INTO picked
        FROM (
            SELECT d.*
            FROM unnest(room_queues, queue_rooms) AS r(queue, room)
            CROSS JOIN LATERAL (
                SELECT * FROM (
                    SELECT j.id, j.priority, j.run_at
                    FROM jobs AS j
                    WHERE j.status = 'pending' AND j.queue = r.queue AND j.run_at <= now()
                      -- Only jobs_pending_queue_idx has this bound (true of the queue's every
                      -- job): no plan walks jobs_pending_idx filtered by queue.
                      AND (j.queue, j.priority) >= (r.queue, -32768)
                      AND (j.expires_at IS NULL OR j.expires_at > now())
                      AND j.cancel_requested_at IS NULL
                      AND (only_queues IS NULL OR j.queue = ANY (only_queues))
                      AND (j.ordering_key IS NULL OR NOT EXISTS (
                               SELECT FROM jobs AS o
                               WHERE o.ordering_key = j.ordering_key
                                 AND o.status IN ('pending', 'running')
                                 AND (o.status = 'running' OR o.id < j.id)))
                    ORDER BY j.priority, j.run_at, j.id
                    LIMIT 1000
                ) AS w
                LIMIT least(r.room, batch_size)
            ) AS d
            WHERE r.room > 0
            ORDER BY d.priority, d.run_at, d.id
            LIMIT batch_size
        ) AS c;
    END IF;
    -- 4. Claim them as job_claim_ids does, and append their starts to the windows of their
    -- queues under a rate (the rows are still locked), in one statement.
    IF picked IS NOT NULL THEN
        RETURN QUERY
        WITH claimed AS (
            UPDATE jobs AS j
            SET status           = 'running',
                attempts         = j.attempts + 1,
                claimed_at       = now(),
                lease_expires_at = now() + make_interval(secs => lease_seconds),
                lease_token      = gen_random_uuid(),
                -- A job whose claim was lost before has its start recorded, as
                -- job_claim_alone does.
                started_at       = CASE WHEN j.lost_claims > 0 THEN now() END,
                updated_at       = now()
            WHERE j.id = ANY (picked) AND j.status = 'pending'
            RETURNING j.id, j.job_type, j.payload::text AS payload, j.attempts, j.max_attempts,
                      j.queue, j.priority, j.run_at, j.created_at, j.claimed_at,
                      j.lease_expires_at, j.lease_token::text AS lease_token, j.dedupe_key,
                      j.lost_claims
        ), started AS (
            SELECT c.queue, count(*)::int AS n FROM claimed AS c GROUP BY c.queue
        ), windows AS (
            UPDATE pgdrain_queues AS q
            SET rate_starts = pgdrain_rate_record(q.rate_starts, now_epoch, s.n, q.rate_limit,
                                                  q.rate_period,
                                                  pgdrain_start_slack(q.rate_period))
            FROM started AS s
            WHERE q.queue = s.queue AND q.rate_limit IS NOT NULL
            RETURNING q.queue
        )
        SELECT c.*, q.rate_limit, q.rate_period, NULL::float8[], now_epoch
        FROM claimed AS c
        LEFT JOIN pgdrain_queues AS q ON q.queue = c.queue AND q.rate_limit IS NOT NULL
        ORDER BY c.priority, c.run_at, c.id;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY
    SELECT NULL::bigint, NULL::text, NULL::text, NULL::int, NULL::int, q.queue,
           NULL::smallint, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz,
           NULL::timestamptz, NULL::text, NULL::text, NULL::int, q.rate_limit, q.rate_period,
           q.rate_starts, now_epoch
    FROM pgdrain_queues AS q
    WHERE q.queue = ANY (locked) AND q.rate_limit IS NOT NULL;
END
$$;
