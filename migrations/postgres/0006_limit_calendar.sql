-- 0006_limit_calendar: the audit row of a message held back by a calendar
-- limit ({calendar: day|week, max: N}) names the period, "day" or "week";
-- its limit_window_ms is 0, so without it the row could not say what it
-- counted in. Empty for rolling limits and for rows written before.
ALTER TABLE suppressions ADD COLUMN limit_calendar text NOT NULL DEFAULT '';
