-- 0011_check_answers: the first answer to every synchronous check
-- (POST /v1/check, gate.check), so that the same id asked again gets it
-- again. The ledger (decisions) holds the id too; rows are pruned with the
-- ledger's retention.
CREATE TABLE check_answers (
    id         text        PRIMARY KEY,
    answer     text        NOT NULL,
    decided_at timestamptz NOT NULL
);

CREATE INDEX check_answers_decided_at_idx ON check_answers (decided_at);
