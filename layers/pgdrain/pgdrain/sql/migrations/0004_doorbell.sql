-- The doorbell's shared state: one row. A ring (an asynchronous invoke of the drain after an
-- enqueue commits) stamps rung_at; a drain stamps drain_started_at as soon as it holds its
-- slot. While rung_at is newer than drain_started_at (and younger than the ringer's window),
-- a drain is on its way that has not yet claimed: it will see every job committed before its
-- first claim, so another ring is not needed. See pgdrain.aws.doorbell.
CREATE TABLE pgdrain_doorbell (
    singleton        boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    rung_at          timestamptz,
    drain_started_at timestamptz
);
INSERT INTO pgdrain_doorbell DEFAULT VALUES;
