-- 0012_held_key: held keyed by how it is read (SQLite). The same change as
-- postgres/0012_held_key.sql: the primary key (recipient, queue, seq,
-- message_id) replaces the one on message_id and held_queue_seq_idx. The
-- table is made anew and its rows copied, in the migration's transaction.
CREATE TABLE held_keyed (
    message_id TEXT    NOT NULL,
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
    payload    BLOB    NOT NULL DEFAULT X'',
    PRIMARY KEY (recipient, queue, seq, message_id)
);

INSERT INTO held_keyed (message_id, kind, recipient, queue, scene, priority, tz, seq, held_at, due_at, expires_at, fallback, reason, payload)
SELECT message_id, kind, recipient, queue, scene, priority, tz, seq, held_at, due_at, expires_at, fallback, reason, payload
FROM held;
DROP TABLE held;
ALTER TABLE held_keyed RENAME TO held;
