-- 0015_held_cancel_key: held messages a producer may cancel (PostgreSQL).
--
-- A message may name what it is about (its cancel_key): while it is held
-- (deferred, or collected for a digest), a cancel of that key (gate.cancel,
-- POST /v1/cancel, or a later message that resolves it) takes it back, and
-- its audit row says settled "cancelled". '' when it names none, as every
-- row written before has. Few held messages name one, and a cancel looks
-- only those up, by key and then recipient: a partial index.
ALTER TABLE held ADD COLUMN cancel_key text NOT NULL DEFAULT '';
CREATE INDEX held_cancel_key_idx ON held (cancel_key, recipient) WHERE cancel_key <> '';

-- The summary's cancelled counter, in the hour of the cancel: held
-- messages taken back, not part of received (they were counted when held).
ALTER TABLE scene_counters ADD COLUMN cancelled bigint NOT NULL DEFAULT 0;
