-- 0008_limit_rate: the audit row of a message held back by a rate limit
-- ({rate: 1/10m, burst: 3}) names its emission interval in ms (10m here);
-- its limit_max is the burst and its limit_window_ms 0, so without it the
-- row could not say what it counted. 0 for window and calendar limits and
-- for rows written before.
ALTER TABLE suppressions ADD COLUMN limit_rate_ms bigint NOT NULL DEFAULT 0;
