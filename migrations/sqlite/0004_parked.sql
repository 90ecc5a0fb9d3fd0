-- Messages parked on the dead letter after exhausting GATE_MAX_DELIVER
-- deliveries: received, never decided.
ALTER TABLE scene_counters ADD COLUMN parked INTEGER NOT NULL DEFAULT 0;
