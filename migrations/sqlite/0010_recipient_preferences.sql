-- 0010_recipient_preferences: what each recipient asked of the gate
-- (issue 12): scenes muted (until muted_until, when set) and scenes
-- collected into digests (SQLite).

-- One row per recipient that ever had preferences. The lists are JSON
-- arrays of scene names; times are fixed-width UTC text, updated_at from
-- the database's clock at the write. A DELETE keeps the row as a tombstone
-- (deleted = 1, empty lists), so that every reader sees the change.
CREATE TABLE recipient_preferences (
    recipient    TEXT    PRIMARY KEY,
    muted_scenes TEXT    NOT NULL DEFAULT '[]',
    muted_until  TEXT    NULL,
    digest_only  TEXT    NOT NULL DEFAULT '[]',
    deleted      INTEGER NOT NULL DEFAULT 0,
    updated_at   TEXT    NOT NULL
);

-- The gates' poll: the changes since the last one they saw.
CREATE INDEX recipient_preferences_updated_idx ON recipient_preferences (updated_at);
