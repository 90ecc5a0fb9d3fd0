package gormstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

var _ gate.Trends = (*Store)(nil)

// Sizes of TopRecipients.
const (
	DefaultTopRecipients = 10
	MaxTopRecipients     = 1000
)

// Defaults of PruneSuppressions: rows deleted by one statement, and the
// pause between two statements, which leaves the database to the writers.
const (
	defaultAuditPruneRows  = 5000
	defaultAuditPrunePause = 100 * time.Millisecond
)

// sumCounters adds up the counter columns of scene_counters, in the order
// of gate.SceneSummary's fields. SUM of bigint is numeric on PostgreSQL; the
// casts keep it an integer on both databases.
var sumCounters = eachCounter("CAST(SUM(%s) AS BIGINT)", ", ")

// counterDests are the scan destinations of sumCounters' columns.
func counterDests(c *gate.SceneSummary) []any {
	dests := make([]any, 0, gate.NumCounters)
	for _, f := range c.Counters() {
		dests = append(dests, f)
	}
	return dests
}

// Timeseries returns the hourly counters of scene, or of every scene added
// up when scene is "", over [since, until), oldest first. Hours without
// counters are left out. The resolution is Summary's: the hour holding
// since counts whole. Until before since wraps gate.ErrBadRequest; other
// errors wrap gate.ErrUnavailable.
func (s *Store) Timeseries(ctx context.Context, since, until time.Time, scene string) ([]gate.HourSummary, error) {
	const op = "timeseries"
	if err := checkRange(since, until); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	where, args := s.hourRange(since, until)
	label := "*"
	if scene != "" {
		where = append(where, "scene = ?")
		args = append(args, scene)
		label = scene
	}
	q := `SELECT hour, ` + sumCounters + ` FROM scene_counters` + whereAll(where) + " GROUP BY hour ORDER BY hour"
	out, err := queryRows(ctx, s.db, q, args, func(rows *sql.Rows) (gate.HourSummary, error) {
		var hour scanTime
		h := gate.HourSummary{SceneSummary: gate.SceneSummary{Scene: label}}
		err := rows.Scan(append([]any{&hour}, counterDests(&h.SceneSummary)...)...)
		h.Hour = hour.t
		return h, err
	})
	if err != nil {
		return nil, unavailable(op, err)
	}
	return out, nil
}

// hourRange selects the counter hours of [since, until) at hour
// resolution; a zero time leaves that end open.
func (s *Store) hourRange(since, until time.Time) (where []string, args []any) {
	return s.timeRange("hour", since.UTC().Truncate(time.Hour), until)
}

// TopRecipients returns the recipients with the most suppression rows
// decided in [since, until), most first, ties in byte order of the
// recipient. A limit of 0 means DefaultTopRecipients; a negative one or one
// over MaxTopRecipients wraps gate.ErrBadRequest, as does until before
// since. Other errors wrap gate.ErrUnavailable.
//
// The query reads only decided_at, recipient and shadow, which
// suppressions_decided_recipient_idx covers.
func (s *Store) TopRecipients(ctx context.Context, since, until time.Time, limit int) ([]gate.RecipientCount, error) {
	const op = "top recipients"
	switch {
	case limit == 0:
		limit = DefaultTopRecipients
	case limit < 0 || limit > MaxTopRecipients:
		return nil, badRequest(op, "limit %d is not between 1 and %d", limit, MaxTopRecipients)
	}
	if err := checkRange(since, until); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	where, args := s.timeRange("decided_at", since, until)
	q := `SELECT recipient, count(*), CAST(SUM(CASE WHEN shadow THEN 1 ELSE 0 END) AS BIGINT), MAX(decided_at)
	FROM suppressions` + whereAll(where)
	// Ties go by byte order on both databases: PostgreSQL's default
	// collation would follow the locale.
	q += " GROUP BY recipient ORDER BY count(*) DESC, " + s.dialect.byteOrder + " LIMIT ?"
	args = append(args, limit)
	out, err := queryRows(ctx, s.db, q, args, scanRecipientCount)
	if err != nil {
		return nil, unavailable(op, err)
	}
	return out, nil
}

// scanRecipientCount reads one row of TopRecipients' query.
func scanRecipientCount(rows *sql.Rows) (gate.RecipientCount, error) {
	var (
		r    gate.RecipientCount
		last scanTime
	)
	err := rows.Scan(&r.Recipient, &r.Suppressed, &r.Shadow, &last)
	r.LastSuppressedAt = last.t
	return r, err
}

// PruneSuppressions deletes the audit rows decided before before, and
// returns how many it deleted. It deletes 5,000 rows to a statement and
// pauses between statements, so a large backlog never holds long locks nor
// starves the writers. The hourly counters are kept: they are figures, not
// audit rows. A failed or cancelled run leaves the rows partly pruned,
// which is fine: run it periodically. Errors wrap gate.ErrUnavailable.
func (s *Store) PruneSuppressions(ctx context.Context, before time.Time) (int64, error) {
	const op = "prune suppressions"
	if before.IsZero() {
		return 0, nil
	}
	batch, pause := s.auditPruneRows, s.auditPrunePause
	if batch <= 0 {
		batch = defaultAuditPruneRows
	}
	if pause <= 0 {
		pause = defaultAuditPrunePause
	}
	cutoff := s.dbTime(before)
	if s.dialect.pruneFirst != "" {
		if _, err := s.sqlDB.ExecContext(ctx, s.dialect.pruneFirst, cutoff); err != nil {
			return 0, unavailable(op, err)
		}
	}
	wait := func() error {
		t := time.NewTimer(pause)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	if s.partitioned {
		return s.prunePartitions(ctx, suppressionsTable, before, batch, wait)
	}
	return s.deleteInBatches(ctx, op, `DELETE FROM suppressions WHERE id IN
	(SELECT id FROM suppressions WHERE decided_at < ? LIMIT ?)`, batch, wait, cutoff)
}
