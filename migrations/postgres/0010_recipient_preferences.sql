-- 0010_recipient_preferences: what each recipient asked of the gate
-- (issue 12): scenes muted (until muted_until, when set) and scenes
-- collected into digests, shared by every gate.

-- One row per recipient that ever had preferences. The lists are JSON
-- arrays of scene names. updated_at is the database's clock at the write
-- (clock_timestamp(), not the transaction's start), so gates poll their
-- changes on one clock; a DELETE keeps the row as a tombstone (deleted,
-- empty lists), so that the other gates see the change and drop what they
-- cached.
CREATE TABLE recipient_preferences (
    recipient    text        PRIMARY KEY,
    muted_scenes text        NOT NULL DEFAULT '[]',
    muted_until  timestamptz NULL,
    digest_only  text        NOT NULL DEFAULT '[]',
    deleted      boolean     NOT NULL DEFAULT false,
    updated_at   timestamptz NOT NULL
);

-- The gates' poll: the changes since the last one they saw.
CREATE INDEX recipient_preferences_updated_idx ON recipient_preferences (updated_at);
