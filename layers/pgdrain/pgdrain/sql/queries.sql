-- Every statement pgdrain runs at runtime, by name.
--
-- Format: each entry starts with a line `-- name: <noun>_<verb>[_qualifier]`, followed by one or
-- more `-- ` lines saying what it does, then the SQL up to the next `-- name:` line. Parameters
-- are `:name` (pg8000's native style; pgdrain.sql converts them for DB-API drivers). Entries are
-- sorted by name. Time always comes from the database (`now()`), never from the caller.

-- Fragments: a filter or clause that several statements share, written once. An entry starts
-- with `-- fragment: <name>(<row>)` and is used as `{{<name>(<alias>)}}`: pgdrain.sql puts its
-- text in place at load, `<row>.` written as `<alias>.`, so every statement stays plain SQL
-- that the planner sees whole. Fragments are sorted by name; each is used somewhere.

-- fragment: flow_queue_window(r)
-- A controlled queue's claimable jobs (r.queue), in claim order, at most 1,000: one range of
-- jobs_pending_queue_idx (only it has the bound on (queue, priority), true of the queue's
-- every job: no plan walks jobs_pending_idx filtered by queue), through a constant LIMIT (the
-- room, which the planner cannot read, it costs at a tenth of the rows under it, and a tenth
-- of a whole queue's range passed jit_above_cost). Due (job_due) and its key's head
-- (job_ordering_head); the queue is not paused (flow_lock never locks a paused one).
SELECT jobs.id, jobs.queue, jobs.job_type, jobs.priority, jobs.run_at, jobs.tenant
FROM jobs
WHERE jobs.queue = r.queue
  AND (jobs.queue, jobs.priority) >= (r.queue, -32768)
  AND {{job_due(jobs)}}
  AND {{job_ordering_head(jobs)}}
ORDER BY jobs.priority, jobs.run_at, jobs.id
LIMIT 1000

-- fragment: flow_type_window(t)
-- A rated job type's claimable jobs (t.job_type) outside paused and controlled queues
-- (job_queue_plain: a controlled queue's window takes those), as flow_queue_window, through
-- jobs_pending_type_idx.
SELECT jobs.id, jobs.queue, jobs.job_type, jobs.priority, jobs.run_at, jobs.tenant
FROM jobs
WHERE jobs.job_type = t.job_type
  AND (jobs.job_type, jobs.priority) >= (t.job_type, -32768)
  AND {{job_due(jobs)}}
  AND {{job_queue_plain(jobs)}}
  AND {{job_ordering_head(jobs)}}
ORDER BY jobs.priority, jobs.run_at, jobs.id
LIMIT 1000

-- fragment: job_batch_head(b)
-- A batch type's claimable jobs (b.job_type), the first b.take in claim order, with
-- when each became due (the later of its run_at and its enqueue: a job enqueued with a past
-- run_at is due from its enqueue): one range of jobs_pending_type_idx. Due (job_due), of a
-- queue neither paused, capped nor rate-limited (job_queue_plain: the controlled claim takes
-- a batch type's jobs there, within the queue's room) and its key's head
-- (job_ordering_head). Jobs naming a tenant and jobs whose claim was lost are taken too: the
-- plain claims leave batch types to job_claim_batch_of_type (:limited_types).
SELECT jobs.id, greatest(jobs.run_at, jobs.created_at) AS due_since
FROM jobs
WHERE jobs.job_type = b.job_type
  AND (jobs.job_type, jobs.priority) >= (b.job_type, -32768)
  AND {{job_due(jobs)}}
  AND {{job_queue_plain(jobs)}}
  AND {{job_ordering_head(jobs)}}
ORDER BY jobs.priority, jobs.run_at, jobs.id
LIMIT b.take

-- fragment: job_claim_document
-- What the plain claims (job_claim_batch, job_claim_batch_by_queue) return: the jobs the
-- claimed CTE claimed (job_claim_returning's columns, in that order) as one JSON array of
-- arrays in claim order, one row and one value for the batch (NULL: none), which the client
-- decodes in one call (store.claimed_jobs_from_document). Read as fifteen columns a row,
-- the driver's decoding cost a no-op drain more CPU than anything else it did (a fifth of
-- its time, docs/benchmarks.md). Each value is as the columns give it: the payload as its
-- JSON text (decoded job by job, as a row's), timestamps as text, decoded as the driver
-- decodes a row's.
SELECT json_agg(json_build_array(
           id, job_type, payload, attempts, max_attempts, queue, priority, run_at::text,
           created_at::text, claimed_at::text, lease_expires_at::text, lease_token,
           dedupe_key, lost_claims, tenant, after_parents, wait_result, tag_list, meta_json,
           trace_context)
       ORDER BY priority, run_at, id)::text AS jobs
FROM claimed

-- fragment: job_claim_due
-- The CTE that claims the ids a claim's `due` CTE locked (job_claim_set), returning each
-- (job_claim_returning). The ids as an array: joined to the CTE, a generic plan guessed many
-- rows and read the whole table in a hash join.
claimed AS (
    UPDATE jobs AS j
    SET {{job_claim_set(j)}}
    WHERE j.id = ANY (ARRAY(SELECT id FROM due))
    RETURNING {{job_claim_returning(j)}}
)

-- fragment: job_claim_returning(j)
-- What every claim returns of each job it claimed (models.Job). The payload comes back as
-- text, decoded job by job: a row inserted by plain SQL that the driver cannot decode (a
-- 5,000-digit number, an array nested 3,000 deep) fails alone instead of the whole batch;
-- wait_result too (what its last wait for a signal got: job.signal), NULL for most jobs;
-- tags and meta (job.tags, job.meta), NULL for a job enqueued without them; trace_context
-- (the enqueuer's trace: pgdrain.job_spans), NULL for most jobs.
j.id, j.job_type, j.payload::text AS payload, j.attempts, j.max_attempts, j.queue,
j.priority, j.run_at, j.created_at, j.claimed_at, j.lease_expires_at,
j.lease_token::text AS lease_token, j.dedupe_key, j.lost_claims, j.tenant, j.after_parents,
j.wait_result::text AS wait_result, j.tags AS tag_list, j.meta::text AS meta_json,
j.trace_context::text AS trace_context

-- fragment: job_claim_set(j)
-- What every claim writes: running, an attempt spent, the lease stamped with a fresh token;
-- a job whose claim was lost before (lost_claims > 0) has its start recorded, so that if its
-- drain dies again, even while decoding it, the janitor knows it was that job and charges it.
status           = 'running',
attempts         = j.attempts + 1,
claimed_at       = now(),
lease_expires_at = now() + make_interval(secs => :lease_seconds::float8),
lease_token      = gen_random_uuid(),
started_at       = CASE WHEN j.lost_claims > 0 THEN now() END,
updated_at       = now()

-- fragment: job_claimable(j)
-- A job the plain claims (job_claim_batch, job_claim_fair, job_claim_alone) may take now, and
-- so what the due count counts: due (job_due), of a queue neither paused nor capped nor
-- rate-limited (job_queue_plain), not of a rate-limited type (job_type_unlimited: the
-- controlled claim takes those) and the head of its ordering key (job_ordering_head). Which
-- of these jobs a claim takes (lost claims alone, tenants in turn) is the claim's own filter.
{{job_due(j)}}
AND {{job_queue_plain(j)}}
AND {{job_type_unlimited(j)}}
AND {{job_ordering_head(j)}}

-- fragment: job_done_set
-- What marking a claimed job done writes (job_complete_batch, job_complete_forget_batch).
status           = 'done',
finished_at      = now(),
lease_expires_at = NULL,
lease_token      = NULL,
started_at       = NULL,
updated_at       = now()

-- fragment: job_due(j)
-- Pending and due, within :queues (NULL: all), not past its expires_at (the janitor ends it:
-- janitor_expire_batch) and not asked to stop (cancel_requested_at, job_cancel: only plain
-- SQL makes such a job pending again, and it is not run for it: the janitor ends it,
-- janitor_cancel_requested_batch). Every claim's filter,
-- controlled ones included; status and run_at are also each reader's index bounds.
j.status = 'pending'
AND j.run_at <= now()
AND (j.expires_at IS NULL OR j.expires_at > now())
AND j.cancel_requested_at IS NULL
AND (:queues::text[] IS NULL OR j.queue = ANY (:queues::text[]))

-- fragment: job_enqueue_rows
-- The rows of an enqueue, from the batch's arrays, in input order (job_enqueue_batch,
-- job_enqueue_batch_unkeyed). An array passed as NULL (unused: no job of the batch sets it)
-- is padded by unnest with NULLs. A job's tags come as one text, comma-separated (a tag holds
-- no comma): unnest would flatten an array of arrays.
INSERT INTO jobs (job_type, payload, queue, priority, max_attempts, run_at, dedupe_key,
                  expires_at, ordering_key, tenant, tags, meta, trace_context)
SELECT i.job_type, i.payload, i.queue, i.priority, i.max_attempts,
       COALESCE(i.run_at, now() + make_interval(secs => i.delay_seconds)), i.dedupe_key,
       COALESCE(i.expires_at, now() + make_interval(secs => i.ttl_seconds)),
       i.ordering_key, i.tenant, string_to_array(i.tags, ','), i.meta, i.trace_context
FROM unnest(:job_types::text[], :payloads::jsonb[], :queues::text[], :priorities::smallint[],
            :max_attempts::int[], :run_ats::timestamptz[], :delays::float8[],
            :dedupe_keys::text[], :expires_ats::timestamptz[], :ttls::float8[],
            :ordering_keys::text[], :tenants::text[], :tags::text[], :metas::jsonb[],
            :trace_contexts::jsonb[])
     WITH ORDINALITY AS i(job_type, payload, queue, priority, max_attempts, run_at,
                          delay_seconds, dedupe_key, expires_at, ttl_seconds, ordering_key,
                          tenant, tags, meta, trace_context, ord)
ORDER BY i.ord

-- fragment: job_ordering_head(j)
-- The job holds no ordering key, or is its key's head: no live job of the key is older (one
-- entry of jobs_ordering_key_live_idx, bounded by the job's id) and none of it runs (one of
-- jobs_ordering_key_running_idx). As one probe for either, it read every live job of the key
-- and its row, to find a running one among them.
(j.ordering_key IS NULL
 OR (NOT EXISTS (SELECT FROM jobs AS o
                 WHERE o.ordering_key = j.ordering_key AND o.id < j.id
                   AND o.status IN ('pending', 'running'))
     AND NOT EXISTS (SELECT FROM jobs AS o
                     WHERE o.ordering_key = j.ordering_key AND o.status = 'running')))

-- fragment: job_page_match(j)
-- What the console's job filters select (NULL: any) within the window of ids [:floor_id,
-- :before_id). :search is a piece of the payload as JSON text, any case (its `%` and `_`
-- are plain characters: strpos, not LIKE). :statuses narrows to the statuses a bulk action
-- applies to. :older_than_seconds and :newer_than_seconds are
-- the job's age since it was enqueued. :tags: all of them (jobs_tags_idx); :meta: contained
-- in the job's meta (jobs_meta_idx).
j.id < :before_id::bigint AND j.id >= :floor_id::bigint
AND (:status::text IS NULL OR j.status = :status::text)
AND (:statuses::text[] IS NULL OR j.status = ANY (:statuses::text[]))
AND (:waiting_for::text IS NULL
     OR (j.status = 'waiting' AND (j.wait_signal IS NOT NULL) = (:waiting_for::text = 'signal')))
AND (:job_type::text IS NULL OR j.job_type = :job_type::text)
AND (:queue::text IS NULL OR j.queue = :queue::text)
AND (:tenant::text IS NULL OR j.tenant = :tenant::text)
AND (:ordering_key::text IS NULL OR j.ordering_key = :ordering_key::text)
AND (:dedupe_key::text IS NULL OR j.dedupe_key = :dedupe_key::text)
AND (:older_than_seconds::float8 IS NULL
     OR j.created_at <= now() - make_interval(secs => :older_than_seconds::float8))
AND (:newer_than_seconds::float8 IS NULL
     OR j.created_at > now() - make_interval(secs => :newer_than_seconds::float8))
AND (:search::text IS NULL OR strpos(lower(j.payload::text), lower(:search::text)) > 0)
AND (:tags::text[] IS NULL OR j.tags @> :tags::text[])
AND (:meta::jsonb IS NULL OR j.meta @> :meta::jsonb)

-- fragment: job_queue_plain(j)
-- The job's queue is neither paused nor capped nor rate-limited (pgdrain_queues, read once
-- per statement). Written as an OR behind "is any queue so set": as the bare
-- `queue <> ALL (...)`, the planner guessed it kept almost no row and sorted every pending job
-- on each claim instead of reading the first ones off jobs_pending_idx (bench/plans.py).
(NOT EXISTS (SELECT FROM pgdrain_queues AS q
             WHERE q.paused_at IS NOT NULL OR q.max_running IS NOT NULL
                OR q.rate_limit IS NOT NULL)
 OR j.queue <> ALL (ARRAY(SELECT q.queue FROM pgdrain_queues AS q
                          WHERE q.paused_at IS NOT NULL OR q.max_running IS NOT NULL
                             OR q.rate_limit IS NOT NULL)))

-- fragment: job_type_unlimited(j)
-- The job's type is not one of :limited_types (NULL: none), behind an initplan: a generic
-- plan's guess for `job_type <> ALL ($n)` (a few types, 10 unknown ones) kept a row in a
-- thousand.
((SELECT :limited_types::text[] IS NULL) OR j.job_type <> ALL (:limited_types::text[]))

-- fragment: queue_controlled_any
-- Whether some queue not paused is capped or rate-limited: the controlled claim has work to
-- look at (and the due counts leave its jobs to controlled_due).
EXISTS (SELECT FROM pgdrain_queues AS q
        WHERE (q.max_running IS NOT NULL OR q.rate_limit IS NOT NULL) AND q.paused_at IS NULL)

-- fragment: queues_open
-- CTEs: open_queues, the queues with pending jobs (found by skipping through
-- jobs_pending_queue_idx, one probe a queue) neither paused nor capped nor rate-limited,
-- within :queues.
queues AS (
    (SELECT queue FROM jobs
     WHERE status = 'pending'
     ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM jobs AS j
            WHERE j.status = 'pending' AND j.queue > q.queue
            ORDER BY j.queue LIMIT 1)
    FROM queues AS q
    WHERE q.queue IS NOT NULL
), open_queues AS (
    -- Through an array: the planner counts 10 of them, not the recursive CTE's 101.
    SELECT o.queue
    FROM unnest(ARRAY(SELECT queue FROM queues WHERE queue IS NOT NULL)) AS o(queue)
    WHERE {{job_queue_plain(o)}}
      AND (:queues::text[] IS NULL OR o.queue = ANY (:queues::text[]))
)

