-- 0013_ledger_body_hash: the ledger keeps, with each message's key, a short
-- hash of its body (the first 8 bytes of its SHA-256, gate.BodyHash), so
-- that a message published again under a known id after GATE_IN's
-- duplicate window can be told apart: the same body is a producer's retry,
-- another body a second message that took the first's outcome, which the
-- gate counts (gate_duplicate_body_mismatch_total) and logs. 0 for checks,
-- invalid messages and rows written before; a gate of an older version
-- still running writes 0 too. Nothing reads it by value, so no index.
ALTER TABLE decisions ADD COLUMN body_hash INTEGER NOT NULL DEFAULT 0;
