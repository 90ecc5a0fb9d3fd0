-- 0014_released_forwards: the outbox of held messages let out (SQLite).
-- See the PostgreSQL migration of the same name for why.
CREATE TABLE released_forwards (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id    TEXT    NOT NULL UNIQUE,
    recipient     TEXT    NOT NULL,
    queue         TEXT    NOT NULL,
    scene         TEXT    NOT NULL,
    rules_version TEXT    NOT NULL DEFAULT '',
    shadow_of     TEXT    NOT NULL DEFAULT '',
    bypass        INTEGER NOT NULL DEFAULT 0,
    deferred_from TEXT    NULL
        CHECK (deferred_from GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z'),
    digest_count  INTEGER NOT NULL DEFAULT 0,
    payload       BLOB    NOT NULL DEFAULT X'',
    released_at   TEXT    NOT NULL
        CHECK (released_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z')
);
CREATE INDEX released_forwards_queue_idx ON released_forwards (recipient, queue);
