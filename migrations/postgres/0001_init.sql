-- 0001_init: the audit store of the notification gate (PostgreSQL).
-- Times are timestamptz written in UTC with microsecond precision.

-- One row per suppressed message, or, in shadow mode, per message that
-- enforcement would have suppressed.
CREATE TABLE suppressions (
    id              bigserial   PRIMARY KEY,
    message_id      text        NOT NULL UNIQUE,
    scene           text        NOT NULL,
    recipient       text        NOT NULL,
    priority        text        NOT NULL DEFAULT '',
    limit_scope     text        NOT NULL DEFAULT '',
    limit_window_ms bigint      NOT NULL DEFAULT 0,
    limit_max       integer     NOT NULL DEFAULT 0,
    count_seen      integer     NOT NULL DEFAULT 0,
    shadow          boolean     NOT NULL DEFAULT false,
    reason          text        NOT NULL DEFAULT '',
    rules_version   text        NOT NULL DEFAULT '',
    decided_at      timestamptz NOT NULL,
    next_allowed_at timestamptz NULL,
    payload         text        NULL
);

-- The report lists rows newest first, optionally by scene or recipient, and
-- pages with a (decided_at, id) keyset: each index serves one of those scans.
CREATE INDEX suppressions_decided_idx   ON suppressions (decided_at DESC, id DESC);
CREATE INDEX suppressions_scene_idx     ON suppressions (scene, decided_at DESC, id DESC);
CREATE INDEX suppressions_recipient_idx ON suppressions (recipient, decided_at DESC, id DESC);

-- Per-scene hourly counters: the summary report sums them over a range of
-- hours. hour is the UTC start of the hour.
CREATE TABLE scene_counters (
    scene             text        NOT NULL,
    hour              timestamptz NOT NULL,
    received          bigint      NOT NULL DEFAULT 0,
    forwarded         bigint      NOT NULL DEFAULT 0,
    suppressed        bigint      NOT NULL DEFAULT 0,
    dropped           bigint      NOT NULL DEFAULT 0,
    invalid           bigint      NOT NULL DEFAULT 0,
    shadow_suppressed bigint      NOT NULL DEFAULT 0,
    shadow_dropped    bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (scene, hour)
);

-- Summaries select a range of hours across all scenes.
CREATE INDEX scene_counters_hour_idx ON scene_counters (hour);

-- The idempotency ledger: a key present here was committed once and is
-- never counted or audited again. Rows older than the retention are pruned.
CREATE TABLE decisions (
    "key"      text        PRIMARY KEY,
    outcome    text        NOT NULL,
    decided_at timestamptz NOT NULL
);

CREATE INDEX decisions_decided_at_idx ON decisions (decided_at);
