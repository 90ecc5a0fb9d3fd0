-- 0011_check_answers: the first answer to every synchronous check
-- (POST /v1/check, gate.check), so that the same id asked again gets it
-- again. The ledger (decisions) holds the id too; rows are pruned with the
-- ledger's retention.
CREATE TABLE check_answers (
    id         TEXT NOT NULL PRIMARY KEY,
    answer     TEXT NOT NULL,
    decided_at TEXT NOT NULL
        CHECK (decided_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z')
);

CREATE INDEX check_answers_decided_at_idx ON check_answers (decided_at);
