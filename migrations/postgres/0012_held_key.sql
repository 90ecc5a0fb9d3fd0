-- 0012_held_key: held keyed by how it is read (PostgreSQL).
--
-- Every read of held is a queue's oldest messages in order (Settle, and
-- the head a settled queue keeps), and every change names a message that
-- Settle has just read, queue and sequence included. So the primary key is
-- (recipient, queue, seq, message_id), which those reads walk in order,
-- and the two indexes it replaces go: the primary key on message_id and
-- held_queue_seq_idx. A held message now costs one index entry instead of
-- two. message_id ends the key so that two messages never collide, even
-- when one stream sequence comes back (a GATE_IN stream made anew).
--
-- The table is made anew and its rows copied in one transaction, under the
-- migration lock: the rows keep their queues and sequences, so they are
-- released in the same order as before. A gate of an older version still
-- running fails its deferring batches while this runs and after (its
-- INSERT names the old key): they are retried, and nothing is lost, until
-- it is restarted on this version.
CREATE TABLE held_keyed (
    message_id text        NOT NULL,
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
    payload    bytea       NOT NULL DEFAULT ''::bytea,
    CONSTRAINT held_keyed_pkey PRIMARY KEY (recipient, queue, seq, message_id)
);

LOCK TABLE held IN ACCESS EXCLUSIVE MODE;
INSERT INTO held_keyed (message_id, kind, recipient, queue, scene, priority, tz, seq, held_at, due_at, expires_at, fallback, reason, payload)
SELECT message_id, kind, recipient, queue, scene, priority, tz, seq, held_at, due_at, expires_at, fallback, reason, payload
FROM held;
DROP TABLE held;
ALTER TABLE held_keyed RENAME TO held;
ALTER TABLE held RENAME CONSTRAINT held_keyed_pkey TO held_pkey;

-- held and held_queues take a row per held message or queue and lose it
-- when it is settled: vacuum them after 2 % of their rows changed rather
-- than PostgreSQL's default of 20 %, so that a deferring gate's tables stay
-- small while a backlog of releases is worked off.
ALTER TABLE held SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE held_queues SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
