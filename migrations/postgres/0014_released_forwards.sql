-- 0014_released_forwards: the outbox of held messages let out (PostgreSQL).
--
-- A held message (or a digest) leaves through this table: the releaser
-- settles it and writes its forward here in the one transaction that locks
-- its queue, then publishes it after that transaction, and deletes the row
-- once gate.out stored it. A crash between the two leaves the row, which the
-- next round of any gate publishes under the same Nats-Msg-Id. A cancel
-- therefore meets each held message either still held or already settled,
-- never half way: no publish runs while a queue is locked.
--
-- seq orders the forwards as they were settled. (recipient, queue) keep the
-- queue waiting until its forwards are out, so that a new message of the
-- queue does not overtake them.
CREATE TABLE released_forwards (
    seq           bigserial   PRIMARY KEY,
    message_id    text        NOT NULL UNIQUE,
    recipient     text        NOT NULL,
    queue         text        NOT NULL,
    scene         text        NOT NULL,
    rules_version text        NOT NULL DEFAULT '',
    shadow_of     text        NOT NULL DEFAULT '',
    bypass        boolean     NOT NULL DEFAULT false,
    deferred_from timestamptz NULL,
    digest_count  integer     NOT NULL DEFAULT 0,
    payload       bytea       NOT NULL DEFAULT ''::bytea,
    released_at   timestamptz NOT NULL
);
CREATE INDEX released_forwards_queue_idx ON released_forwards (recipient, queue);
