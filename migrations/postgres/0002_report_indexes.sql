-- 0002_report_indexes: what the report page's queries need (PostgreSQL).

-- Top recipients counts rows per recipient over a range of decided times:
-- this index holds every column that query reads, so it is answered by an
-- index-only scan of the range instead of a scan of the whole table.
CREATE INDEX suppressions_decided_recipient_idx ON suppressions (decided_at, recipient, shadow);
