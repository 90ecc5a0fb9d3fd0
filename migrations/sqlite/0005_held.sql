-- 0005_held: messages held for later (on_exceed defer and digest, quiet
-- hours with action defer) and what became of them (SQLite). The same
-- schema as postgres/0005_held.sql, times as fixed-width UTC TEXT.

-- One row per held message, written in the transaction that records its
-- decision and deleted in the one that settles it (released, fell back,
-- carried by a digest). payload is a BLOB: the original bytes are forwarded
-- untouched.
CREATE TABLE held (
    message_id TEXT    NOT NULL PRIMARY KEY,
    kind       TEXT    NOT NULL,
    recipient  TEXT    NOT NULL,
    queue      TEXT    NOT NULL,
    scene      TEXT    NOT NULL,
    priority   TEXT    NOT NULL DEFAULT '',
    tz         TEXT    NOT NULL DEFAULT '',
    seq        INTEGER NOT NULL,
    held_at    TEXT    NOT NULL
        CHECK (held_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z'),
    due_at     TEXT    NOT NULL
        CHECK (due_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z'),
    expires_at TEXT    NULL
        CHECK (expires_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z'),
    fallback   TEXT    NOT NULL DEFAULT '',
    reason     TEXT    NOT NULL DEFAULT '',
    payload    BLOB    NOT NULL DEFAULT X''
);

-- A queue's oldest messages, in the order they arrived.
CREATE INDEX held_queue_seq_idx ON held (recipient, queue, seq);

-- One row per queue that holds messages. SQLite serializes writing
-- transactions (BEGIN IMMEDIATE), so the row is no lock here; it keeps
-- due_at and head_seq of the queue's oldest message, as on PostgreSQL.
CREATE TABLE held_queues (
    recipient TEXT    NOT NULL,
    queue     TEXT    NOT NULL,
    due_at    TEXT    NOT NULL
        CHECK (due_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z'),
    head_seq  INTEGER NOT NULL,
    PRIMARY KEY (recipient, queue)
);

-- The releaser's question: which queues are due now, soonest first.
CREATE INDEX held_queues_due_idx ON held_queues (due_at);

-- The audit row of a held message says how it was held and, once settled,
-- what became of it.
ALTER TABLE suppressions ADD COLUMN held_as    TEXT NOT NULL DEFAULT '';
ALTER TABLE suppressions ADD COLUMN settled    TEXT NOT NULL DEFAULT '';
ALTER TABLE suppressions ADD COLUMN settled_at TEXT NULL
    CHECK (settled_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z');
ALTER TABLE suppressions ADD COLUMN fallback   TEXT NOT NULL DEFAULT '';
ALTER TABLE suppressions ADD COLUMN digest_id  TEXT NOT NULL DEFAULT '';

-- Held when decided (deferred, digested) and settled later (released,
-- fell_back), in the order of gate.SceneSummary's counters.
ALTER TABLE scene_counters ADD COLUMN deferred  INTEGER NOT NULL DEFAULT 0;
ALTER TABLE scene_counters ADD COLUMN digested  INTEGER NOT NULL DEFAULT 0;
ALTER TABLE scene_counters ADD COLUMN released  INTEGER NOT NULL DEFAULT 0;
ALTER TABLE scene_counters ADD COLUMN fell_back INTEGER NOT NULL DEFAULT 0;
