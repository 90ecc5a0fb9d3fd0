-- 0002_report_indexes: what the report page's queries need (SQLite).
-- The same index as postgres/0002_report_indexes.sql.

-- Top recipients counts rows per recipient over a range of decided times:
-- this index holds every column that query reads (a covering index).
CREATE INDEX suppressions_decided_recipient_idx ON suppressions (decided_at, recipient, shadow);
