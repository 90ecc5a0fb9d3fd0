-- 0015_held_cancel_key: held messages a producer may cancel (SQLite).
-- See the PostgreSQL migration of the same name for why.
ALTER TABLE held ADD COLUMN cancel_key TEXT NOT NULL DEFAULT '';
CREATE INDEX held_cancel_key_idx ON held (cancel_key, recipient) WHERE cancel_key <> '';

ALTER TABLE scene_counters ADD COLUMN cancelled INTEGER NOT NULL DEFAULT 0;
