-- 0001_init: the audit store of the notification gate (SQLite).
-- The same schema as postgres/0001_init.sql. SQLite has no time type: every
-- time is TEXT in one fixed-width UTC format, 'YYYY-MM-DDTHH:MM:SS.ffffffZ'
-- (microseconds, always six digits), so comparing the text compares the
-- times. The CHECKs keep any other spelling out.

-- One row per suppressed message, or, in shadow mode, per message that
-- enforcement would have suppressed.
CREATE TABLE suppressions (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id      TEXT    NOT NULL UNIQUE,
    scene           TEXT    NOT NULL,
    recipient       TEXT    NOT NULL,
    priority        TEXT    NOT NULL DEFAULT '',
    limit_scope     TEXT    NOT NULL DEFAULT '',
    limit_window_ms INTEGER NOT NULL DEFAULT 0,
    limit_max       INTEGER NOT NULL DEFAULT 0,
    count_seen      INTEGER NOT NULL DEFAULT 0,
    shadow          INTEGER NOT NULL DEFAULT 0 CHECK (shadow IN (0, 1)),
    reason          TEXT    NOT NULL DEFAULT '',
    rules_version   TEXT    NOT NULL DEFAULT '',
    decided_at      TEXT    NOT NULL
        CHECK (decided_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z'),
    next_allowed_at TEXT    NULL
        CHECK (next_allowed_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z'),
    payload         TEXT    NULL
);

-- The report lists rows newest first, optionally by scene or recipient, and
-- pages with a (decided_at, id) keyset: each index serves one of those scans.
CREATE INDEX suppressions_decided_idx   ON suppressions (decided_at DESC, id DESC);
CREATE INDEX suppressions_scene_idx     ON suppressions (scene, decided_at DESC, id DESC);
CREATE INDEX suppressions_recipient_idx ON suppressions (recipient, decided_at DESC, id DESC);

-- Per-scene hourly counters: the summary report sums them over a range of
-- hours. hour is the UTC start of the hour, in the same text format.
CREATE TABLE scene_counters (
    scene             TEXT    NOT NULL,
    hour              TEXT    NOT NULL
        CHECK (hour GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:00:00.000000Z'),
    received          INTEGER NOT NULL DEFAULT 0,
    forwarded         INTEGER NOT NULL DEFAULT 0,
    suppressed        INTEGER NOT NULL DEFAULT 0,
    dropped           INTEGER NOT NULL DEFAULT 0,
    invalid           INTEGER NOT NULL DEFAULT 0,
    shadow_suppressed INTEGER NOT NULL DEFAULT 0,
    shadow_dropped    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (scene, hour)
);

-- Summaries select a range of hours across all scenes.
CREATE INDEX scene_counters_hour_idx ON scene_counters (hour);

-- The idempotency ledger: a key present here was committed once and is
-- never counted or audited again. Rows older than the retention are pruned.
CREATE TABLE decisions (
    "key"      TEXT NOT NULL PRIMARY KEY,
    outcome    TEXT NOT NULL,
    decided_at TEXT NOT NULL
        CHECK (decided_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z')
);

CREATE INDEX decisions_decided_at_idx ON decisions (decided_at);
