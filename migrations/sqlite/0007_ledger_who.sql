-- 0007_ledger_who: the ledger keeps, with each decided key, the message's
-- scene, recipient, priority and time zone. A refund needs them to find the
-- windows a forward counted in, and a rule preview to replay the decisions
-- of a period against another document. Empty for invalid messages and for
-- rows written before. Nothing reads them by value in the hot path, so they
-- get no index: a preview reads a range of decided_at, which has one.
ALTER TABLE decisions ADD COLUMN scene TEXT NOT NULL DEFAULT '';
ALTER TABLE decisions ADD COLUMN recipient TEXT NOT NULL DEFAULT '';
ALTER TABLE decisions ADD COLUMN priority TEXT NOT NULL DEFAULT '';
ALTER TABLE decisions ADD COLUMN tz TEXT NOT NULL DEFAULT '';
