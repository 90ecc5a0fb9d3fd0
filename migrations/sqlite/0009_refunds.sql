-- 0009_refunds: a forwarded message that its sender failed to deliver is
-- refunded (POST /v1/refund, or gate.refund): taken out of the windows it
-- counted in. One row per message id, the first refund's: a second refund
-- of an id changes nothing. forwarded_at is the ledger's decided_at (or the
-- release of a deferred message); source is "api" or "nats".
CREATE TABLE refunds (
    message_id   TEXT NOT NULL PRIMARY KEY,
    scene        TEXT NOT NULL,
    recipient    TEXT NOT NULL,
    forwarded_at TEXT NOT NULL
        CHECK (forwarded_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z'),
    refunded_at  TEXT NOT NULL
        CHECK (refunded_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z'),
    source       TEXT NOT NULL CHECK (source IN ('api', 'nats'))
);

-- GET /v1/refunds lists rows newest first, optionally by scene or
-- recipient, and pages with a (refunded_at, message_id) keyset.
CREATE INDEX refunds_refunded_idx  ON refunds (refunded_at DESC, message_id DESC);
CREATE INDEX refunds_scene_idx     ON refunds (scene, refunded_at DESC, message_id DESC);
CREATE INDEX refunds_recipient_idx ON refunds (recipient, refunded_at DESC, message_id DESC);

-- The summary's refunded counter, in the hour of the refund.
ALTER TABLE scene_counters ADD COLUMN refunded INTEGER NOT NULL DEFAULT 0;
