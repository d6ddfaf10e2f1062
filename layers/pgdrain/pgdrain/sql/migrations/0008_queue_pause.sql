-- Per-queue state an operator changes at run time. A queue needs no row: a queue without one
-- runs with the defaults. paused_at set: no claim that starts after the pause commits takes
-- the queue's jobs (`pgdrain pause`, POST /queues/{queue}/pause); enqueueing goes on, jobs
-- already running finish. The claim reads the paused queues once per statement: with none
-- paused, an empty scan of this (tiny) table.
CREATE TABLE pgdrain_queues (
    queue      text PRIMARY KEY CHECK (queue <> '' AND length(queue) <= 200),
    paused_at  timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