-- fragment: waiters_woken
-- The CTE `woken`: the jobs of :ids that a caller of pgdrain.wait waits for (a row in
-- pgdrain_waiters, migration 0029), each with a notification on the channel pgdrain_wait
-- (payload: its id), sent when the transaction commits. The finishing statements (done, fail,
-- cancel) use it, and must read it (a CTE nothing reads is not run). A job nobody waits for
-- costs one probe of an empty table per statement, not per job, and no notification: a
-- NOTIFY takes the server's notify lock at commit, which would order every drain's commits.
-- An id whose write turns out stale (its claim was lost) is notified all the same: its waiter
-- reads the job again and waits on. A waiter that registered after this statement's snapshot
-- is not notified: it sees the job finished within a second (pgdrain.waiting's re-read).
woken AS (
    SELECT w.job_id, pg_notify('pgdrain_wait', w.job_id::text)
    FROM pgdrain_waiters AS w
    WHERE w.job_id = ANY (:ids::bigint[])
)

-- name: bulk_bounds
-- Bound the statements of one batch of a bulk action (pgdrain.bulk), transaction-local: a row
-- lock waited for at most :lock_ms (below deadlock_timeout, so that in a lock cycle with a
-- drain the batch is the one that gives up, and is tried again), a statement at most
-- :statement_ms.
SELECT set_config('lock_timeout', :lock_ms::int::text, true) AS lock_timeout,
       set_config('statement_timeout', :statement_ms::int::text, true) AS statement_timeout

-- name: clock_advance
-- pgdrain.testing.advance: the queue as it would be :seconds from now, without waiting. Every
-- time the drain compares with now() moves back by :seconds, together (so what is relative
-- stays so): jobs' run_at (delays, backoffs, snoozes, waits), leases, expiry, creation and
-- finish (unique windows, retention, age), rate windows (epoch, jobs, epoch, jobs...), signals'
-- keeping, launches on their way. A schedule's last tick moves to :ticks for the entries in
-- :names (pgdrain.testing decides which: cron ticks sit on the wall clock), and stored
-- entries' next tick moves back with the rest. For test
-- databases: it writes every row.
WITH moved_jobs AS (
    UPDATE jobs
    SET run_at              = run_at - make_interval(secs => :seconds::float8),
        created_at          = created_at - make_interval(secs => :seconds::float8),
        claimed_at          = claimed_at - make_interval(secs => :seconds::float8),
        lease_expires_at    = lease_expires_at - make_interval(secs => :seconds::float8),
        started_at          = started_at - make_interval(secs => :seconds::float8),
        finished_at         = finished_at - make_interval(secs => :seconds::float8),
        expires_at          = expires_at - make_interval(secs => :seconds::float8),
        cancel_requested_at = cancel_requested_at - make_interval(secs => :seconds::float8),
        updated_at          = updated_at - make_interval(secs => :seconds::float8)
    RETURNING 1
), moved_queues AS (
    UPDATE pgdrain_queues AS q
    SET rate_starts = ARRAY(SELECT CASE WHEN (i - array_lower(q.rate_starts, 1)) % 2 = 0
                                        THEN q.rate_starts[i] - :seconds::float8
                                        ELSE q.rate_starts[i] END
                            FROM generate_subscripts(q.rate_starts, 1) AS i ORDER BY i)
    WHERE cardinality(q.rate_starts) > 0
    RETURNING 1
), moved_types AS (
    UPDATE pgdrain_type_rates AS t
    SET rate_starts = ARRAY(SELECT CASE WHEN (i - array_lower(t.rate_starts, 1)) % 2 = 0
                                        THEN t.rate_starts[i] - :seconds::float8
                                        ELSE t.rate_starts[i] END
                            FROM generate_subscripts(t.rate_starts, 1) AS i ORDER BY i)
    WHERE cardinality(t.rate_starts) > 0
    RETURNING 1
), moved_signals AS (
    UPDATE pgdrain_signals
    SET sent_at    = sent_at - make_interval(secs => :seconds::float8),
        expires_at = expires_at - make_interval(secs => :seconds::float8)
    RETURNING 1
), moved_launches AS (
    UPDATE pgdrain_drain_launches AS l
    SET launched = ARRAY(SELECT t - make_interval(secs => :seconds::float8)
                         FROM unnest(l.launched) AS t)
    RETURNING 1
), moved_schedules AS (
    UPDATE pgdrain_schedules AS s SET last_tick = g.tick, updated_at = now()
    FROM unnest(:names::text[], :ticks::timestamptz[]) AS g(name, tick)
    WHERE s.name = g.name
    RETURNING 1
), moved_stored AS (
    -- A stored entry (pgdrain.schedule(conn, ...)) waits for its next_tick: moved back, its
    -- tick comes when the advance reaches it, and its job is due at the moved tick.
    UPDATE pgdrain_schedules SET next_tick = next_tick - make_interval(secs => :seconds::float8)
    WHERE next_tick IS NOT NULL
    RETURNING 1
)
SELECT (SELECT count(*) FROM moved_jobs)::int AS jobs,
       (SELECT count(*) FROM moved_schedules)::int
           + (SELECT count(*) FROM moved_stored)::int AS schedules,
       (SELECT count(*) FROM moved_queues)::int + (SELECT count(*) FROM moved_types)::int
           + (SELECT count(*) FROM moved_signals)::int
           + (SELECT count(*) FROM moved_launches)::int AS others

-- name: connection_bound
-- Bound every later statement of this session by the server too: none may run longer than the
-- invocation had left when it began, nor wait for a lock more than a tenth of that, so a
-- statement the client gave up on (its socket timed out) does not run on holding its locks.
-- A transaction left open by a client that went silent (a partition sends no FIN, so the
-- server sees an idle session, not a dead one) ends after :idle_ms idle: pgdrain's own
-- transactions (the janitor's, a controlled claim's) send their statements back to back, and
-- a transactional handler's transaction raises its own bound (transaction_bounds), so no
-- session of pgdrain's holds a lock much longer than its invocation could. JIT off: every
-- statement of pgdrain reads a few index entries, and a JIT compile (triggered by a cost
-- estimate, whatever the DBA set) costs hundreds of milliseconds under the claim's locks.
-- Session-level; the next invocation sets its own. One round trip, which also tells whether
-- a reused connection is still alive.
SELECT set_config('statement_timeout', :statement_ms::int::text, false) AS statement_timeout,
       set_config('lock_timeout', :lock_ms::int::text, false) AS lock_timeout,
       set_config('idle_in_transaction_session_timeout', :idle_ms::int::text, false)
           AS idle_in_transaction_session_timeout,
       set_config('jit', 'off', false) AS jit,
       -- PostgreSQL 14 and later also notice within a second that the client gave up (its
       -- socket timed out and it closed the connection), and cancel what it was waiting for.
       CASE WHEN current_setting('server_version_num')::int >= 140000
            THEN set_config('client_connection_check_interval', '1000', false)
       END AS client_connection_check_interval

-- name: connection_database
-- The database a connection is on (pgdrain.testing finds where a test's pg8000 connection
-- goes, to open the drain's own there).
SELECT current_database() AS database

-- name: connection_ping
-- A cheap round trip that tells whether a reused connection is still alive.
SELECT 1 AS alive

-- name: doorbell_drain_started
-- A drain is about to try for a slot: every ring written before now is answered (0). Written
-- before the try, so that a drain that finds every slot taken answers too: the drains holding
-- them then are still to make their last look, which will see the ringer's job. setval() is
-- not transactional and waits on no row lock (migration 0014): no session's open transaction
-- can hold a drain's start.
SELECT setval('pgdrain_doorbell_ring', 0) AS answered

-- name: doorbell_rung
-- A ring is about to invoke the drain: its time, in epoch milliseconds of the database's
-- clock, stays until a drain answers it. Not transactional and waits on no row lock, so a
-- rollback of the ringer's transaction keeps it and no other session can hold it up.
SELECT setval('pgdrain_doorbell_ring',
              (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS rung_ms

-- name: doorbell_state
-- What a ringer needs after its commit: how many drains hold a slot (each looks for due work
-- once more after giving its slot back), and whether a ring younger than :window_seconds is
-- still on its way (written, and no drain has tried for a slot since: the value is not 0).
-- clock_timestamp(), the clock of the ring's own stamp (now() is when the transaction began).
-- A ring "from the future" (the clock stepped back) is not counted: ringing is always safe.
SELECT (SELECT count(*)::int
        FROM pg_locks
        WHERE locktype = 'advisory'
          AND classid = :lock_key::int::oid
          AND objsubid = 2
          AND granted
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
           AS drains,
       (r.last_value > 0
        AND r.age_ms >= 0
        AND r.age_ms < :window_seconds::float8 * 1000) AS ring_on_its_way
FROM (SELECT last_value,
             (extract(epoch FROM clock_timestamp()) * 1000)::bigint - last_value AS age_ms
      FROM pgdrain_doorbell_ring) AS r

-- name: drain_slot_give_back
-- Give the slot back, and with it the idle bound drain_slot_take set (a warm connection may
-- idle between invocations).
SELECT pg_advisory_unlock(:lock_key::int, :slot::int) AS released,
       CASE WHEN current_setting('server_version_num')::int >= 140000
            THEN set_config('idle_session_timeout', '0', false)
       END AS idle_session_timeout

-- name: drain_slot_reserve
-- Reserve room for up to :wanted drains about to be launched (pgdrain.fanout): within :slots
-- minus the slots taken now minus the launches still on their way (reservations younger than
-- their lapse); each new reservation lapses :seconds from now. Returns how many were
-- reserved: the launches to make. The row lock (FOR UPDATE, then the update of the same row)
-- makes every reservation and every drain's start (drain_slot_take) see the others' writes;
-- it is held for this statement only.
WITH ledger AS (
    SELECT ARRAY(SELECT u FROM unnest(l.launched) AS u
                 WHERE u > clock_timestamp() ORDER BY u) AS on_its_way
    FROM pgdrain_drain_launches AS l
    FOR UPDATE
), taken AS (
    SELECT count(*)::int AS n
    FROM pg_locks
    WHERE locktype = 'advisory'
      AND classid = :lock_key::int::oid
      AND objsubid = 2
      AND granted
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
), grant_ AS (
    SELECT greatest(0, least(:wanted::int,
                             :slots::int - taken.n - cardinality(ledger.on_its_way)))
               AS reserved,
           ledger.on_its_way
    FROM ledger, taken
), written AS (
    UPDATE pgdrain_drain_launches
    SET launched = g.on_its_way
                   || array_fill(clock_timestamp() + make_interval(secs => :seconds::float8),
                                 ARRAY[g.reserved])
    FROM grant_ AS g
    WHERE g.reserved > 0
    RETURNING 1
)
SELECT reserved FROM grant_

-- name: drain_slot_take
-- A running drain holds one of :slots session-level advisory locks (key :lock_key, slot):
-- the first free one, or none (all taken: the drain returns at once). The set is scanned
-- row by row and stops at the first lock it gets. A lock dies with its session, so a drain
-- that crashed frees its slot when its connection closes. One cut off by a partition sends no
-- FIN, and its server session would sit idle holding the slot for hours (until TCP keepalives
-- give up): while it holds one, the session ends after :idle_ms idle (PostgreSQL 14+), the time
-- its invocation had, so no drain holds a slot longer than its invocation could.
-- A drain that tries for a slot has arrived, slot or not: it takes the oldest launch on its
-- way off the ledger (drain_slot_reserve), with the lapsed ones, after the try, so that a
-- reservation counting the room is never off the ledger before its slot is taken.
WITH s AS (
    SELECT t.slot,
           CASE WHEN current_setting('server_version_num')::int >= 140000
                THEN set_config('idle_session_timeout', :idle_ms::int::text, false)
           END AS idle_session_timeout
    FROM (SELECT slot
          FROM generate_series(0, :slots::int - 1) AS slot
          WHERE pg_try_advisory_lock(:lock_key::int, slot)
          LIMIT 1) AS t
), arrived AS (
    UPDATE pgdrain_drain_launches
    SET launched = ARRAY(SELECT u FROM unnest(launched) AS u
                         WHERE u > clock_timestamp() ORDER BY u OFFSET 1)
    WHERE (SELECT count(*) FROM s) >= 0
      AND launched <> '{}'
    RETURNING 1
)
SELECT slot, idle_session_timeout FROM s

-- name: drain_slot_unreserve
-- Launches that drain_slot_reserve made room for and that did not happen (the invoke failed):
-- take the :count newest reservations off the ledger, with the lapsed ones.
UPDATE pgdrain_drain_launches
SET launched = ARRAY(SELECT u FROM (SELECT u FROM unnest(launched) AS u
                                    WHERE u > clock_timestamp()
                                    ORDER BY u DESC OFFSET :count::int) AS kept
                     ORDER BY u)
RETURNING cardinality(launched) AS on_its_way

-- name: drain_slots_held
-- The drain slots taken now, with the session holding each (for `pgdrain top`): pg_locks
-- names the backend, pg_stat_activity how long it has been connected and what it is doing
-- (the state is hidden from roles that are not members of the holder's, and then NULL).
SELECT l.objid::int AS slot, l.pid,
       EXTRACT(EPOCH FROM now() - a.backend_start)::float8 AS connected_seconds,
       a.state, EXTRACT(EPOCH FROM now() - a.state_change)::float8 AS state_seconds,
       a.application_name
FROM pg_locks AS l
LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory'
  AND l.classid = :lock_key::int::oid
  AND l.objsubid = 2
  AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY l.objid

-- name: drain_slots_taken
-- How many drains hold a slot now, in this database (pg_locks is readable by every role).
SELECT count(*)::int AS taken
FROM pg_locks
WHERE locktype = 'advisory'
  AND classid = :lock_key::int::oid
  AND objsubid = 2
  AND granted
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())

-- name: flow_limited_due
-- Whether a job of these queues or job types is due: a drain whose claims found nothing but
-- rate-limited work waits for the window (or stops) instead of claiming in a loop. Two
-- probes, of jobs_pending_queue_idx and jobs_pending_type_idx: each ordered by its index, so
-- that no plan reads the table from its start to the first such job (an EXISTS over the OR
-- was planned as a sequential scan, the whole table when none is due).
SELECT (SELECT id FROM jobs
        WHERE status = 'pending' AND queue = ANY (:queues::text[]) AND run_at <= now()
          AND (:only_queues::text[] IS NULL OR queue = ANY (:only_queues::text[]))
        ORDER BY queue, priority, run_at, id
        LIMIT 1) IS NOT NULL
       OR (SELECT id FROM jobs
           WHERE status = 'pending' AND job_type = ANY (:job_types::text[]) AND run_at <= now()
             AND (:only_queues::text[] IS NULL OR queue = ANY (:only_queues::text[]))
           ORDER BY job_type, priority, run_at, id
           LIMIT 1) IS NOT NULL AS due

-- name: flow_lock
-- Lock the rows of the queues under a cap or a rate limit, and of the rate-limited job types
-- :job_types, until this transaction ends, skipping any row another transaction holds: that
-- queue or type is being claimed by another drain right now (or its session is stuck: a
-- partitioned drain's idle transaction ends at idle_in_transaction_session_timeout), and this
-- claim leaves it alone instead of waiting, so one stuck queue never stops the others. Never
-- waits, so never deadlocks. See job_claim_candidates.
SELECT 'queue' AS scope, q.queue AS name
FROM (SELECT queue FROM pgdrain_queues
      WHERE (max_running IS NOT NULL OR rate_limit IS NOT NULL) AND paused_at IS NULL
      ORDER BY queue
      FOR UPDATE SKIP LOCKED) AS q
UNION ALL
SELECT 'type', t.job_type
FROM (SELECT job_type FROM pgdrain_type_rates
      WHERE job_type = ANY (:job_types::text[])
      ORDER BY job_type
      FOR UPDATE SKIP LOCKED) AS t

-- name: flow_rooms
-- What limits the next start, read after the locks (this statement's snapshot sees every
-- claim committed before them): each controlled queue's cap, running jobs (claimed but not
-- started included) and rate window; each locked type's rate window; and the clock, taken
-- after the locks, so that windows are written in the order their locks were held; and
-- whether pending jobs name tenants. :queues NULL: every capped or rate-limited queue not
-- paused (the due count reads them unlocked).
SELECT 'queue' AS scope, q.queue AS name, q.max_running,
       CASE WHEN q.max_running IS NULL THEN NULL ELSE
           (SELECT count(*) FROM jobs AS r WHERE r.status = 'running' AND r.queue = q.queue)
       END::int AS running,
       q.rate_limit, q.rate_period, q.rate_starts,
       EXTRACT(EPOCH FROM clock_timestamp())::float8 AS now,
       -- As jobs_tenanted: whether pending jobs name tenants (job_claim_candidates' :fair).
       (SELECT j.tenant FROM jobs AS j WHERE j.status = 'pending' AND j.tenant IS NOT NULL
        ORDER BY j.tenant LIMIT 1) IS NOT NULL AS tenants
FROM pgdrain_queues AS q
WHERE CASE WHEN :queues::text[] IS NULL
           THEN (q.max_running IS NOT NULL OR q.rate_limit IS NOT NULL) AND q.paused_at IS NULL
           ELSE q.queue = ANY (:queues::text[]) END
UNION ALL
SELECT 'type', t.job_type, NULL, NULL, t.rate_limit, t.rate_period, t.rate_starts,
       EXTRACT(EPOCH FROM clock_timestamp())::float8,
       (SELECT j.tenant FROM jobs AS j WHERE j.status = 'pending' AND j.tenant IS NOT NULL
        ORDER BY j.tenant LIMIT 1) IS NOT NULL
FROM pgdrain_type_rates AS t
WHERE t.job_type = ANY (:job_types::text[])

-- name: flow_starts_write
-- Write the rate windows a controlled claim moved (under its rows' locks), queues' and job
-- types' in one statement: each window is an array literal of [epoch, jobs started] pairs.
WITH queues AS (
    UPDATE pgdrain_queues AS q SET rate_starts = w.starts::float8[]
    FROM unnest(:queues::text[], :queue_starts::text[]) AS w(queue, starts)
    WHERE q.queue = w.queue
    RETURNING 1
), types AS (
    UPDATE pgdrain_type_rates AS t SET rate_starts = w.starts::float8[]
    FROM unnest(:job_types::text[], :type_starts::text[]) AS w(job_type, starts)
    WHERE t.job_type = w.job_type
    RETURNING 1
)
SELECT (SELECT count(*) FROM queues) + (SELECT count(*) FROM types) AS written

-- name: flow_type_rates_declare
-- Record the job types' rate limits as this drain's code declares them (@pgdrain.job(...,
-- rate=)), keeping their windows; a row already as declared is not written, nor locked: it is
-- left out by a plain read first, for ON CONFLICT DO UPDATE locks the row it finds even when
-- its WHERE then writes nothing, and so waited (up to the lock timeout) on a claim holding
-- the type's row (flow_lock), a partitioned drain's for as long as its idle transaction.
INSERT INTO pgdrain_type_rates AS t (job_type, rate_limit, rate_period)
SELECT d.job_type, d.rate_limit, d.rate_period
FROM unnest(:job_types::text[], :limits::int[], :periods::float8[])
     AS d(job_type, rate_limit, rate_period)
WHERE NOT EXISTS (SELECT FROM pgdrain_type_rates AS e
                  WHERE e.job_type = d.job_type
                    AND (e.rate_limit, e.rate_period) = (d.rate_limit, d.rate_period))
ORDER BY 1
ON CONFLICT (job_type) DO UPDATE
SET rate_limit = EXCLUDED.rate_limit, rate_period = EXCLUDED.rate_period, updated_at = now()
WHERE (t.rate_limit, t.rate_period) IS DISTINCT FROM (EXCLUDED.rate_limit, EXCLUDED.rate_period)

-- name: grants_needed
-- The privileges a role needs to run the functions (docs/database-roles.md, `pgdrain
-- grants`): for both functions on one role ('app'), or one function's ('enqueue', 'drain').
-- The one list every document and test takes them from; the role name is quoted here (%I),
-- so any name is safe to paste. The statements run as the tables' owner (the migrator). With
-- PGDRAIN_SCHEMA (:in_schema), the schema's USAGE first: without it no table in it is reached.
SELECT format('GRANT %s ON %s TO %I;', g.privileges, g.objects, :role::text) AS statement
FROM (VALUES
    (0, 'app', 'USAGE', 'SCHEMA ' || quote_ident(current_schema())),
    (0, 'enqueue', 'USAGE', 'SCHEMA ' || quote_ident(current_schema())),
    (0, 'drain', 'USAGE', 'SCHEMA ' || quote_ident(current_schema())),
    (1, 'app', 'SELECT, INSERT, UPDATE, DELETE', 'jobs'),
    (2, 'app', 'SELECT, UPDATE', 'SEQUENCE pgdrain_doorbell_ring'),
    (3, 'app', 'SELECT, INSERT, UPDATE', 'pgdrain_queues, pgdrain_type_rates'),
    (4, 'app', 'SELECT, INSERT', 'pgdrain_hooked_types'),
    (5, 'app', 'SELECT, UPDATE', 'pgdrain_drain_launches'),
    (6, 'app', 'SELECT, INSERT, UPDATE, DELETE',
     'pgdrain_done_counts, pgdrain_schedule_declarations, job_edges, pgdrain_signals, '
     'pgdrain_schedules'),
    (7, 'app', 'SELECT, INSERT, DELETE', 'pgdrain_waiters'),
    (1, 'enqueue', 'SELECT, INSERT, UPDATE', 'jobs'),
    (2, 'enqueue', 'SELECT, UPDATE', 'SEQUENCE pgdrain_doorbell_ring'),
    (3, 'enqueue', 'SELECT, INSERT, UPDATE', 'pgdrain_queues'),
    (4, 'enqueue', 'SELECT, INSERT, UPDATE', 'job_edges, pgdrain_signals'),
    (5, 'enqueue', 'SELECT, INSERT, UPDATE, DELETE', 'pgdrain_schedules'),
    (6, 'enqueue', 'SELECT', 'pgdrain_schedule_declarations'),
    (7, 'enqueue', 'SELECT, INSERT, DELETE', 'pgdrain_waiters'),
    (1, 'drain', 'SELECT, UPDATE, DELETE', 'jobs'),
    (2, 'drain', 'UPDATE', 'SEQUENCE pgdrain_doorbell_ring'),
    (3, 'drain', 'SELECT, UPDATE', 'pgdrain_queues'),
    (4, 'drain', 'SELECT, INSERT, UPDATE', 'pgdrain_schedules, pgdrain_type_rates'),
    (5, 'drain', 'SELECT, INSERT', 'pgdrain_hooked_types'),
    (6, 'drain', 'SELECT, UPDATE', 'pgdrain_drain_launches'),
    (7, 'drain', 'SELECT, INSERT, UPDATE, DELETE',
     'pgdrain_done_counts, pgdrain_schedule_declarations'),
    (8, 'drain', 'SELECT, UPDATE, DELETE', 'job_edges'),
    (9, 'drain', 'SELECT, INSERT, UPDATE, DELETE', 'pgdrain_signals'),
    (10, 'drain', 'SELECT, DELETE', 'pgdrain_waiters')
) AS g(position, part, privileges, objects)
WHERE g.part = :part AND (g.position > 0 OR :in_schema::boolean)
ORDER BY g.position

-- name: hooks_declare
-- Record the job types this drain's code gives an on_failed hook (@pgdrain.job(...,
-- on_failed=)), so that every process that fails one of their jobs, the CLI's janitor too,
-- enqueues its hook (job_finish_batch and janitor_expire_batch read the table); a row already
-- there is not written. Run once per cold start, and only when some type has a hook.
INSERT INTO pgdrain_hooked_types (job_type)
SELECT * FROM unnest(:job_types::text[])
ORDER BY 1
ON CONFLICT (job_type) DO NOTHING

-- name: janitor_cancel_requested_batch
-- End up to :limit pending jobs asked to stop (cancel_requested_at, job_cancel) cancelled: no
-- claim takes them (job_due), and only plain SQL makes such a job pending again (a requeue
-- that did not clear the request), so without this they stayed pending, neither due nor
-- scheduled, for ever. Through jobs_cancel_pending_idx, empty otherwise: an empty probe.
UPDATE jobs AS j
SET status = 'cancelled', finished_at = now(), updated_at = now()
WHERE j.id = ANY(ARRAY(
    SELECT id
    FROM jobs
    WHERE status = 'pending' AND cancel_requested_at IS NOT NULL
    ORDER BY id
    LIMIT :limit::int
    FOR UPDATE SKIP LOCKED
))
RETURNING j.id, j.job_type, j.queue

-- name: janitor_expire_batch
-- End up to :limit pending jobs whose expires_at has passed (due or not): failed, with the
-- error `expired` in last_error and errors, never started. Through jobs_expiring_idx, so a
-- queue without expiring jobs costs an empty index probe. Returns what ended, for the logs
-- and the dead-letter hooks (hooked: a drain declared a hook for its type, hooks_declare).
UPDATE jobs AS j
SET status      = 'failed',
    finished_at = now(),
    last_error  = 'expired',
    errors      = j.errors || jsonb_build_array(jsonb_build_object(
                      'attempt', j.attempts, 'at', now(), 'error', 'expired')),
    updated_at  = now()
WHERE j.id = ANY(ARRAY(
    SELECT id
    FROM jobs
    WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= now()
    ORDER BY expires_at
    LIMIT :limit::int
    FOR UPDATE SKIP LOCKED
))
RETURNING j.id, j.job_type, j.queue,
          EXISTS (SELECT FROM pgdrain_hooked_types AS h WHERE h.job_type = j.job_type) AS hooked

-- name: janitor_select_expired
-- Running jobs whose lease ran out, oldest first, locked so that two janitors never decide
-- about the same row; `started` says whether the claim recorded the job's start.
SELECT id, job_type, lease_token::text AS lease_token, attempts, max_attempts, lost_claims,
       started_at IS NOT NULL AS started
FROM jobs
WHERE status = 'running' AND lease_expires_at < now()
ORDER BY lease_expires_at
LIMIT :limit::int
FOR UPDATE SKIP LOCKED

-- name: janitor_signals_batch
-- Up to :limit jobs waiting for a signal whose timeout (run_at) has passed: due now, with no
-- payload (wait_result says the wait timed out), for their handlers to decide; a signal sent
-- at the same moment locks the row first or finds it pending, so each wait ends once. And
-- up to :limit signals past their expires_at deleted: sent ones kept for their retention,
-- and rows of waits whose timeouts have all passed, once no job waits for them (a job waits
-- only while its signal has a row: janitor_try_lock's `signals` runs this only then). One
-- statement, two probes (jobs_signal_timeout_idx, pgdrain_signals_expires_idx). Returns
-- how many of each.
WITH timed_out AS (
    UPDATE jobs AS j
    SET status      = 'pending',
        wait_signal = NULL,
        wait_result = jsonb_build_object('name', j.wait_signal, 'payload', NULL,
                                         'received', false, 'at', now()),
        updated_at  = now()
    WHERE j.id = ANY(ARRAY(
        SELECT id
        FROM jobs
        WHERE status = 'waiting' AND wait_signal IS NOT NULL AND run_at <= now()
        ORDER BY run_at
        LIMIT :limit::int
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING j.id
), purged AS (
    DELETE FROM pgdrain_signals
    WHERE name = ANY(ARRAY(
        SELECT name
        FROM pgdrain_signals
        WHERE expires_at <= now()
          AND NOT EXISTS (SELECT FROM jobs AS j
                          WHERE j.status = 'waiting' AND j.wait_signal = pgdrain_signals.name)
        ORDER BY expires_at
        LIMIT :limit::int
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING 1
)
SELECT (SELECT count(*) FROM timed_out)::int AS timed_out,
       (SELECT count(*) FROM purged)::int AS purged

-- name: janitor_try_lock
-- Take the janitor's transaction-scoped advisory lock without waiting; false means another
-- drain is running the janitor right now, and this one skips it. Also says whether a job to
-- claim alone is due (an index probe of jobs_alone_idx), so the drain knows at no extra cost,
-- whether some queue has a concurrency cap or a rate limit (the drain then also runs the
-- controlled claim), whether some queue is paused, capped or rate-limited (the drain then
-- claims queue by queue: job_claim_batch_by_queue) and whether pending jobs name tenants (the
-- drain then claims fairly), and whether any signal is sent or awaited (the janitor then
-- times waits out and forgets expired signals: janitor_signals_batch), whether anyone waits
-- for a job (the janitor then forgets dead waiters: waiters_forget_dead), and whether a stored
-- schedule entry's tick has come (one probe of pgdrain_schedules_next_tick_idx: the drain then
-- reads them, schedule_stored_due; none stored, no statement).
-- The probes of jobs are ordered by their index: an EXISTS was planned as a sequential scan
-- that stops at the first match, which reads the whole history when it lies ahead of it.
SELECT pg_try_advisory_xact_lock(:lock_key::bigint) AS locked,
       (SELECT id FROM jobs
        WHERE status = 'pending' AND lost_claims > 0 AND run_at <= now()
        ORDER BY priority, run_at, id LIMIT 1) IS NOT NULL AS alone_due,
       EXISTS (SELECT 1 FROM pgdrain_queues
               WHERE max_running IS NOT NULL OR rate_limit IS NOT NULL) AS controlled,
       EXISTS (SELECT 1 FROM pgdrain_queues
               WHERE paused_at IS NOT NULL OR max_running IS NOT NULL
                  OR rate_limit IS NOT NULL) AS queues_set,
       (SELECT tenant FROM jobs WHERE status = 'pending' AND tenant IS NOT NULL
        ORDER BY tenant LIMIT 1) IS NOT NULL AS tenants,
       EXISTS (SELECT 1 FROM pgdrain_signals) AS signals,
       EXISTS (SELECT 1 FROM pgdrain_waiters) AS waiters,
       COALESCE((SELECT next_tick FROM pgdrain_schedules WHERE next_tick IS NOT NULL
                 ORDER BY next_tick LIMIT 1) <= now(), false) AS schedules_due

-- name: job_backlog
-- Due pending jobs (counted up to :cap) and the seconds the oldest has waited, read through
-- the claim's index only, whatever the size of the finished history: the distinct priorities
-- of pending jobs are found by skipping through the index, then each priority's first
-- run_at and its due jobs are one index range each. What the drain's metrics need, at a
-- bounded cost per invocation; also how many queues are paused (their jobs are counted: a
-- paused queue's backlog is still a backlog).
WITH RECURSIVE priorities AS (
    (SELECT priority FROM jobs WHERE status = 'pending' ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM jobs AS j
            WHERE j.status = 'pending' AND j.priority > p.priority
            ORDER BY j.priority LIMIT 1)
    FROM priorities AS p
    WHERE p.priority IS NOT NULL
), per_priority AS (
    -- The priorities through an array: the planner counts 10 (the recursive CTE's 101
    -- made each costed read of up to :cap jobs a hundredfold, past jit_above_cost).
    SELECT first.run_at AS first_run_at, due.n
    FROM unnest(ARRAY(SELECT priority FROM priorities WHERE priority IS NOT NULL))
         AS p(priority)
    CROSS JOIN LATERAL (
        SELECT j.run_at FROM jobs AS j
        WHERE {{job_due(j)}} AND j.priority = p.priority
        ORDER BY j.run_at LIMIT 1) AS first
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM (
            -- Ordered by the index: unordered, the planner read the table from its
            -- start (a sequential scan it expected to find :cap due jobs in early). Due
            -- as every claim and count reads it (job_due).
            SELECT 1 FROM jobs AS j
            WHERE {{job_due(j)}} AND j.priority = p.priority
            ORDER BY j.run_at
            LIMIT :cap::int) AS d) AS due
)
-- A run_at of -infinity (plain SQL allows it) counts from year 1: the age stays a number.
SELECT least(COALESCE(sum(n), 0), :cap::int)::bigint AS due,
       COALESCE(EXTRACT(EPOCH FROM now() - CASE
           WHEN min(first_run_at) = '-infinity' THEN timestamptz '0001-01-01 00:00:00+00'
           ELSE min(first_run_at) FILTER (WHERE first_run_at <= now()) END), 0)::float8
           AS oldest_due_seconds,
       (SELECT count(*) FROM pgdrain_queues WHERE paused_at IS NOT NULL)::int AS queues_paused
FROM per_priority

-- name: job_backlog_by_queue
-- The backlog queue by queue, for the drain's metrics: each queue's due jobs (counted up to
-- :cap), how long its oldest due job has waited, and whether it is paused (its jobs wait on
-- purpose: the alarms leave them out), as one JSON document with how many queues are paused.
-- Read through jobs_pending_queue_idx only, as job_backlog reads through the claim's index:
-- the (queue, priority) pairs of pending jobs are found by skipping through the index (at most
-- :most_pairs of them, in name order), then each pair's first due run_at and its due jobs are
-- one index range each. A bounded read whatever the history's or a delayed backlog's size.
WITH RECURSIVE pairs AS (
    (SELECT j.queue, j.priority, 1 AS n FROM jobs AS j WHERE j.status = 'pending'
     ORDER BY j.queue, j.priority LIMIT 1)
    UNION ALL
    SELECT next.queue, next.priority, p.n + 1
    FROM pairs AS p
    CROSS JOIN LATERAL (
        SELECT j.queue, j.priority FROM jobs AS j
        WHERE j.status = 'pending' AND (j.queue, j.priority) > (p.queue, p.priority)
        ORDER BY j.queue, j.priority LIMIT 1) AS next
    WHERE p.n < :most_pairs::int
), per_pair AS (
    SELECT p.queue, first.run_at AS first_run_at, due.n
    FROM pairs AS p
    CROSS JOIN LATERAL (
        SELECT j.run_at FROM jobs AS j
        WHERE {{job_due(j)}} AND j.queue = p.queue AND j.priority = p.priority
        ORDER BY j.run_at LIMIT 1) AS first
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM jobs AS j
            WHERE {{job_due(j)}} AND j.queue = p.queue AND j.priority = p.priority
            ORDER BY j.run_at
            LIMIT :cap::int) AS d) AS due
), per_queue AS (
    -- A run_at of -infinity (plain SQL allows it) counts from year 1: the age stays a number.
    SELECT q.queue, least(sum(q.n), :cap::int)::bigint AS due,
           EXTRACT(EPOCH FROM now() - CASE
               WHEN min(q.first_run_at) = '-infinity' THEN timestamptz '0001-01-01 00:00:00+00'
               ELSE min(q.first_run_at) END)::float8 AS oldest_due_seconds,
           EXISTS (SELECT FROM pgdrain_queues AS c
                   WHERE c.queue = q.queue AND c.paused_at IS NOT NULL) AS paused
    FROM per_pair AS q
    GROUP BY q.queue
)
SELECT (SELECT count(*) FROM pgdrain_queues WHERE paused_at IS NOT NULL)::int AS queues_paused,
       COALESCE((SELECT json_agg(json_build_object(
                     'queue', queue, 'due', due, 'oldest_due_seconds', oldest_due_seconds,
                     'paused', paused) ORDER BY oldest_due_seconds DESC, queue)
                 FROM per_queue), '[]') AS queues

-- name: job_batch_due
-- How many due jobs of the batch types (:job_types, each with its :batch_sizes and
-- :batch_windows, as job_claim_batch_of_type) a claim would take now: a type's first batch
-- (job_batch_head) counts once it is full or its oldest job's window has closed. The due
-- count's part for batch types, which the plain count leaves out (:limited_types); read
-- without a lock, at most a batch a type.
SELECT coalesce(sum(w.n) FILTER (
           WHERE w.n >= b.take
              OR w.oldest <= now() - make_interval(secs => b.batch_window)), 0)::int AS due
FROM unnest(:job_types::text[], :batch_sizes::int[], :batch_windows::float8[])
     AS b(job_type, take, batch_window)
CROSS JOIN LATERAL (
    SELECT count(*) AS n, min(h.due_since) AS oldest
    FROM ({{job_batch_head(b)}}) AS h
) AS w

-- name: job_cancel
-- Cancel jobs by id, one statement: a pending one (due or not) or one waiting for its
-- parents becomes cancelled and never runs (its own waiting children follow: see migration
-- 0025); a running one is asked to stop (cancel_requested_at: its attempt then ends cancelled
-- instead of retried); a finished one stays as it is. The rows are locked in id order, so two
-- cancels never deadlock; a claim holding a row makes this wait for its commit, then see the
-- job running. Returns each existing id with what happened: cancelled, cancel_requested, or
-- already_done / already_failed / already_cancelled. With :statuses (a bulk cancel by filter:
-- what it counted) only jobs in one of them are touched; another's outcome is its status.
-- Waiters of these jobs are notified (waiters_woken; the count only makes the statement read
-- it).
WITH {{waiters_woken}}, target AS (
    SELECT id, status,
           (:statuses::text[] IS NULL OR status = ANY (:statuses::text[])) AS wanted
    FROM jobs
    WHERE id = ANY(:ids::bigint[])
    ORDER BY id
    FOR UPDATE
), cancelled AS (
    UPDATE jobs AS j
    SET status = 'cancelled', finished_at = now(), updated_at = now()
    FROM target AS t
    WHERE j.id = t.id AND t.status IN ('pending', 'waiting') AND t.wanted
    RETURNING j.id
), requested AS (
    UPDATE jobs AS j
    SET cancel_requested_at = coalesce(j.cancel_requested_at, now()), updated_at = now()
    FROM target AS t
    WHERE j.id = t.id AND t.status = 'running' AND t.wanted
    RETURNING j.id
)
SELECT t.id,
       CASE WHEN c.id IS NOT NULL THEN 'cancelled'
            WHEN r.id IS NOT NULL THEN 'cancel_requested'
            WHEN NOT t.wanted THEN t.status
            ELSE 'already_' || t.status END AS outcome
FROM target AS t
LEFT JOIN cancelled AS c ON c.id = t.id
LEFT JOIN requested AS r ON r.id = t.id
WHERE (SELECT count(*) FROM woken) >= 0
ORDER BY t.id

-- name: job_checkpoint_batch
-- Save the checkpoints resumable jobs' handlers asked for (job.checkpoint), each guarded by
-- its claim: a run whose job was reclaimed, cancelled or finished elsewhere saves nothing.
-- Returns the ids saved; the handlers of the others get CheckpointNotSaved.
UPDATE jobs AS j
SET state = c.state::jsonb, updated_at = now()
FROM unnest(:ids::bigint[], :tokens::uuid[], :states::text[]) AS c(id, lease_token, state)
WHERE j.id = c.id AND j.status = 'running' AND j.lease_token = c.lease_token
RETURNING j.id

-- name: job_claim_alone
-- Claim one claimable job (job_claimable) whose claim was lost before without a record of its
-- start (lost_claims > 0), alone, recording its start (job_claim_set): if its drain dies
-- again, even while decoding it, the janitor knows it was that job and charges it, and no
-- other job shares its claim. Such jobs are rare (jobs_alone_idx is empty otherwise); a drain
-- claims them first when there are any.
WITH alone AS MATERIALIZED (
    SELECT id
    FROM jobs
    WHERE {{job_claimable(jobs)}}
      AND jobs.lost_claims > 0
    ORDER BY priority, run_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs AS j
SET {{job_claim_set(j)}}
WHERE j.id = ANY (ARRAY(SELECT id FROM alone))
RETURNING {{job_claim_returning(j)}}

-- name: job_claim_batch
-- Claim up to :batch_size claimable jobs (job_claimable) in one statement: lock them with SKIP
-- LOCKED, flip them to running, spend an attempt and stamp the lease (job_claim_set). The
-- MATERIALIZED CTE runs the locking SELECT exactly once; `WHERE id IN (SELECT ... LIMIT n FOR
-- UPDATE SKIP LOCKED)` may be re-evaluated by the planner and claim more than n rows.
-- UPDATE ... RETURNING has no order: the batch comes back in claim order, as one JSON
-- document (job_claim_document). A job whose claim was lost before is left to
-- job_claim_alone, and one naming a tenant to job_claim_fair. The first claimable jobs off jobs_pending_idx: the claim while no queue is
-- paused, capped or rate-limited. Beside such a queue it is still right (job_queue_plain
-- leaves its jobs out) but reads every one of them ahead of the first open job, on each claim
-- (4 times slower behind a paused 100,000): the drain claims with job_claim_batch_by_queue
-- while the janitor saw a queue so set. Two statements, not one with both branches: planned
-- together they cost 3-8 ms to plan on every claim (a custom plan each time, for :queues and
-- :limited_types), a third of a no-op drain's throughput (docs/benchmarks.md).
WITH due AS MATERIALIZED (
    SELECT id
    FROM jobs
    WHERE {{job_claimable(jobs)}}
      AND jobs.lost_claims = 0
      AND jobs.tenant IS NULL
    ORDER BY priority, run_at, id
    LIMIT :batch_size::int
    FOR UPDATE SKIP LOCKED
), {{job_claim_due}}
{{job_claim_document}}

-- name: job_claim_batch_by_queue
-- job_claim_batch read queue by queue, for a drain beside a paused, capped or rate-limited
-- queue: each other queue with pending jobs (open_queues: found by skipping through
-- jobs_pending_queue_idx, one probe a queue) offers its first :batch_size claimable jobs,
-- locked, skipping what another claim holds, and the batch is the first of them in claim
-- order. A claim locks up to a batch in each open queue for its statement (read unlocked
-- first, then locked, the plan cost twice as much and passed jit_above_cost). Right with no
-- queue so set too (every queue is then open), only slower than job_claim_batch.
WITH RECURSIVE
{{queues_open}}, due AS MATERIALIZED (
    SELECT d.id, d.priority, d.run_at
    FROM open_queues AS g
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT id, priority, run_at
            FROM jobs
            WHERE {{job_claimable(jobs)}}
              AND jobs.lost_claims = 0
              AND jobs.tenant IS NULL
              AND jobs.queue = g.queue
              -- A bound of jobs_pending_queue_idx only, as job_claim_controlled's.
              AND (jobs.queue, jobs.priority) >= (g.queue, -32768)
            ORDER BY priority, run_at, id
            -- A constant window, so that the planner costs what is read (a LIMIT it cannot
            -- read it costs at a tenth of the rows under it); rows are locked as the LIMIT
            -- above reads them.
            LIMIT 1000
            FOR UPDATE SKIP LOCKED) AS w
        LIMIT :batch_size::int) AS d
    ORDER BY d.priority, d.run_at, d.id
    LIMIT :batch_size::int
), {{job_claim_due}}
{{job_claim_document}}

-- name: job_claim_batch_of_type
-- Claim a batch handler's batches (pgdrain.batches): up to :take claimable jobs of :job_type
-- (job_batch_head; :take >= :batch_size: the drain makes calls of :batch_size of them): as
-- many full batches as there are, or every one once the oldest has been due :batch_window
-- seconds, by the database's clock; else nothing is locked or claimed, so
-- a batch that waits to fill holds no claim open. Returns one row: the claimed jobs as
-- job_claim_document's JSON (NULL: none), and closes_in, the seconds until the oldest due
-- job's window closes (<= 0: closed; NULL: none is due), which the drain waits for when it
-- has nothing else to do and the time.
WITH head AS MATERIALIZED (
    SELECT h.id, h.due_since
    FROM (VALUES (:job_type::text, :take::int)) AS b(job_type, take)
    CROSS JOIN LATERAL ({{job_batch_head(b)}}) AS h
), fill AS (
    SELECT count(*) AS n, min(due_since) AS oldest FROM head
), due AS MATERIALIZED (
    SELECT jobs.id
    FROM jobs
    WHERE jobs.id = ANY (ARRAY(SELECT id FROM head))
      AND {{job_due(jobs)}}
    ORDER BY jobs.priority, jobs.run_at, jobs.id
    -- Every job once the window has closed; else only full batches (none while filling).
    LIMIT (SELECT CASE WHEN f.oldest <= now() - make_interval(secs => :batch_window::float8)
                       THEN :take::int
                       ELSE f.n / :batch_size::int * :batch_size::int END
           FROM fill AS f)
    FOR UPDATE SKIP LOCKED
), {{job_claim_due}}
SELECT ({{job_claim_document}}) AS jobs,
       (SELECT extract(epoch FROM f.oldest + make_interval(secs => :batch_window::float8)
                                  - now())::float8
        FROM fill AS f) AS closes_in

-- name: job_claim_candidates
-- The due jobs a controlled claim may start: up to each capped or rate-limited queue's room
-- (:room_queues, :queue_rooms), and up to each rate-limited type's room among the other queues
-- (:room_types, :type_rooms), each at most :batch_size, in claim order. Read, not locked: only
-- a controlled claim takes these jobs, and only while it holds their queue's row (a type's, for
-- a rated type's jobs; flow_lock), so no other claim competes for them, and job_claim_ids
-- claims only those still pending. Unlocked, it is also the due count's (controlled_due):
-- what a claim could take now, with no row lock written. Run after flow_lock and flow_rooms;
-- the caller picks (flow.choose) and claims the picked ones with job_claim_ids. Each job is
-- due (job_due: cancel-requested and expired jobs left out) and its ordering key's head
-- (job_ordering_head); a type's jobs in paused or controlled queues are left out
-- (job_queue_plain), and paused queues are never locked; a job whose claim was lost
-- before is taken here (job_claim_alone leaves controlled queues and types alone), its start
-- recorded, and the drain runs it alone. A queue's due jobs are one range of
-- jobs_pending_queue_idx, a type's of jobs_pending_type_idx (without them, every claim walked
-- the claim's index past every other job: 107 ms for a rated type behind 90,000 others), each
-- read through a window of at most 1,000 with a constant LIMIT: the room, which the planner
-- cannot read, it costs at a tenth of the rows under it, and a tenth of a whole queue's range
-- passed jit_above_cost (100,000; JIT-compiled on stock PostgreSQL: 500-580 ms a claim). A
-- type's jobs in a paused, capped or rate-limited queue are left out behind an initplan, as
-- in the plain claim: a NOT EXISTS per row became an anti-join that sorted all the type's
-- jobs. So a queue or type offers at most 1,000 jobs a claim (flow_queue_window,
-- flow_type_window). :fair (pending jobs name tenants; flow_rooms says): each window's jobs
-- are taken from each tenant in turn (jobs without a tenant are one more group), each
-- tenant's first before any tenant's second, and the window is read whole; else in claim
-- order, reading only what the room takes. One branch runs (the other's filter is constant).
WITH queue_room AS (
    SELECT * FROM unnest(:room_queues::text[], :queue_rooms::int[]) AS r(queue, room)
    WHERE r.room > 0
), type_room AS (
    SELECT * FROM unnest(:room_types::text[], :type_rooms::int[]) AS t(job_type, room)
    WHERE t.room > 0
)
SELECT c.id, c.queue, c.job_type, c.priority, c.run_at
FROM (
    SELECT d.*
    FROM queue_room AS r
    CROSS JOIN LATERAL (
        SELECT w.*, 1::bigint AS turn
        FROM ({{flow_queue_window(r)}}) AS w
        LIMIT least(r.room, :batch_size::int)
    ) AS d
    WHERE NOT :fair::boolean
    UNION ALL
    SELECT d.*
    FROM queue_room AS r
    CROSS JOIN LATERAL (
        SELECT w.*, row_number() OVER (PARTITION BY w.tenant
                                       ORDER BY w.priority, w.run_at, w.id) AS turn
        FROM ({{flow_queue_window(r)}}) AS w
        ORDER BY turn, w.priority, w.run_at, w.id
        LIMIT least(r.room, :batch_size::int)
    ) AS d
    WHERE :fair::boolean
    UNION ALL
    SELECT d.*
    FROM type_room AS t
    CROSS JOIN LATERAL (
        SELECT w.*, 1::bigint AS turn
        FROM ({{flow_type_window(t)}}) AS w
        LIMIT least(t.room, :batch_size::int)
    ) AS d
    WHERE NOT :fair::boolean
    UNION ALL
    SELECT d.*
    FROM type_room AS t
    CROSS JOIN LATERAL (
        SELECT w.*, row_number() OVER (PARTITION BY w.tenant
                                       ORDER BY w.priority, w.run_at, w.id) AS turn
        FROM ({{flow_type_window(t)}}) AS w
        ORDER BY turn, w.priority, w.run_at, w.id
        LIMIT least(t.room, :batch_size::int)
    ) AS d
    WHERE :fair::boolean
) AS c
ORDER BY c.turn, c.priority, c.run_at, c.id

-- name: job_claim_controlled
-- Claim up to :batch_size due jobs of capped or rate-limited queues (among :queues, if given)
-- within each queue's room, in one call: pgdrain_claim_controlled (migration 0018, through
-- pgdrain_claim_controlled_jobs, 0032, which adds the columns jobs gained since) locks the
-- queues' rows (skipping those another drain holds), reads their room after the locks, claims
-- what fits (from each tenant in turn while pending jobs name tenants) and appends the
-- starts to the rate windows. For a drain that declares no rate-limited job type (else the
-- claim is flow_lock, flow_rooms, job_claim_candidates, job_claim_ids, flow_starts_write).
-- Rows without an id: it claimed nothing, and these are the locked rate-limited queues'
-- windows (pgdrain.claiming tells from them when a rate frees).
SELECT *
FROM pgdrain_claim_controlled_jobs(
    :batch_size::int, :lease_seconds::float8, :queues::text[])

-- name: job_claim_fair
-- Claim up to :batch_size due jobs taking from each tenant in turn, while pending jobs name
-- tenants: each group's first jobs (a tenant's, or those of jobs without a tenant, one more
-- group) are ranked within the group, and the claim takes every group's first before any
-- group's second, so a tenant's flood never holds another's job back more than one claim.
-- The tenants are visited in the order of their names, starting after :after_tenant (the
-- last tenant the previous claim served; NULL: the first) and going round: a claim visits
-- at most :batch_size tenants with a job to take now, so with more tenants than a batch
-- every tenant is served within a lap of ceil(tenants / batch) claims, each claim reading
-- what it takes (visiting all 1,000 tenants on each claim of 100 cost 13 ms, 4 of 5 of the
-- claim). Returns, on every row, the last tenant it served in that order (fair_after): the
-- next claim's :after_tenant.
-- Each group offers at most its share of the batch, divided among the groups with a job this
-- claim may take now: a tenant whose jobs are all scheduled later, in paused, capped or
-- rate-limited queues, of rate-limited types, or behind their ordering keys takes no share
-- (1,000 tenants with only later jobs cut a due tenant's claims to one job each: 36 jobs/s
-- instead of 2,700 on PostgreSQL 15, docs/benchmarks.md).
-- The tenants with a due job are found by skipping through jobs_pending_tenant_idx (one probe
-- per such tenant; one whose jobs are all later is passed over inside the index), then
-- whether each has a job to take among its first 100 due ones, and its share among its first
-- 1,000 (a tenant whose first 100 due jobs all wait, say in a paused queue, waits with them;
-- without the window every claim read such a tenant's whole backlog). Otherwise as
-- job_claim_batch (the same jobs are left out). Jobs without a tenant are looked for among
-- the first 1,000 due jobs of jobs_pending_idx only: a bounded read whatever the flood (give
-- every job of a shared queue a tenant; an untenanted job behind 1,000 tenanted ones waits
-- for them to go).
-- Costed at about what it reads, so that stock PostgreSQL does not JIT-compile it (above
-- jit_above_cost, 100,000: 75-700 ms a claim instead of 3; test_claim_plans.py): the
-- windows are constant LIMITs (a LIMIT the planner cannot read, as the share, it costs at a
-- tenth of the rows under it: a tenth of a tenant's whole backlog), and the limited
-- types' filter is written behind an initplan, as the queues': a generic plan's guess for
-- `job_type <> ALL ($n)` (a few types, 10 unknown ones) kept a row in a thousand. Each
-- window's outer level has no ORDER BY of its own (the window's order is kept), so that the
-- planner plans the window for the few rows read from it: an index scan in claim order, not
-- a sort of the tenant's due jobs.
WITH RECURSIVE after_cursor AS (
    -- The tenants after :after_tenant, in order: each branch's bound is one of the index's
    -- (as `>= coalesce(...)` with the cursor's own tenant filtered out, each claim read the
    -- whole range of that tenant's jobs to pass it: 50 ms a claim among 10 tenants).
    SELECT CASE WHEN :after_tenant::text IS NULL
                THEN (SELECT tenant FROM jobs
                      WHERE status = 'pending' AND tenant IS NOT NULL AND run_at <= now()
                      ORDER BY tenant LIMIT 1)
                ELSE (SELECT tenant FROM jobs
                      WHERE status = 'pending' AND tenant > :after_tenant::text
                        AND run_at <= now()
                      ORDER BY tenant LIMIT 1)
           END AS tenant
    UNION ALL
    SELECT (SELECT j.tenant FROM jobs AS j
            WHERE j.status = 'pending' AND j.tenant IS NOT NULL AND j.tenant > t.tenant
              AND j.run_at <= now()
            ORDER BY j.tenant LIMIT 1)
    FROM after_cursor AS t
    WHERE t.tenant IS NOT NULL
), round_again AS (
    -- Then round again: the tenants up to :after_tenant, in order.
    (SELECT tenant FROM jobs
     WHERE status = 'pending' AND tenant IS NOT NULL AND run_at <= now()
       AND tenant <= :after_tenant::text
     ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT j.tenant FROM jobs AS j
            WHERE j.status = 'pending' AND j.tenant IS NOT NULL AND j.tenant > t.tenant
              AND j.tenant <= :after_tenant::text AND j.run_at <= now()
            ORDER BY j.tenant LIMIT 1)
    FROM round_again AS t
    WHERE t.tenant IS NOT NULL
), tenants AS (
    -- Read only as far as the groups below take (a recursive CTE is evaluated as its
    -- reader asks).
    SELECT tenant, 1 AS lap FROM after_cursor WHERE tenant IS NOT NULL
    UNION ALL
    SELECT tenant, 2 AS lap FROM round_again WHERE tenant IS NOT NULL
), claimable AS NOT MATERIALIZED (
    -- What the plain claim may take, written once: inlined into each reader below (NOT
    -- MATERIALIZED), so each reads its own index range, never the whole set.
    SELECT id, priority, run_at, tenant
    FROM jobs
    WHERE {{job_claimable(jobs)}}
      AND jobs.lost_claims = 0
), untenanted AS NOT MATERIALIZED (
    SELECT id, priority, run_at
    FROM (SELECT * FROM claimable ORDER BY priority, run_at, id LIMIT 1000) AS ahead
    WHERE tenant IS NULL
), groups AS MATERIALIZED (
    -- The groups with a job to take now, with that first job: the first :batch_size tenants
    -- with one, in the order above (a LATERAL ... LIMIT 1 each, so a probe of its range,
    -- never a join that reads every tenant's), and the untenanted jobs' first.
    SELECT * FROM (
        SELECT g.tenant, g.lap, first.id, first.priority, first.run_at
        FROM tenants AS g
        CROSS JOIN LATERAL (
            SELECT w.id, w.priority, w.run_at
            FROM (SELECT id, priority, run_at, status, queue, job_type, lost_claims,
                         expires_at, cancel_requested_at, ordering_key
                  FROM jobs
                  WHERE status = 'pending' AND tenant = g.tenant AND run_at <= now()
                    -- A bound of jobs_pending_tenant_idx only (true of every job of the
                    -- tenant): without it, jobs_pending_idx's walk filtered by tenant could
                    -- be the cheaper plan, and read a flood to reach a small tenant's job.
                    AND (tenant, priority) >= (g.tenant, -32768)
                  ORDER BY priority, run_at, id
                  LIMIT 100) AS w
            WHERE w.lost_claims = 0
              AND {{job_claimable(w)}}
            LIMIT 1
        ) AS first
        LIMIT :batch_size::int) AS tenanted
    UNION ALL
    SELECT NULL, NULL, first.id, first.priority, first.run_at
    FROM (SELECT id, priority, run_at FROM untenanted
          ORDER BY priority, run_at, id LIMIT 1) AS first
), share AS (
    -- No group at all: 1, and nothing to take (nullif: never a division by zero).
    SELECT greatest(1, ceil(:batch_size::numeric / nullif(count(*), 0)))::int AS n
    FROM groups
), candidates AS (
    -- Every group's first job (its turn 1, found above), then each group's next ones after
    -- it, up to its share (none when the share is 1: then each group was read once).
    SELECT id, priority, run_at, 1::bigint AS turn FROM groups
    UNION ALL
    SELECT c.*
    FROM (SELECT array_agg(tenant) AS tenants, array_agg(priority) AS priorities,
                 array_agg(run_at) AS run_ats, array_agg(id) AS ids
          FROM groups WHERE tenant IS NOT NULL) AS a
    CROSS JOIN unnest(a.tenants, a.priorities, a.run_ats, a.ids)
         AS g(tenant, priority, run_at, id)
    CROSS JOIN share
    CROSS JOIN LATERAL (
        SELECT w.id, w.priority, w.run_at,
               row_number() OVER (ORDER BY w.priority, w.run_at, w.id) + 1 AS turn
        FROM (SELECT id, priority, run_at, status, queue, job_type, lost_claims,
                     expires_at, cancel_requested_at, ordering_key
              FROM jobs
              WHERE status = 'pending' AND tenant = g.tenant AND run_at <= now()
                -- With the tenant in the row, a bound of jobs_pending_tenant_idx only: a
                -- bare (priority, run_at, id) made jobs_pending_idx's walk the cheaper plan.
                AND (tenant, priority, run_at, id) > (g.tenant, g.priority, g.run_at, g.id)
              ORDER BY priority, run_at, id
              LIMIT 1000) AS w
        WHERE w.lost_claims = 0
          AND {{job_claimable(w)}}
        LIMIT share.n - 1
    ) AS c
    UNION ALL
    SELECT c.*
    FROM groups AS g
    CROSS JOIN share
    CROSS JOIN LATERAL (
        SELECT u.id, u.priority, u.run_at,
               row_number() OVER (ORDER BY u.priority, u.run_at, u.id) + 1 AS turn
        FROM untenanted AS u
        WHERE (u.priority, u.run_at, u.id) > (g.priority, g.run_at, g.id)
        ORDER BY u.priority, u.run_at, u.id
        LIMIT share.n - 1
    ) AS c
    WHERE g.tenant IS NULL
), due AS MATERIALIZED (
    -- The ids as an array too: joined by id alone, the planner guessed thousands of
    -- candidates and read the whole table in a hash join (21 ms a claim behind 100,000 jobs).
    SELECT j.id
    FROM candidates AS c
    JOIN jobs AS j ON j.id = c.id
    WHERE j.id = ANY (ARRAY(SELECT id FROM candidates)) AND j.status = 'pending'
    ORDER BY c.turn, c.priority, c.run_at, c.id
    LIMIT :batch_size::int
    FOR UPDATE OF j SKIP LOCKED
), {{job_claim_due}}
SELECT c.*,
       (SELECT g.tenant FROM groups AS g
        WHERE g.tenant IN (SELECT tenant FROM claimed)
        ORDER BY g.lap DESC, g.tenant DESC LIMIT 1) AS fair_after
FROM claimed AS c ORDER BY priority, run_at, id

-- name: job_claim_ids
-- Claim the jobs a controlled claim picked (read by its job_claim_candidates) that are still
-- pending, as every claim claims (job_claim_set), and return them in claim order: ordered
-- here, not by the caller, for run_at may be -infinity or a BC date, which the driver returns
-- as text.
WITH claimed AS (
    UPDATE jobs AS j
    SET {{job_claim_set(j)}}
    WHERE j.id = ANY (:ids::bigint[]) AND j.status = 'pending'
    RETURNING {{job_claim_returning(j)}}
)
SELECT * FROM claimed ORDER BY priority, run_at, id

-- name: job_complete_batch
-- Mark claimed jobs done: job_finish_batch for the commonest case, two arrays instead of five
-- and no CASE per column (it is a fifth faster on no-op jobs in batches of 100; see
-- docs/benchmarks.md). Each row is guarded by its claim (running, same lease token); the ids
-- that come back are the ones that changed, any other was a stale write. Waiters of these
-- jobs are notified (waiters_woken; the count only makes the statement read it).
WITH {{waiters_woken}}
UPDATE jobs AS j
SET {{job_done_set}}
FROM unnest(:ids::bigint[], :tokens::uuid[]) AS c(id, lease_token)
WHERE j.id = c.id
  AND j.status = 'running'
  AND j.lease_token = c.lease_token
  AND (SELECT count(*) FROM woken) >= 0
RETURNING j.id

-- name: job_complete_forget_batch
-- Done, with nothing to keep (PGDRAIN_RETENTION_SECONDS=0: done rows are not kept): the rows
-- are deleted, not rewritten as done and purged later. A delete logs the row's id, where a
-- finish logs the row's new version and an entry in the primary key and in
-- jobs_done_finished_idx, and the purge then deletes it all the same (docs/benchmarks.md,
-- "What a job writes"). A job holding a dedupe key is kept done as job_complete_batch
-- writes it: a unique window counts done rows (job_enqueue_batch), and the janitor's purge
-- takes it; so is a parent (has_children), whose end its children's edges record. Each row is guarded by its claim; the ids that come back are the stale writes
-- (changed nothing: the claim was lost), so a batch normally returns no row to decode. The
-- deleted ones are counted in pgdrain_done_counts
-- (job_overview_by_queue_type reads them), a row per queue and type, taken in one order by
-- every such statement so that two drains' batches never wait on each other's counts in a
-- cycle. A job someone waits for (pgdrain.wait: waiters_woken) is kept done too, for its
-- waiter to read its result, and its waiter is notified.
WITH c AS (
    SELECT * FROM unnest(:ids::bigint[], :tokens::uuid[]) AS c(id, lease_token)
), {{waiters_woken}}, forgotten AS (
    DELETE FROM jobs AS j
    USING c
    WHERE j.id = c.id
      AND j.status = 'running'
      AND j.lease_token = c.lease_token
      AND j.dedupe_key IS NULL
      AND NOT j.has_children
      AND j.id <> ALL (ARRAY(SELECT job_id FROM woken))
    RETURNING j.id, j.queue, j.job_type
), counted AS (
    INSERT INTO pgdrain_done_counts AS n (queue, job_type, minute, done)
    SELECT queue, job_type, date_trunc('minute', now()), count(*)
    FROM forgotten
    GROUP BY queue, job_type
    ORDER BY queue, job_type
    ON CONFLICT (queue, job_type, minute) DO UPDATE SET done = n.done + excluded.done
), kept AS (
    UPDATE jobs AS j
    SET {{job_done_set}}
    FROM c
    WHERE j.id = c.id
      AND j.status = 'running'
      AND j.lease_token = c.lease_token
      AND (j.dedupe_key IS NOT NULL OR j.has_children
           OR j.id = ANY (ARRAY(SELECT job_id FROM woken)))
    RETURNING j.id
)
SELECT c.id FROM c
WHERE c.id NOT IN (SELECT id FROM forgotten UNION ALL SELECT id FROM kept)

-- name: job_control_sync
-- While jobs run: write the progress their handlers reported (NULL: none since the last sync)
-- and return those of them asked to stop (cancel_requested_at), one statement for the batch,
-- each row guarded by its claim. Only rows with a report are written.
WITH c AS (
    SELECT * FROM unnest(:ids::bigint[], :tokens::uuid[], :progress::text[])
        AS c(id, lease_token, progress)
), written AS (
    UPDATE jobs AS j
    SET progress = c.progress::jsonb, updated_at = now()
    FROM c
    WHERE c.progress IS NOT NULL
      AND j.id = c.id AND j.status = 'running' AND j.lease_token = c.lease_token
    RETURNING j.id
)
SELECT j.id
FROM jobs AS j
JOIN c ON j.id = c.id AND j.lease_token = c.lease_token
WHERE j.status = 'running' AND j.cancel_requested_at IS NOT NULL

-- name: job_count_failed
-- How many failed jobs `pgdrain requeue` would requeue with these filters (NULL: any), and
-- whether the type and queue named are known at all (a typo requeues nothing).
SELECT (SELECT count(*) FROM jobs
        WHERE status = 'failed'
          AND (:job_type::text IS NULL OR job_type = :job_type::text)
          AND (:queue::text IS NULL OR queue = :queue::text))::bigint AS failed,
       (:job_type::text IS NULL
        OR EXISTS (SELECT FROM jobs WHERE job_type = :job_type::text)) AS type_known,
       (:queue::text IS NULL
        OR EXISTS (SELECT FROM jobs WHERE queue = :queue::text)
        OR EXISTS (SELECT FROM pgdrain_queues WHERE queue = :queue::text)) AS queue_known

-- name: job_count_purgeable
-- How many :status jobs finished more than :older_than_seconds ago (what `pgdrain purge`
-- would delete). A row finished by plain SQL may lack finished_at: its last update counts.
SELECT count(*)::bigint AS jobs
FROM jobs
WHERE status = :status::text
  AND coalesce(finished_at, updated_at)
      < now() - make_interval(secs => :older_than_seconds::float8)

-- name: job_debounce
-- Debounce: the pending job holding :dedupe_key takes the new payload and is put off to
-- :seconds from now (the clock, not the transaction's start: a long transaction must not pull
-- it earlier). Returns its id, or nothing (no pending job holds the key: insert one).
UPDATE jobs
SET payload = :payload::jsonb,
    run_at = clock_timestamp() + make_interval(secs => :seconds::float8),
    updated_at = now()
WHERE dedupe_key = :dedupe_key::text AND status = 'pending'
RETURNING id

-- name: job_delete
-- Delete jobs by id, one statement, unless running (its drain holds it: cancel it first, or
-- let it finish), and only in one of :statuses (NULL: any; a bulk action's filter, checked
-- again here in case the job moved on since it was selected). Each id given comes back with
-- what happened to it: deleted (it was pending, done, failed or cancelled; the status it had),
-- its status when not deleted (running, or not in :statuses), or not_found.
WITH given AS (
    SELECT DISTINCT g.id FROM unnest(:ids::bigint[]) AS g(id)
), deleted AS (
    DELETE FROM jobs AS j
    USING given AS g
    WHERE j.id = g.id AND j.status <> 'running'
      AND (:statuses::text[] IS NULL OR j.status = ANY (:statuses::text[]))
    RETURNING j.id, j.status
)
SELECT g.id,
       CASE WHEN d.id IS NOT NULL THEN 'deleted'
            WHEN j.id IS NOT NULL THEN j.status
            ELSE 'not_found' END AS outcome,
       COALESCE(d.status, j.status) AS status
FROM given AS g
LEFT JOIN deleted AS d ON d.id = g.id
LEFT JOIN jobs AS j ON j.id = g.id AND d.id IS NULL
ORDER BY g.id

-- name: job_dependencies_set
-- The jobs of a batch enqueued with depends_on (just inserted, in the enqueue's transaction):
-- their edges, with the end of each parent that had already finished, and each child's start
-- (models.dependent_start): waiting with the parents left, pending when none is, or cancelled
-- by a parent that already ended badly. A child cancelled here that is itself a parent of the
-- batch cancels its own waiting children as it ends (jobs_parent_finished).
WITH edges AS (
    INSERT INTO job_edges (parent_id, child_id, parent_status, parent_result)
    SELECT e.parent_id, e.child_id, e.parent_status, e.parent_result::jsonb
    FROM unnest(:edge_parents::bigint[], :edge_children::bigint[], :edge_statuses::text[],
                :edge_results::text[]) AS e(parent_id, child_id, parent_status, parent_result)
    ON CONFLICT DO NOTHING
)
UPDATE jobs AS j
SET status        = c.status,
    parents_left  = c.parents_left,
    after_parents = c.after,
    cancelled_by  = c.cancelled_by,
    last_error    = c.error,
    finished_at   = CASE WHEN c.status = 'cancelled' THEN now() END,
    updated_at    = now()
FROM unnest(:ids::bigint[], :statuses::text[], :lefts::int[], :afters::text[],
            :cancelled_by::bigint[], :errors::text[])
     AS c(id, status, parents_left, after, cancelled_by, error)
WHERE j.id = c.id

-- name: job_enqueue_batch
-- Insert jobs in input order. A live duplicate of a dedupe key (in the table or earlier in the
-- same batch) is skipped and not returned; the caller looks its id up. `run_at` NULL means now()
-- plus the delay, in the database's clock; `expires_at` NULL is now() plus the TTL, or never.
{{job_enqueue_rows}}
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL
                         AND status IN ('pending', 'running', 'waiting')
DO NOTHING
RETURNING id, dedupe_key, run_at <= now() AS due

-- name: job_enqueue_batch_unkeyed
-- job_enqueue_batch for a batch in which no job holds a dedupe key: no ON CONFLICT, which
-- inserts each row speculatively and then confirms it, one more WAL record a job (48 bytes of
-- the 540 an enqueue writes on PostgreSQL 15; bench/wal_breakdown.py).
{{job_enqueue_rows}}
RETURNING id, dedupe_key, run_at <= now() AS due

-- name: job_enqueued_list
-- pgdrain.testing's enqueued jobs: of :job_type, in :statuses, whose payload contains
-- :payload (jsonb @>; NULL: any), in :queue and of :tenant and :priority (NULL: any), oldest
-- first, at most :limit. The payload comes back as text, decoded by the caller.
SELECT id, job_type, payload::text AS payload, status, queue, priority, tenant, run_at,
       attempts, max_attempts, dedupe_key, ordering_key
FROM jobs
WHERE job_type = :job_type::text
  AND status = ANY (:statuses::text[])
  AND (:payload::jsonb IS NULL OR payload @> :payload::jsonb)
  AND (:queue::text IS NULL OR queue = :queue::text)
  AND (:tenant::text IS NULL OR tenant = :tenant::text)
  AND (:priority::int IS NULL OR priority = :priority::int)
ORDER BY id
LIMIT :limit::int

-- name: job_failures_recent
-- The jobs that failed last (the console's overview), newest first, at most :limit: the end of
-- jobs_failed_finished_idx, a bounded read however many failed before.
SELECT id, job_type, queue, attempts, finished_at, left(last_error, 300) AS last_error
FROM jobs
WHERE status = 'failed'
ORDER BY finished_at DESC
LIMIT :limit::int

-- name: job_finish_batch
-- Finish claims, each with its outcome (models.Outcome): one statement for a batch of them.
-- Each row is guarded by its claim (running, same lease token); the ids that come back are
-- the ones that changed, any other was a stale write. done and fail finish the job; retry and
-- snooze make it pending after :delays; release and refund make it pending at once; snooze,
-- release and refund give the claim's attempt back (refund also counts a lost claim); retry
-- and fail keep the error, in last_error and as one more entry of errors. A job asked to stop
-- while it ran (cancel_requested_at, job_cancel) ends cancelled instead of going back to
-- pending; done and failed stay what they are. done stores the handler's result (JSON text,
-- or NULL), and with an error (why the result could not be stored) keeps it in last_error.
-- Returns what a dead-letter hook needs of each (job_hooks_insert), and for a job that ended
-- failed whether a drain declared a hook for its type (hooks_declare): the caller then inserts
-- the hook's job in the same transaction, whichever process it is. Waiters of these jobs are
-- notified (waiters_woken; the count only makes the statement read it): a retry's too, whose
-- waiter reads the job pending and waits on.
WITH {{waiters_woken}}
UPDATE jobs AS j
SET status           = CASE WHEN f.outcome = 'done' THEN 'done'
                            WHEN f.outcome = 'fail' THEN 'failed'
                            WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                            ELSE 'pending' END,
    attempts         = CASE WHEN f.outcome IN ('snooze', 'release', 'refund')
                            THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
    lost_claims      = j.lost_claims + (f.outcome = 'refund')::int,
    run_at           = CASE WHEN f.outcome IN ('retry', 'snooze')
                            THEN now() + make_interval(secs => f.delay_seconds)
                            WHEN f.outcome = 'refund' THEN now()
                            ELSE j.run_at END,
    finished_at      = CASE WHEN f.outcome IN ('done', 'fail')
                                 OR j.cancel_requested_at IS NOT NULL THEN now()
                            ELSE j.finished_at END,
    last_error       = CASE WHEN f.outcome IN ('retry', 'fail') THEN f.error
                            WHEN f.outcome = 'done' THEN coalesce(f.error, j.last_error)
                            ELSE j.last_error END,
    result           = CASE WHEN f.outcome = 'done' THEN f.result::jsonb ELSE j.result END,
    errors           = CASE WHEN f.outcome IN ('retry', 'fail')
                            THEN j.errors || jsonb_build_array(jsonb_build_object(
                                'attempt', j.attempts, 'at', now(), 'error', f.error))
                            ELSE j.errors END,
    lease_expires_at = NULL,
    lease_token      = NULL,
    started_at       = NULL,
    updated_at       = now()
FROM unnest(:ids::bigint[], :tokens::uuid[], :outcomes::text[], :delays::float8[],
            :errors::text[], :results::text[])
     AS f(id, lease_token, outcome, delay_seconds, error, result)
WHERE j.id = f.id
  AND j.status = 'running'
  AND j.lease_token = f.lease_token
  AND (SELECT count(*) FROM woken) >= 0
RETURNING j.id, j.job_type, j.queue, j.status, j.last_error,
          CASE WHEN j.status = 'failed'
               THEN EXISTS (SELECT FROM pgdrain_hooked_types AS h WHERE h.job_type = j.job_type)
               ELSE false END AS hooked

-- name: job_get
-- One job by id, with its lease and error history, the signal it waits for or what its last
-- wait got, and its parents (each with its end, or its status while it has none) and first
-- 1,000 children. The JSON columns come back as
-- text, for the caller to decode: plain SQL may have stored what the driver cannot read.
SELECT id, job_type, payload::text AS payload, status, attempts, max_attempts, run_at,
       created_at, queue, priority, claimed_at, lease_expires_at,
       lease_token::text AS lease_token, last_error, errors::text AS errors, dedupe_key,
       finished_at, updated_at, lost_claims, started_at, cancel_requested_at, expires_at,
       result::text AS result, progress::text AS progress, ordering_key, tenant,
       state::text AS state, parents_left, after_parents, cancelled_by, wait_signal,
       wait_result::text AS wait_result, coalesce(tags, '{}') AS tags,
       coalesce(meta, '{}')::text AS meta, trace_context::text AS trace_context,
       (SELECT json_agg(json_build_object('id', e.parent_id,
                                          'status', coalesce(e.parent_status, p.status))
                        ORDER BY e.parent_id)::text
        FROM job_edges AS e LEFT JOIN jobs AS p ON p.id = e.parent_id
        WHERE e.child_id = jobs.id) AS parents,
       (SELECT json_agg(c.child_id ORDER BY c.child_id)::text
        FROM (SELECT child_id FROM job_edges WHERE parent_id = jobs.id
              ORDER BY child_id LIMIT 1000) AS c) AS children
FROM jobs
WHERE id = :id::bigint

-- name: job_get_live_by_dedupe_keys
-- The live (pending, running or waiting) job holding each dedupe key.
SELECT dedupe_key, id
FROM jobs
WHERE dedupe_key = ANY(:dedupe_keys::text[]) AND status IN ('pending', 'running', 'waiting')

-- name: job_hooks_insert
-- Dead-letter hooks' jobs (on_failed): one pgdrain.on-failed job per job that just ended
-- failed, in the transaction that failed it (so once per failure). A separate statement, run
-- only when a job of a hooked type failed: a role without INSERT on jobs never runs it while
-- no hook is declared.
INSERT INTO jobs (job_type, payload, queue)
SELECT 'pgdrain.on-failed',
       jsonb_build_object('job_id', h.id, 'job_type', h.job_type, 'error', h.error), h.queue
FROM unnest(:ids::bigint[], :job_types::text[], :queues::text[], :errors::text[])
     WITH ORDINALITY AS h(id, job_type, queue, error, ord)
ORDER BY h.ord

-- name: job_id_range
-- The lowest and highest job id (two probes of the primary key): where the console's pages of
-- jobs start and end (job_page reads the ids between, a window at a time).
SELECT (SELECT min(id) FROM jobs) AS low, (SELECT max(id) FROM jobs) AS high

-- name: job_key_lock
-- Serialise the enqueues of one dedupe key (unique windows, debounce) until this transaction
-- ends: a transaction-scoped advisory lock on the key's hash. Two keys sharing a hash only
-- wait for each other.
SELECT pg_advisory_xact_lock(:lock_key::int, hashtext(:dedupe_key::text))

-- name: job_key_recent
-- The newest job holding :dedupe_key that is live (pending, running, waiting) or done and was
-- created less
-- than :seconds ago (failed and cancelled ones do not count): one probe of the live key index
-- and one of jobs_dedupe_key_done_idx.
SELECT id
FROM (
    SELECT id, created_at FROM jobs
    WHERE dedupe_key = :dedupe_key::text AND status IN ('pending', 'running', 'waiting')
    UNION ALL
    SELECT id, created_at FROM jobs
    WHERE dedupe_key = :dedupe_key::text AND status = 'done'
      AND created_at > clock_timestamp() - make_interval(secs => :seconds::float8)
) AS recent
WHERE created_at > clock_timestamp() - make_interval(secs => :seconds::float8)
ORDER BY created_at DESC, id DESC
LIMIT 1

-- name: job_list
-- The newest jobs matching the filters (NULL matches all), for `pgdrain list`; :since_seconds
-- keeps those changed in that many seconds, :waiting_for the jobs waiting for their parents
-- ('parents') or for a signal ('signal'), :tags those with all of these tags, :meta those whose
-- meta contains it. The last error is cut short: `pgdrain show` has it whole.
SELECT id, job_type, queue, status, priority, attempts, max_attempts, run_at, created_at,
       updated_at, finished_at, left(last_error, 500) AS last_error,
       CASE WHEN status = 'waiting'
            THEN coalesce('signal ' || wait_signal, parents_left || ' parent(s)') END
           AS waits_for,
       coalesce(tags, '{}') AS tags, coalesce(meta, '{}') AS meta
FROM jobs
WHERE (:status::text IS NULL OR status = :status::text)
  AND (:tags::text[] IS NULL OR tags @> :tags::text[])
  AND (:meta::jsonb IS NULL OR meta @> :meta::jsonb)
  AND (:waiting_for::text IS NULL
       OR (status = 'waiting' AND (wait_signal IS NOT NULL) = (:waiting_for::text = 'signal')))
  AND (:job_type::text IS NULL OR job_type = :job_type::text)
  AND (:queue::text IS NULL OR queue = :queue::text)
  AND (:since_seconds::float8 IS NULL
       OR updated_at >= now() - make_interval(secs => :since_seconds::float8))
ORDER BY id DESC
LIMIT :limit::int

-- name: job_lock_others
-- pgdrain.testing.run_job: lock every pending job but :id, in the caller's transaction, so
-- that the drain's claims (FOR UPDATE SKIP LOCKED) and the janitor skip them and take only
-- that one. FOR KEY SHARE: an update of those jobs meanwhile (the run's enqueue debouncing
-- into one of them) does not wait for it; only FOR UPDATE conflicts with it.
SELECT count(*)::int AS locked
FROM (SELECT id FROM jobs WHERE status = 'pending' AND id <> :id::bigint FOR KEY SHARE) AS l

-- name: job_minutes
-- Jobs done and failed per minute over the last hour (the console's chart): the done and the
-- failed rows finished since, each status through its own index (jobs_done_finished_idx,
-- jobs_failed_finished_idx, their entries only while vacuum keeps the table's pages visible),
-- and the done jobs that left no row (pgdrain_done_counts, written by the minute as they
-- finished). A read of the last hour's finished jobs: the console reads it at most twice a
-- minute, whatever the number of tabs open.
SELECT minute, sum(done)::bigint AS done, sum(failed)::bigint AS failed
FROM (
    SELECT date_trunc('minute', finished_at) AS minute, count(*) AS done, 0 AS failed
    FROM jobs
    WHERE status = 'done' AND finished_at > now() - interval '1 hour'
    GROUP BY 1
    UNION ALL
    SELECT date_trunc('minute', finished_at), 0, count(*)
    FROM jobs
    WHERE status = 'failed' AND finished_at > now() - interval '1 hour'
    GROUP BY 1
    UNION ALL
    SELECT minute, sum(done), 0
    FROM pgdrain_done_counts
    WHERE minute > now() - interval '61 minutes'
    GROUP BY 1
) AS m
GROUP BY minute
ORDER BY minute

-- name: job_oldest_due_age
-- Seconds since the oldest due job (job_due, as every claim and count reads it: not expired,
-- not asked to stop) became due (0 when none is due): the queue's lag; and how many are due.
SELECT COALESCE(EXTRACT(EPOCH FROM now() - CASE
           WHEN min(run_at) = '-infinity' THEN timestamptz '0001-01-01 00:00:00+00'
           ELSE min(run_at) END), 0)::float8 AS oldest_due_seconds,
       count(*) AS due
FROM jobs
WHERE {{job_due(jobs)}}

-- name: job_outcomes
-- pgdrain.testing: how the jobs :ids stand after a drain (a done job with nothing to keep
-- may have no row: retention 0). Result as text, decoded by the caller.
SELECT id, status, run_at <= now() AS due, result::text AS result, last_error
FROM jobs
WHERE id = ANY (:ids::bigint[])

-- name: job_overview_by_queue_type
-- What an operator asks first, per queue and job type: due, scheduled (pending, not yet due),
-- waiting (for parents or a signal: jobs_waiting_idx), running, failed and cancelled jobs, how long the oldest due job has waited, and what
-- finished in the last minute and hour. Each part reads one status through its partial index
-- (done, failed and cancelled by finished_at), never the whole history. Due is job_due, as
-- every claim and count reads it (a pending job past its expires_at, or asked to stop, is not
-- due: the janitor ends it).
WITH pending AS (
    SELECT queue, job_type,
           count(*) FILTER (WHERE {{job_due(jobs)}}) AS due,
           count(*) FILTER (WHERE run_at > now()) AS scheduled,
           min(run_at) FILTER (WHERE {{job_due(jobs)}}) AS oldest_due_at
    FROM jobs
    WHERE status = 'pending'
    GROUP BY queue, job_type
), waiting AS (
    SELECT queue, job_type, count(*) AS waiting
    FROM jobs
    WHERE status = 'waiting'
    GROUP BY queue, job_type
), running AS (
    SELECT queue, job_type, count(*) AS running
    FROM jobs
    WHERE status = 'running'
    GROUP BY queue, job_type
), failed AS (
    SELECT queue, job_type, count(*) AS failed,
           count(*) FILTER (WHERE finished_at > now() - interval '1 minute')
               AS failed_last_minute,
           count(*) FILTER (WHERE finished_at > now() - interval '1 hour') AS failed_last_hour
    FROM jobs
    WHERE status = 'failed'
    GROUP BY queue, job_type
), cancelled AS (
    SELECT queue, job_type, count(*) AS cancelled
    FROM jobs
    WHERE status = 'cancelled'
    GROUP BY queue, job_type
), done AS (
    -- The done rows still kept, and the done jobs that left none (pgdrain_done_counts, by
    -- the minute: "the last minute" is the current minute and the one before it, prorated).
    SELECT queue, job_type,
           sum(last_minute) AS done_last_minute, sum(last_hour) AS done_last_hour
    FROM (
        SELECT queue, job_type,
               count(*) FILTER (WHERE finished_at > now() - interval '1 minute') AS last_minute,
               count(*) AS last_hour
        FROM jobs
        WHERE status = 'done' AND finished_at > now() - interval '1 hour'
        GROUP BY queue, job_type
        UNION ALL
        SELECT queue, job_type,
               round(sum(done * greatest(0, least(1, EXTRACT(EPOCH FROM
                   minute + interval '2 minutes' - now()) / 60)))),
               sum(done)
        FROM pgdrain_done_counts
        WHERE minute > now() - interval '1 hour'
        GROUP BY queue, job_type
    ) AS d
    GROUP BY queue, job_type
)
SELECT queue, job_type,
       coalesce(p.due, 0)::bigint AS due,
       coalesce(p.scheduled, 0)::bigint AS scheduled,
       coalesce(w.waiting, 0)::bigint AS waiting,
       coalesce(r.running, 0)::bigint AS running,
       coalesce(f.failed, 0)::bigint AS failed,
       coalesce(c.cancelled, 0)::bigint AS cancelled,
       -- 0 when none is due; a run_at of -infinity (plain SQL allows it) counts from year 1,
       -- so the age stays a number.
       coalesce(EXTRACT(EPOCH FROM now() - CASE
           WHEN p.oldest_due_at = '-infinity' THEN timestamptz '0001-01-01 00:00:00+00'
           ELSE p.oldest_due_at END), 0)::float8 AS oldest_due_seconds,
       coalesce(d.done_last_minute, 0)::bigint AS done_last_minute,
       coalesce(d.done_last_hour, 0)::bigint AS done_last_hour,
       coalesce(f.failed_last_minute, 0)::bigint AS failed_last_minute,
       coalesce(f.failed_last_hour, 0)::bigint AS failed_last_hour
FROM pending AS p
FULL JOIN waiting AS w USING (queue, job_type)
FULL JOIN running AS r USING (queue, job_type)
FULL JOIN failed AS f USING (queue, job_type)
FULL JOIN cancelled AS c USING (queue, job_type)
FULL JOIN done AS d USING (queue, job_type)
ORDER BY queue, job_type

-- name: job_page
-- The jobs matching the console's filters (NULL matches all) among ids in [:floor_id,
-- :before_id), newest first, at most :limit: one window of the primary key (or of a filter's
-- own index, where the planner finds it cheaper), never the whole table, whatever the filters.
-- The caller moves the window down until the page is full or its time is spent.
SELECT id, job_type, queue, status, priority, attempts, max_attempts, run_at, created_at,
       updated_at, finished_at, tenant, ordering_key, dedupe_key,
       left(last_error, 300) AS last_error, coalesce(tags, '{}') AS tags,
       CASE WHEN status = 'waiting'
            THEN coalesce('signal ' || wait_signal, parents_left || ' parent(s)') END
           AS waits_for
FROM jobs
WHERE {{job_page_match(jobs)}}
ORDER BY id DESC
LIMIT :limit::int

-- name: job_page_ids
-- job_page's ids alone, up to :limit in the window (the console's bulk actions take them a
-- batch at a time, and count them, a window at a time, before asking to confirm).
SELECT id
FROM jobs
WHERE {{job_page_match(jobs)}}
ORDER BY id DESC
LIMIT :limit::int

-- name: job_parents
-- The parents of jobs (depends_on): each edge, with the parent's end and (done) its result
-- as recorded when it finished, which outlives the parent's row.
SELECT child_id, parent_id, parent_status, parent_result::text AS parent_result
FROM job_edges
WHERE child_id = ANY(:ids::bigint[])
ORDER BY child_id, parent_id

-- name: job_parents_mark
-- Lock the parents a batch names (in id order, as every such statement does), mark them as
-- parents (has_children: their end now runs jobs_parent_finished) and return how each
-- stands. Until the enqueue commits, a parent's finishing write waits: it then sees the
-- new edges. An id that does not come back does not exist.
WITH locked AS (
    SELECT id, status, result::text AS result, has_children
    FROM jobs
    WHERE id = ANY(:ids::bigint[])
    ORDER BY id
    FOR UPDATE
), marked AS (
    UPDATE jobs AS j
    SET has_children = true
    FROM locked AS l
    WHERE j.id = l.id AND NOT l.has_children
)
SELECT id, status, result FROM locked

-- name: job_purge_dead_batch
-- Delete up to :limit failed and up to :limit cancelled jobs that ended more than
-- :retention_seconds ago (PGDRAIN_FAILED_RETENTION_SECONDS), and count them: the janitor's
-- purge of the dead letter. The statuses are literals, so that even a generic plan (the drain
-- prepares its statements) reads each through its partial index; a row ended by plain SQL
-- without finished_at counts from its last update.
WITH purged AS (
    DELETE FROM jobs
    WHERE id = ANY(ARRAY(
        SELECT id FROM jobs
        WHERE status = 'failed'
          AND coalesce(finished_at, updated_at)
              < now() - make_interval(secs => :retention_seconds::float8)
        ORDER BY coalesce(finished_at, updated_at)
        LIMIT :limit::int
        FOR UPDATE SKIP LOCKED
    ) || ARRAY(
        SELECT id FROM jobs
        WHERE status = 'cancelled'
          AND coalesce(finished_at, updated_at)
              < now() - make_interval(secs => :retention_seconds::float8)
        ORDER BY coalesce(finished_at, updated_at)
        LIMIT :limit::int
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING 1
)
SELECT count(*)::int AS purged FROM purged

-- name: job_purge_done_batch
-- Delete up to :limit done jobs that finished more than :retention_seconds ago and count them.
-- Bounded so a large backlog of history is cleared over several drains instead of in one long
-- transaction. The counts of done jobs not kept go after an hour (job_overview_by_queue_type
-- reads no further back): at most one row a minute for each queue and type.
WITH old_counts AS (
    DELETE FROM pgdrain_done_counts WHERE minute < now() - interval '1 hour'
), purged AS (
    DELETE FROM jobs
    WHERE id = ANY(ARRAY(
        SELECT id
        FROM jobs
        WHERE status = 'done'
          AND finished_at < now() - make_interval(secs => :retention_seconds::float8)
          -- A job someone waits for (pgdrain.wait) stays until the waiter has read it.
          AND NOT EXISTS (SELECT FROM pgdrain_waiters AS w WHERE w.job_id = jobs.id)
        ORDER BY finished_at
        LIMIT :limit::int
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING 1
)
SELECT count(*)::int AS purged FROM purged

-- name: job_purge_finished_batch
-- Delete up to :limit :status jobs (done or failed) finished more than :older_than_seconds
-- ago, oldest first, and count them: `pgdrain purge` repeats it until none is left, so no
-- transaction holds many rows. One branch per status, each naming it as a literal, so that
-- even a generic plan reads only that status's partial index (`status = :status` read the
-- whole table); the two other branches' :status test is false and they read nothing.
WITH purged AS (
    DELETE FROM jobs
    WHERE id = ANY(ARRAY(
        SELECT id FROM jobs
        WHERE status = 'done' AND :status::text = 'done'
          AND coalesce(finished_at, updated_at)
              < now() - make_interval(secs => :older_than_seconds::float8)
        ORDER BY coalesce(finished_at, updated_at)
        LIMIT :limit::int
        FOR UPDATE SKIP LOCKED
    ) || ARRAY(
        SELECT id FROM jobs
        WHERE status = 'failed' AND :status::text = 'failed'
          AND coalesce(finished_at, updated_at)
              < now() - make_interval(secs => :older_than_seconds::float8)
        ORDER BY coalesce(finished_at, updated_at)
        LIMIT :limit::int
        FOR UPDATE SKIP LOCKED
    ) || ARRAY(
        SELECT id FROM jobs
        WHERE status = 'cancelled' AND :status::text = 'cancelled'
          AND coalesce(finished_at, updated_at)
              < now() - make_interval(secs => :older_than_seconds::float8)
        ORDER BY coalesce(finished_at, updated_at)
        LIMIT :limit::int
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING 1
)
SELECT count(*)::int AS purged FROM purged

-- name: job_requeue_failed
-- Give up to :limit failed jobs a fresh set of attempts, due now. NULL filters match every
-- failed job; a caller with more repeats it (requeued jobs are no longer failed). Two live jobs
-- may not share a dedupe key: a failed job whose key a live job holds stays failed, and of
-- failed jobs sharing a free key only the newest is requeued.
WITH chosen AS (
    SELECT DISTINCT ON (f.dedupe_key, CASE WHEN f.dedupe_key IS NULL THEN f.id END) f.id
    FROM jobs f
    WHERE f.status = 'failed'
      AND (:ids::bigint[] IS NULL OR f.id = ANY(:ids::bigint[]))
      AND (:job_type::text IS NULL OR f.job_type = :job_type::text)
      AND (:queue::text IS NULL OR f.queue = :queue::text)
      AND NOT EXISTS (SELECT 1 FROM jobs live
                      WHERE live.dedupe_key = f.dedupe_key
                        AND live.status IN ('pending', 'running', 'waiting'))
    ORDER BY f.dedupe_key, CASE WHEN f.dedupe_key IS NULL THEN f.id END, f.id DESC
    LIMIT :limit::int
)
UPDATE jobs
SET status              = 'pending',
    attempts            = 0,
    run_at              = now(),
    finished_at         = NULL,
    cancel_requested_at = NULL,
    updated_at          = now()
FROM chosen
WHERE jobs.id = chosen.id AND jobs.status = 'failed'
RETURNING jobs.id

-- name: job_run_now
-- Make pending jobs that are not due yet (delayed, snoozed, waiting out a retry's backoff) due
-- now, one statement. Each id given comes back with what happened to it: due_now,
-- already_due (pending and due), its status when it is not pending, or not_found.
WITH given AS (
    SELECT DISTINCT g.id FROM unnest(:ids::bigint[]) AS g(id)
), moved AS (
    UPDATE jobs AS j
    SET run_at = now(), updated_at = now()
    FROM given AS g
    WHERE j.id = g.id AND j.status = 'pending' AND j.run_at > now()
    RETURNING j.id
)
SELECT g.id,
       CASE WHEN m.id IS NOT NULL THEN 'due_now'
            WHEN j.id IS NULL THEN 'not_found'
            WHEN j.status = 'pending' THEN 'already_due'
            ELSE j.status END AS outcome
FROM given AS g
LEFT JOIN moved AS m ON m.id = g.id
LEFT JOIN jobs AS j ON j.id = g.id
ORDER BY g.id

-- name: job_running_list
-- The running jobs that have run longest, at most :limit (`pgdrain top`): the running set is
-- the jobs in flight, read off jobs_running_idx whole and sorted.
SELECT id, job_type, queue, attempts,
       EXTRACT(EPOCH FROM now() - claimed_at)::float8 AS running_seconds,
       progress::text AS progress, cancel_requested_at IS NOT NULL AS cancel_requested
FROM jobs
WHERE status = 'running'
ORDER BY claimed_at, id
LIMIT :limit::int

-- name: job_states
-- The state resumable jobs saved (job.checkpoint), read as their runs begin (job.state): only
-- for jobs of resumable types, and only the rows with one. By primary key.
SELECT j.id, j.state::text AS state
FROM jobs AS j
WHERE j.id = ANY(:ids::bigint[]) AND j.state IS NOT NULL

-- name: job_stats_by_status
-- Job counts by queue and status.
SELECT queue, status, count(*) AS jobs
FROM jobs
GROUP BY queue, status
ORDER BY queue, status

-- name: job_wait_batch
-- End runs whose handlers raised WaitFor(name, timeout), each guarded by its claim (running,
-- same lease token): the job waits for its signal (wait_signal), status waiting until its
-- timeout (run_at), the claim's attempt given back and its state kept. Each signal's row
-- (pgdrain_signals) is written first, in name order, under its row lock, and read as it
-- stands then: a signal already sent, or being sent (this waits for its transaction), makes
-- the job due at once with its payload (wait_result) instead. signal_keep writes that row
-- before signal_wake looks for waiting jobs, so a signal sent while a job enters its wait is
-- never lost. A job asked to stop while it ran ends cancelled. Returns the ids that changed.
WITH w AS (
    SELECT w.id, w.lease_token, w.name, w.timeout_seconds
    FROM unnest(:ids::bigint[], :tokens::uuid[], :names::text[], :timeouts::float8[])
         AS w(id, lease_token, name, timeout_seconds)
    JOIN jobs AS j ON j.id = w.id AND j.status = 'running' AND j.lease_token = w.lease_token
), kept AS (
    INSERT INTO pgdrain_signals AS s (name, expires_at)
    SELECT w.name, max(now() + make_interval(secs => w.timeout_seconds))
    FROM w
    GROUP BY w.name
    ORDER BY w.name
    ON CONFLICT (name) DO UPDATE SET expires_at = greatest(s.expires_at, EXCLUDED.expires_at)
    RETURNING s.name, s.sent_at, s.payload
)
UPDATE jobs AS j
SET status           = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                            WHEN k.sent_at IS NOT NULL THEN 'pending'
                            ELSE 'waiting' END,
    attempts         = greatest(j.attempts - 1, 0),
    run_at           = CASE WHEN k.sent_at IS NOT NULL THEN now()
                            ELSE now() + make_interval(secs => w.timeout_seconds) END,
    finished_at      = CASE WHEN j.cancel_requested_at IS NOT NULL THEN now()
                            ELSE j.finished_at END,
    wait_signal      = CASE WHEN k.sent_at IS NULL THEN w.name END,
    wait_result      = CASE WHEN k.sent_at IS NOT NULL
                            THEN jsonb_build_object('name', k.name, 'payload', k.payload,
                                                    'received', true, 'at', k.sent_at) END,
    lease_expires_at = NULL,
    lease_token      = NULL,
    started_at       = NULL,
    updated_at       = now()
FROM w JOIN kept AS k ON k.name = w.name
WHERE j.id = w.id
  AND j.status = 'running'
  AND j.lease_token = w.lease_token
RETURNING j.id, j.status

-- name: jobs_due_count
-- Claimable jobs (job_claimable) the plain, lone and fair claims could take now, counted up to
-- :limit by a bounded scan of jobs_pending_idx, never a count of the table; the count while no
-- queue is paused, capped or rate-limited (beside one, jobs_due_count_by_queue: this scan
-- would read every paused job on each count). Fan-out and continuation only need to know
-- "more than n", and must count exactly what a claim could take: a drain started for a job no
-- claim can take finds nothing and, if its own count says the same, starts another (keyed
-- jobs behind a retrying one made 100 invocations a second). Jobs of capped or rate-limited
-- queues and of rate-limited types are controlled_due's to count, within their room. Also says
-- whether some queue is capped or rate-limited, so the caller knows whether to count those
-- too.
SELECT (SELECT count(*)
        FROM (SELECT 1 FROM jobs
              WHERE {{job_claimable(jobs)}}
              -- Ordered by the index: unordered, the planner read the table from its start
              -- (a sequential scan it expected to find :limit due jobs in early).
              ORDER BY priority, run_at, id
              LIMIT :limit::int) AS d)::int AS due,
       {{queue_controlled_any}} AS controlled

-- name: jobs_due_count_by_queue
-- jobs_due_count read queue by queue, as job_claim_batch_by_queue reads: each open queue's
-- range of jobs_pending_queue_idx, up to :limit in all. The outer LIMIT stops the reads at
-- :limit in all, and is what the planner costs by: a sum of each queue's count up to :limit
-- was costed as :limit read in every queue, and JIT-compiled behind a big backlog.
WITH RECURSIVE
{{queues_open}}
SELECT (SELECT count(*)
        FROM (SELECT 1
              FROM open_queues AS g
              CROSS JOIN LATERAL (
                  SELECT 1 FROM jobs
                  WHERE {{job_claimable(jobs)}}
                    AND jobs.queue = g.queue
                    AND (jobs.queue, jobs.priority) >= (g.queue, -32768)
                  ORDER BY priority, run_at, id
                  LIMIT :limit::int) AS d
              LIMIT :limit::int) AS c)::int AS due,
       {{queue_controlled_any}} AS controlled

-- name: jobs_table_health
-- The jobs table's footprint and vacuum state (pgdrain stats and top, the drain's metrics):
-- heap and index bytes (file sizes: nothing of the table is read), the server's estimates
-- of live and dead row versions, its vacuums (auto and by hand) and how long ago the last
-- one ended (pg_stat_user_tables: statistics the server updates about once a second).
SELECT pg_relation_size(s.relid)::bigint AS heap_bytes,
       pg_indexes_size(s.relid)::bigint AS index_bytes,
       s.n_live_tup::bigint AS live_rows,
       s.n_dead_tup::bigint AS dead_rows,
       (s.autovacuum_count + s.vacuum_count)::bigint AS vacuums,
       EXTRACT(EPOCH FROM now() - greatest(s.last_autovacuum, s.last_vacuum))::float8
           AS vacuumed_seconds_ago
FROM pg_stat_user_tables AS s
WHERE s.relid = 'jobs'::regclass

-- name: jobs_tenanted
-- Whether pending jobs name tenants: an index probe of jobs_pending_tenant_idx (empty unless
-- tenants are used). A drain that did not know asks when its plain claim comes back short.
-- Ordered by the index, as janitor_try_lock's probe: an EXISTS was planned as a sequential scan.
SELECT (SELECT tenant FROM jobs WHERE status = 'pending' AND tenant IS NOT NULL
        ORDER BY tenant LIMIT 1) IS NOT NULL AS tenants

-- name: jobs_vacuum
-- Vacuum the jobs table now, skipping it if another vacuum holds it. Outside any transaction.
-- A role that neither owns the table nor holds MAINTAIN (PostgreSQL 17) gets a warning and
-- nothing happens.
VACUUM (SKIP_LOCKED) jobs

-- name: jobs_vacuum_due
-- Whether enough dead row versions have piled up since the last vacuum (manual or auto) to
-- vacuum now: every claim and finish leaves one, and the claim reads past them. Only for a
-- role that may vacuum the table: its owner (or a member), or on PostgreSQL 17 a role with
-- MAINTAIN (the CASE keeps older servers from reading that privilege's name).
SELECT COALESCE(s.n_dead_tup, 0) >= :dead_tuples::bigint
       AND COALESCE(GREATEST(s.last_vacuum, s.last_autovacuum), '-infinity')
           < now() - make_interval(secs => :interval_seconds::float8)
       AND (pg_has_role(c.relowner, 'USAGE')
            OR CASE WHEN current_setting('server_version_num')::int >= 170000
                    THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END) AS due
FROM pg_stat_user_tables s
JOIN pg_class c ON c.oid = s.relid
WHERE s.relid = 'jobs'::regclass

-- name: migration_applied
-- The versions already applied, and when.
SELECT version, applied_at FROM pgdrain_migrations ORDER BY version

-- name: migration_create_table
-- The record of applied migrations (run only when migration_table_exists says it is missing,
-- so an up-to-date schema needs no CREATE privilege).
CREATE TABLE IF NOT EXISTS pgdrain_migrations (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: migration_index_valid
-- Whether an index an online migration builds exists, and is whole: a CREATE INDEX
-- CONCURRENTLY that failed or was cut short leaves it invalid, to be dropped and built again.
SELECT i.indisvalid AS valid
FROM pg_index AS i
WHERE i.indexrelid = to_regclass(:index_name::text)

-- name: migration_jobs_exist
-- Whether the jobs table is there yet (not on a first run).
SELECT to_regclass('jobs') IS NOT NULL AS present

-- name: migration_jobs_rows
-- How many jobs there are, counted up to :limit: the migrations build indexes and check
-- constraints online from that many (migration_steps). Read only when the table exists.
SELECT count(*)::bigint AS rows FROM (SELECT FROM jobs LIMIT :limit::bigint) AS j

-- name: migration_lock
-- Serialise concurrent `pgdrain migrate` runs until migration_unlock: held across
-- transactions, since an online migration's steps run outside any. (A version before this
-- took the same key for a transaction: the two exclude each other.)
SELECT pg_advisory_lock(:lock_key::bigint)

-- name: migration_record
-- Record one applied migration.
INSERT INTO pgdrain_migrations (version, name) VALUES (:version::int, :name::text)

-- name: migration_strangers
-- pgdrain's objects that already stand where the first migration would create them, not made
-- by pgdrain (no pgdrain_migrations beside them): the app's own `jobs`, say. Named to refuse
-- the migration before anything is created. current_schema() is where CREATE puts them (the
-- PGDRAIN_SCHEMA when one is set), and NULL when the search_path names no schema that exists.
SELECT current_schema() AS schema,
       ARRAY(SELECT c.relname::text FROM pg_class AS c
             JOIN pg_namespace AS n ON n.oid = c.relnamespace
             WHERE n.nspname = current_schema() AND c.relname = ANY(:names::text[])
             UNION
             SELECT p.proname::text FROM pg_proc AS p
             JOIN pg_namespace AS n ON n.oid = p.pronamespace
             WHERE n.nspname = current_schema() AND p.proname = ANY(:names::text[])
             ORDER BY 1) AS found

-- name: migration_table_exists
-- Whether the record of applied migrations exists yet.
SELECT to_regclass('pgdrain_migrations') IS NOT NULL AS present

-- name: migration_unlock
-- Let the next `pgdrain migrate` run (migration_lock).
SELECT pg_advisory_unlock(:lock_key::bigint)

-- name: queue_board
-- Every queue at a glance (the console's overview), read through indexes only and counted up
-- to :cap each: a queue is listed when it has pending, running, waiting or failed jobs or
-- settings (found by skipping through jobs_pending_queue_idx, jobs_running_idx,
-- jobs_waiting_idx and jobs_failed_queue_idx, one probe a queue, at most :most_queues of each
-- in name order). A queue's due and scheduled jobs and its first due run_at are read one
-- (queue, priority) range of jobs_pending_queue_idx at a time (its first :most_priorities
-- priorities), index entries only: a pending job past its expires_at or asked to stop counts
-- as due here until the janitor ends it (within its next pass), where the claims skip it. Its
-- running, waiting and failed jobs are one range each. Whatever the table holds: a few index
-- probes, and at most :cap entries per count.
WITH RECURSIVE pending_queues AS (
    (SELECT queue, 1 AS n FROM jobs WHERE status = 'pending' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM jobs AS j WHERE j.status = 'pending' AND j.queue > p.queue
            ORDER BY j.queue LIMIT 1), p.n + 1
    FROM pending_queues AS p
    WHERE p.queue IS NOT NULL AND p.n < :most_queues::int
), running_queues AS (
    (SELECT queue, 1 AS n FROM jobs WHERE status = 'running' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM jobs AS j WHERE j.status = 'running' AND j.queue > r.queue
            ORDER BY j.queue LIMIT 1), r.n + 1
    FROM running_queues AS r
    WHERE r.queue IS NOT NULL AND r.n < :most_queues::int
), waiting_queues AS (
    (SELECT queue, 1 AS n FROM jobs WHERE status = 'waiting' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM jobs AS j WHERE j.status = 'waiting' AND j.queue > w.queue
            ORDER BY j.queue LIMIT 1), w.n + 1
    FROM waiting_queues AS w
    WHERE w.queue IS NOT NULL AND w.n < :most_queues::int
), failed_queues AS (
    (SELECT queue, 1 AS n FROM jobs WHERE status = 'failed' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM jobs AS j WHERE j.status = 'failed' AND j.queue > f.queue
            ORDER BY j.queue LIMIT 1), f.n + 1
    FROM failed_queues AS f
    WHERE f.queue IS NOT NULL AND f.n < :most_queues::int
), named AS (
    SELECT DISTINCT queue FROM (
        SELECT queue FROM pending_queues
        UNION ALL SELECT queue FROM running_queues
        UNION ALL SELECT queue FROM waiting_queues
        UNION ALL SELECT queue FROM failed_queues
        UNION ALL SELECT queue FROM pgdrain_queues) AS q
    WHERE queue IS NOT NULL
    ORDER BY queue
    LIMIT :most_queues::int
), pending AS (
    SELECT q.queue, d.first_due_at, d.due, d.scheduled
    FROM named AS q
    CROSS JOIN LATERAL (
        WITH RECURSIVE priorities AS (
            (SELECT j.priority, 1 AS n FROM jobs AS j
             WHERE j.status = 'pending' AND j.queue = q.queue
             ORDER BY j.priority LIMIT 1)
            UNION ALL
            SELECT (SELECT j.priority FROM jobs AS j
                    WHERE j.status = 'pending' AND j.queue = q.queue
                      AND j.priority > p.priority
                    ORDER BY j.priority LIMIT 1), p.n + 1
            FROM priorities AS p
            WHERE p.priority IS NOT NULL AND p.n < :most_priorities::int
        )
        SELECT min(r.first_due_at) AS first_due_at, sum(r.due) AS due,
               sum(r.scheduled) AS scheduled
        FROM (
            SELECT (SELECT j.run_at FROM jobs AS j
                    WHERE j.status = 'pending' AND j.queue = q.queue
                      AND j.priority = p.priority AND j.run_at <= now()
                    ORDER BY j.run_at LIMIT 1) AS first_due_at,
                   (SELECT count(*) FROM (
                        SELECT 1 FROM jobs AS j
                        WHERE j.status = 'pending' AND j.queue = q.queue
                          AND j.priority = p.priority AND j.run_at <= now()
                        LIMIT :cap::int) AS d) AS due,
                   (SELECT count(*) FROM (
                        SELECT 1 FROM jobs AS j
                        WHERE j.status = 'pending' AND j.queue = q.queue
                          AND j.priority = p.priority AND j.run_at > now()
                        LIMIT :cap::int) AS s) AS scheduled
            FROM priorities AS p
            WHERE p.priority IS NOT NULL) AS r
    ) AS d
)
SELECT q.queue,
       least(coalesce(p.due, 0), :cap::int)::bigint AS due,
       least(coalesce(p.scheduled, 0), :cap::int)::bigint AS scheduled,
       (SELECT count(*) FROM (SELECT 1 FROM jobs AS j
                              WHERE j.status = 'running' AND j.queue = q.queue
                              LIMIT :cap::int) AS r)::bigint AS running,
       (SELECT count(*) FROM (SELECT 1 FROM jobs AS j
                              WHERE j.status = 'waiting' AND j.queue = q.queue
                              LIMIT :cap::int) AS w)::bigint AS waiting,
       (SELECT count(*) FROM (SELECT 1 FROM jobs AS j
                              WHERE j.status = 'failed' AND j.queue = q.queue
                              LIMIT :cap::int) AS f)::bigint AS failed,
       -- A run_at of -infinity (plain SQL allows it) counts from year 1: the age stays a number.
       coalesce(EXTRACT(EPOCH FROM now() - CASE
           WHEN p.first_due_at = '-infinity' THEN timestamptz '0001-01-01 00:00:00+00'
           ELSE p.first_due_at END), 0)::float8 AS oldest_due_seconds,
       EXTRACT(EPOCH FROM now() - c.paused_at)::float8 AS paused_seconds,
       c.max_running, c.rate_limit, c.rate_period
FROM named AS q
LEFT JOIN pending AS p ON p.queue = q.queue
LEFT JOIN pgdrain_queues AS c ON c.queue = q.queue
ORDER BY q.queue

-- name: queue_known
-- Whether :queue is a queue: one set before (pgdrain_queues) or one a job names. A queue no job
-- names is read through the whole table (there is no index by queue): for operators only.
SELECT EXISTS (SELECT 1 FROM pgdrain_queues WHERE queue = :queue::text)
       OR EXISTS (SELECT 1 FROM jobs WHERE queue = :queue::text) AS known

-- name: queue_pause
-- Pause :queue: a claim that starts after this commits takes none of its jobs. Pausing a paused
-- queue keeps the first paused_at. Returns the queue's state.
INSERT INTO pgdrain_queues AS q (queue, paused_at, updated_at)
VALUES (:queue::text, now(), now())
ON CONFLICT (queue) DO UPDATE
SET paused_at = coalesce(q.paused_at, now()), updated_at = now()
RETURNING q.queue, q.paused_at

-- name: queue_resume
-- Resume :queue: claims take its jobs again (a queue never set has no row: nothing to do).
UPDATE pgdrain_queues
SET paused_at = NULL, updated_at = now()
WHERE queue = :queue::text

-- name: queue_set
-- Set :queue's cap (:max_running, NULL for none) if :set_cap, its rate limit (:rate_limit per
-- :rate_period seconds, NULL for none) if :set_rate, creating its row if needed; what is not
-- set stays. The rate window's recorded starts stay too: a lower rate applies at once to the
-- starts already made. Returns the queue's state.
INSERT INTO pgdrain_queues AS q (queue, max_running, rate_limit, rate_period, updated_at)
VALUES (:queue::text, :max_running::int, :rate_limit::int, :rate_period::float8, now())
ON CONFLICT (queue) DO UPDATE
SET max_running = CASE WHEN :set_cap::bool THEN EXCLUDED.max_running ELSE q.max_running END,
    rate_limit  = CASE WHEN :set_rate::bool THEN EXCLUDED.rate_limit ELSE q.rate_limit END,
    rate_period = CASE WHEN :set_rate::bool THEN EXCLUDED.rate_period ELSE q.rate_period END,
    updated_at  = now()
RETURNING q.queue, q.paused_at, q.max_running, q.rate_limit, q.rate_period

-- name: queue_states
-- Every queue set at run time, with when it was paused (NULL: it runs).
SELECT queue, paused_at, EXTRACT(EPOCH FROM now() - paused_at)::float8 AS paused_seconds,
       max_running, rate_limit, rate_period
FROM pgdrain_queues
ORDER BY queue

-- name: schedule_declare
-- The drain's declared schedule entries replace the last declaration: each is written (with
-- when), and an entry no longer declared is removed. Returns how many were removed.
WITH given AS (
    SELECT * FROM unnest(:names::text[], :crons::text[], :tzs::text[], :job_types::text[],
                         :queues::text[]) AS g(name, cron, tz, job_type, queue)
), gone AS (
    DELETE FROM pgdrain_schedule_declarations AS d
    WHERE d.name <> ALL (:names::text[])
    RETURNING d.name
), written AS (
    INSERT INTO pgdrain_schedule_declarations AS d (name, cron, tz, job_type, queue,
                                                    declared_at)
    SELECT name, cron, tz, job_type, queue, now() FROM given
    ON CONFLICT (name) DO UPDATE
    SET cron = EXCLUDED.cron, tz = EXCLUDED.tz, job_type = EXCLUDED.job_type,
        queue = EXCLUDED.queue, declared_at = now()
    RETURNING d.name
)
SELECT (SELECT count(*) FROM gone)::int AS removed, (SELECT count(*) FROM written)::int AS declared

-- name: schedule_list
-- Every schedule entry the drains declared, stored (`pgdrain.schedule(conn, ...)`) or the
-- database has a tick of, with the database's clock (`pgdrain schedules`): its declaration
-- (cron, zone, type, queue, when a drain last declared it; none: removed, or never declared
-- since this table came), or what a stored one enqueues, its pause and next tick; and its
-- latest tick and job.
SELECT now() AS now, COALESCE(d.name, s.name) AS name, s.source,
       COALESCE(d.cron, s.cron) AS cron, CASE WHEN d.name IS NULL THEN s.tz ELSE d.tz END AS tz,
       COALESCE(d.job_type, s.job_type) AS job_type,
       COALESCE(d.queue, s.options ->> 'queue') AS queue, d.declared_at, s.payload, s.options,
       s.next_tick, s.paused_at, s.created_at, s.updated_at, s.last_tick, s.last_job_id
FROM (SELECT 1) AS clock
LEFT JOIN (pgdrain_schedule_declarations AS d
           FULL JOIN pgdrain_schedules AS s ON s.name = d.name) ON true
ORDER BY COALESCE(d.name, s.name)

-- name: schedule_states
-- The database's clock, and the latest tick enqueued of each named schedule entry (none for
-- an entry never seen), and whose the row is (a stored entry's name is not the declared
-- one's to tick). One read a drain pass, only when schedules are declared.
SELECT now() AS now, s.name, s.last_tick, s.last_job_id, s.source
FROM (SELECT 1) AS clock
LEFT JOIN pgdrain_schedules AS s ON s.name = ANY(:names::text[])

-- name: schedule_stored_delete
-- Delete the stored schedule entry :name (a declared entry's row is not one). Its jobs already
-- enqueued stay. Returns the row if there was one.
DELETE FROM pgdrain_schedules
WHERE name = :name::text AND source = 'stored'
RETURNING name

-- name: schedule_stored_due
-- The stored schedule entries whose next tick has come, earliest first, at most :limit: one
-- range of pgdrain_schedules_next_tick_idx (paused and declared entries are not in it),
-- however many entries wait for a later tick. With the database's clock.
SELECT now() AS now, name, cron, tz, job_type, payload, options, next_tick, last_tick
FROM pgdrain_schedules
WHERE next_tick <= now()
ORDER BY next_tick
LIMIT :limit::int

-- name: schedule_stored_get
-- The database's clock, and the stored schedule entry :name (none: no such stored entry), and
-- whether a drain declared an entry of that name.
SELECT now() AS now, s.name, s.cron, s.tz, s.job_type, s.payload, s.options, s.next_tick,
       s.paused_at, s.created_at, s.updated_at, s.last_tick, s.last_job_id,
       EXISTS (SELECT 1 FROM pgdrain_schedule_declarations AS d WHERE d.name = :name::text)
           AS declared
FROM (SELECT 1) AS clock
LEFT JOIN pgdrain_schedules AS s ON s.name = :name::text AND s.source = 'stored'

-- name: schedule_stored_pause
-- Pause the stored schedule entry :name: it has no next tick until it is resumed (a paused
-- one keeps its first pause's time). Returns the row if there is one.
UPDATE pgdrain_schedules
SET paused_at = COALESCE(paused_at, now()), next_tick = NULL, updated_at = now()
WHERE name = :name::text AND source = 'stored'
RETURNING name, cron, tz, job_type, payload, options, next_tick, paused_at, created_at,
          updated_at, last_tick, last_job_id

-- name: schedule_stored_resume
-- Resume the paused stored schedule entry :name with its next tick :next_tick (pgdrain
-- computed it from the cron it read, :cron in :tz: an entry changed since is left as it is,
-- and the caller reads it again). Returns the row if it was resumed.
UPDATE pgdrain_schedules
SET paused_at = NULL, next_tick = :next_tick::timestamptz, updated_at = now()
WHERE name = :name::text AND source = 'stored' AND paused_at IS NOT NULL
  AND cron = :cron::text AND tz IS NOT DISTINCT FROM :tz::text
RETURNING name, cron, tz, job_type, payload, options, next_tick, paused_at, created_at,
          updated_at, last_tick, last_job_id

-- name: schedule_stored_set
-- Create or change the stored schedule entry :name, in one statement. Its next tick: kept when
-- the cron and zone stay (a new payload or queue changes no time); else :first_tick (a tick at
-- most a minute old, or the next one: what pgdrain computed as a new entry's first), unless
-- that tick was already taken (last_tick), then :after_now, the first tick after now. A paused
-- entry stays paused (its next tick comes with its resume). A name a drain declared, or whose
-- row is a declared entry's still declared, is not taken: then nothing is returned.
INSERT INTO pgdrain_schedules AS s (name, source, cron, tz, job_type, payload, options,
                                    next_tick, created_at, updated_at)
SELECT :name::text, 'stored', :cron::text, :tz::text, :job_type::text, :payload::jsonb,
       :options::jsonb, :first_tick::timestamptz, now(), now()
WHERE NOT EXISTS (SELECT 1 FROM pgdrain_schedule_declarations AS d WHERE d.name = :name::text)
ON CONFLICT (name) DO UPDATE
SET source = 'stored', cron = EXCLUDED.cron, tz = EXCLUDED.tz, job_type = EXCLUDED.job_type,
    payload = EXCLUDED.payload, options = EXCLUDED.options,
    next_tick = CASE
        WHEN s.paused_at IS NOT NULL THEN NULL
        WHEN s.source = 'stored' AND s.cron = EXCLUDED.cron
             AND s.tz IS NOT DISTINCT FROM EXCLUDED.tz THEN s.next_tick
        WHEN s.last_tick IS NOT NULL AND s.last_tick >= EXCLUDED.next_tick
             THEN :after_now::timestamptz
        ELSE EXCLUDED.next_tick END,
    created_at = CASE WHEN s.source = 'stored' THEN s.created_at ELSE now() END,
    updated_at = now()
WHERE s.source = 'stored'
   OR NOT EXISTS (SELECT 1 FROM pgdrain_schedule_declarations AS d WHERE d.name = s.name)
RETURNING s.name, s.cron, s.tz, s.job_type, s.payload, s.options, s.next_tick, s.paused_at,
          s.created_at, s.updated_at, s.last_tick, s.last_job_id, (s.xmax = 0) AS created

-- name: schedule_stored_take_tick
-- Take :tick of the stored entry :name for this transaction, as schedule_take_tick does a
-- declared one's: move last_tick to it and next_tick to :next_tick, only if the entry still
-- waits for :seen_next (the next tick this drain read). A drain racing on the same tick waits
-- for this one's commit, then finds next_tick moved and gets nothing; so does a drain that read
-- the entry before it was changed, paused or deleted (nothing is inserted: a deleted entry
-- stays deleted). Returns the row only if this transaction moved it.
UPDATE pgdrain_schedules
SET last_tick = :tick::timestamptz, next_tick = :next_tick::timestamptz, updated_at = now()
WHERE name = :name::text AND source = 'stored' AND next_tick = :seen_next::timestamptz
RETURNING name

-- name: schedule_take_tick
-- Take :tick of the entry :name for this transaction: move last_tick forward to it, or insert
-- the entry's row. Returns the row only if this transaction moved it: a drain racing on the same
-- tick waits for this one's commit, then finds last_tick already there and gets nothing. A
-- stored entry's row (pgdrain.schedule(conn, ...)) of the same name is never a declared one's.
INSERT INTO pgdrain_schedules AS s (name, last_tick, updated_at)
VALUES (:name::text, :tick::timestamptz, now())
ON CONFLICT (name) DO UPDATE
SET last_tick = EXCLUDED.last_tick, updated_at = now()
WHERE s.last_tick < EXCLUDED.last_tick AND s.source = 'declared'
RETURNING s.name

-- name: schedule_tick_enqueued
-- Record the job enqueued for the entry's tick (for `pgdrain schedules`).
UPDATE pgdrain_schedules SET last_job_id = :job_id::bigint WHERE name = :name::text

-- name: signal_keep
-- Send the signal :name: kept with its payload until :keep_seconds from now (a later send
-- replaces the payload; the longer retention wins), for the jobs that wait for it later.
-- Written before signal_wake, in the sender's transaction, under the row's lock: a job
-- entering its wait for it (job_wait_batch) either wrote its row first (signal_wake then sees
-- it waiting) or waits for this transaction and sees the signal sent. In REPEATABLE READ or
-- SERIALIZABLE, a wait that committed after the transaction's snapshot makes this raise a
-- serialization failure: retried, the transaction sees it.
INSERT INTO pgdrain_signals AS s (name, payload, sent_at, expires_at)
VALUES (:name::text, :payload::jsonb, now(), now() + make_interval(secs => :keep_seconds::float8))
ON CONFLICT (name) DO UPDATE
SET payload    = EXCLUDED.payload,
    sent_at    = EXCLUDED.sent_at,
    expires_at = greatest(s.expires_at, EXCLUDED.expires_at)
RETURNING s.expires_at

-- name: signal_wake
-- Every job waiting for the signal :name (through jobs_waiting_signal_idx), due now with its
-- payload (wait_result), locked in id order. Run after signal_keep, as its own statement: its
-- snapshot then includes the waits that committed while signal_keep waited for their row.
-- A job the janitor timed out first is no longer waiting, and left as it is.
UPDATE jobs AS j
SET status      = 'pending',
    run_at      = now(),
    wait_signal = NULL,
    wait_result = jsonb_build_object('name', s.name, 'payload', s.payload,
                                     'received', true, 'at', s.sent_at),
    updated_at  = now()
FROM pgdrain_signals AS s
WHERE s.name = :name::text
  AND j.id = ANY(ARRAY(
      SELECT id
      FROM jobs
      WHERE status = 'waiting' AND wait_signal = :name::text
      ORDER BY id
      FOR UPDATE))
RETURNING j.id

-- name: transaction_begin
-- Open a transaction on a connection pgdrain owns (pg8000's native API autocommits).
BEGIN

-- name: transaction_bounds
-- Bound each statement of this transaction (a transactional handler's), and the time it may
-- sit idle between them (the handler's Python runs while it is open), by :milliseconds. A
-- handler stopped by its time limit mid-statement has its connection dropped, and the server
-- would otherwise run that statement on, holding its row locks against the job's retry; a
-- drain cut off by a partition leaves the transaction idle, and the server ends it at this
-- bound instead of holding its locks for hours. Transaction-local.
SELECT set_config('statement_timeout', :milliseconds::int::text, true) AS statement_timeout,
       set_config('idle_in_transaction_session_timeout', :milliseconds::int::text, true)
           AS idle_in_transaction_session_timeout

-- name: transaction_commit
-- Commit it.
COMMIT

-- name: transaction_rollback
-- Roll it back.
ROLLBACK

-- name: waiter_listen
-- Listen for the notifications of finished jobs that someone waits for (waiters_woken), on a
-- connection outside any transaction (pgdrain.wait): they arrive between statements.
LISTEN pgdrain_wait

-- name: waiter_register
-- Say that this backend waits for job :id (pgdrain_waiters: the finishing statements notify
-- it), and read the job's status in the same statement (NULL: no such job). A finish whose
-- statement began before this one commits sees no waiter and notifies nobody: the waiter
-- reads the status again within a second (waiter_status). A row this backend left (a wait
-- cut short before it could delete it) stands: DO NOTHING needs no UPDATE privilege.
WITH registered AS (
    INSERT INTO pgdrain_waiters (job_id, pid)
    VALUES (:id::bigint, pg_backend_pid())
    ON CONFLICT (job_id, pid) DO NOTHING
)
SELECT (SELECT status FROM jobs WHERE id = :id::bigint) AS status

-- name: waiter_status
-- A waited job's status, by its primary key (NULL: gone): what a waiter reads when notified,
-- and at most once a second otherwise.
SELECT (SELECT status FROM jobs WHERE id = :id::bigint) AS status

-- name: waiter_unlisten
-- Stop listening (pgdrain.wait returns): a backend that listens and never reads would hold
-- back the server's notification queue.
UNLISTEN pgdrain_wait

-- name: waiter_unregister
-- This backend no longer waits for job :id.
DELETE FROM pgdrain_waiters WHERE job_id = :id::bigint AND pid = pg_backend_pid()

-- name: waiters_forget_dead
-- The janitor's: forget waiters whose backend is gone (killed mid-wait, the connection cut)
-- or that registered longer ago than any wait lasts (:max_seconds; a backend id reused by
-- then waits for nothing here), so that their jobs' finishes stop notifying. Only when
-- pgdrain_waiters has a row (janitor_try_lock's `waiters`). Returns how many.
WITH forgotten AS (
    DELETE FROM pgdrain_waiters AS w
    WHERE w.since < now() - make_interval(secs => :max_seconds::float8)
       OR NOT EXISTS (SELECT FROM pg_stat_activity AS a WHERE a.pid = w.pid)
    RETURNING 1
)
SELECT count(*)::int AS forgotten FROM forgotten
