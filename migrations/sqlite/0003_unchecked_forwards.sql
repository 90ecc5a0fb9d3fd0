-- Forwards made without a window check, while the window store was down
-- and the scene fails open (on_store_error: forward).
ALTER TABLE scene_counters ADD COLUMN forwarded_unchecked INTEGER NOT NULL DEFAULT 0;
