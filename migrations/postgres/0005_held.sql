-- 0005_held: messages held for later (on_exceed defer and digest, quiet
-- hours with action defer) and what became of them (PostgreSQL).

-- One row per held message, written in the transaction that records its
-- decision and deleted in the one that settles it (released, fell back,
-- carried by a digest). payload is bytea: the original bytes are forwarded
-- untouched, whatever their encoding.
CREATE TABLE held (
    message_id text        PRIMARY KEY,
    kind       text        NOT NULL,
    recipient  text        NOT NULL,
    queue      text        NOT NULL,
    scene      text        NOT NULL,
    priority   text        NOT NULL DEFAULT '',
    tz         text        NOT NULL DEFAULT '',
    seq        bigint      NOT NULL,
    held_at    timestamptz NOT NULL,
    due_at     timestamptz NOT NULL,
    expires_at timestamptz NULL,
    fallback   text        NOT NULL DEFAULT '',
    reason     text        NOT NULL DEFAULT '',
    payload    bytea       NOT NULL DEFAULT ''::bytea
);

-- A queue's oldest messages, in the order they arrived.
CREATE INDEX held_queue_seq_idx ON held (recipient, queue, seq);

-- One row per queue that holds messages: the row the releaser locks (FOR
-- UPDATE SKIP LOCKED) so that one gate alone settles a queue, and a commit
-- into the queue waits for it. due_at and head_seq are those of the queue's
-- oldest message.
CREATE TABLE held_queues (
    recipient text        NOT NULL,
    queue     text        NOT NULL,
    due_at    timestamptz NOT NULL,
    head_seq  bigint      NOT NULL,
    PRIMARY KEY (recipient, queue)
);

-- The releaser's question: which queues are due now, soonest first.
CREATE INDEX held_queues_due_idx ON held_queues (due_at);

-- The audit row of a held message says how it was held and, once settled,
-- what became of it.
ALTER TABLE suppressions ADD COLUMN held_as    text        NOT NULL DEFAULT '';
ALTER TABLE suppressions ADD COLUMN settled    text        NOT NULL DEFAULT '';
ALTER TABLE suppressions ADD COLUMN settled_at timestamptz NULL;
ALTER TABLE suppressions ADD COLUMN fallback   text        NOT NULL DEFAULT '';
ALTER TABLE suppressions ADD COLUMN digest_id  text        NOT NULL DEFAULT '';

-- Held when decided (deferred, digested) and settled later (released,
-- fell_back), in the order of gate.SceneSummary's counters.
ALTER TABLE scene_counters ADD COLUMN deferred  bigint NOT NULL DEFAULT 0;
ALTER TABLE scene_counters ADD COLUMN digested  bigint NOT NULL DEFAULT 0;
ALTER TABLE scene_counters ADD COLUMN released  bigint NOT NULL DEFAULT 0;
ALTER TABLE scene_counters ADD COLUMN fell_back bigint NOT NULL DEFAULT 0;
