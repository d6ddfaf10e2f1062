-- What a job produced and how far it got: result, the handler's return value as JSON (written
-- with done, capped by PGDRAIN_RESULT_MAX_BYTES); progress, a long handler's latest report
-- ({"fraction": 0.4, "message": "3 of 7 files"}), written by its drain while it runs. NULL when
-- the handler returned None or never reported; adding nullable columns rewrites nothing.
ALTER TABLE jobs ADD COLUMN result jsonb;
ALTER TABLE jobs ADD COLUMN progress jsonb;
