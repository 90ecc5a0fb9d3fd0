package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/antifatigue/gate/internal/gate"
)

// explainRows is how many suppression rows TestPostgresExplainReports
// loads: a year of a busy gate is in this order.
const explainRows = 1_000_000

// TestPostgresExplainReports loads a million suppression rows spread over
// 90 days (and the hourly counters of 20 scenes over the same days) into a
// fresh schema, then checks with EXPLAIN that every report query the store
// runs (the page's, the API's and retention's) uses the index meant for it,
// and never scans the suppressions table whole. The plans are logged.
func TestPostgresExplainReports(t *testing.T) {
	s := MustOpen(t, postgresOptions(t))
	ctx := context.Background()
	start := time.Now()
	loadExplainData(t, s)
	t.Logf("loaded %d suppression rows and their counters in %s", explainRows, time.Since(start).Round(time.Millisecond))

	now := explainStart.Add(90 * 24 * time.Hour)
	week, day := now.Add(-7*24*time.Hour), now.Add(-24*time.Hour)
	cursor := encodeCursor(now.Add(-3*time.Hour), 1<<40)
	cases := []struct {
		name  string
		run   func(ctx context.Context) error
		index string // the index the plan must scan; several are separated by "|"
	}{
		{"suppressions, last 7 days", func(ctx context.Context) error {
			_, err := s.Suppressions(ctx, gate.SuppressionFilter{Since: week, Until: now})
			return err
		}, "suppressions_decided_idx"},
		{"suppressions, next page", func(ctx context.Context) error {
			_, err := s.Suppressions(ctx, gate.SuppressionFilter{Since: week, Until: now, Cursor: cursor})
			return err
		}, "suppressions_decided_idx"},
		{"suppressions of one scene", func(ctx context.Context) error {
			_, err := s.Suppressions(ctx, gate.SuppressionFilter{Scene: "scene07", Since: week, Until: now})
			return err
		}, "suppressions_scene_idx"},
		{"suppressions of one recipient (why didn't I get it?)", func(ctx context.Context) error {
			_, err := s.Suppressions(ctx, gate.SuppressionFilter{Recipient: "open_id:ou_hot3", Since: week, Until: now})
			return err
		}, "suppressions_recipient_idx"},
		{"top recipients, last 24 hours", func(ctx context.Context) error {
			_, err := s.TopRecipients(ctx, day, now, 10)
			return err
		}, "suppressions_decided_recipient_idx"},
		{"top recipients, last 7 days", func(ctx context.Context) error {
			_, err := s.TopRecipients(ctx, week, now, 10)
			return err
		}, "suppressions_decided_recipient_idx"},
		{"summary, last 7 days", func(ctx context.Context) error {
			_, err := s.Summary(ctx, week, now)
			return err
		}, "scene_counters_hour_idx"},
		{"timeseries, last 7 days", func(ctx context.Context) error {
			_, err := s.Timeseries(ctx, week, now, "")
			return err
		}, "scene_counters_hour_idx"},
		{"timeseries of one scene, last 7 days", func(ctx context.Context) error {
			_, err := s.Timeseries(ctx, week, now, "scene07")
			return err
		}, "scene_counters_pkey|scene_counters_hour_idx"},
		{"retention: one batch of rows older than 80 days", func(ctx context.Context) error {
			_, err := s.PruneSuppressions(ctx, now.Add(-80*24*time.Hour))
			return err
		}, "suppressions_decided_idx"},
	}
	capture := captureStatements(t, s)
	scanRE := regexp.MustCompile(`(Index Scan|Index Only Scan|Bitmap Index Scan)( Backward)?( using| on) (\w+)`)
	for _, tc := range cases {
		stmt := capture(func() { _ = tc.run(ctx) })
		// EXPLAIN ANALYZE runs the statement: a DELETE is only planned.
		explain := "EXPLAIN (ANALYZE, BUFFERS) "
		if strings.HasPrefix(strings.TrimSpace(stmt.sql), "DELETE") {
			explain = "EXPLAIN "
		}
		plan := queryPlan(t, s, explain+stmt.sql, stmt.vars)
		var used []string
		for _, m := range scanRE.FindAllStringSubmatch(plan, -1) {
			used = append(used, parentIndex(t, s, m[4]))
		}
		t.Logf("%s: indexes %v, %s\n%s\n%s", tc.name, used, planTime(plan), stmt.sql, plan)
		if !slices.ContainsFunc(strings.Split(tc.index, "|"), func(ix string) bool { return slices.Contains(used, ix) }) {
			t.Errorf("%s: plan scans %v, want %s:\n%s", tc.name, used, tc.index, plan)
		}
		for _, table := range []string{"suppressions", "scene_counters"} {
			if strings.Contains(plan, "Seq Scan on "+table) {
				t.Errorf("%s: plan reads all of %s (Seq Scan):\n%s", tc.name, table, plan)
			}
		}
	}
	t.Logf("whole test took %s", time.Since(start).Round(time.Millisecond))
}

// explainStart is when the loaded data begins, on the hour.
var explainStart = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// loadExplainData fills the store as 90 days of a busy gate would, in time
// order as the gate writes them: 20 scenes; recipients mostly spread over
// 50,000 people, with 100 who get one suppression in ten. The indexes are
// dropped during the load and built again from their own definitions (the
// migrations'), which is several times faster than maintaining them row by
// row. ANALYZE gives the planner the statistics it would have in
// production; VACUUM sets the visibility map that index-only scans need.
func loadExplainData(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var defs []string
		if err := tx.Raw(`SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema()
	AND tablename = 'suppressions' AND indexname LIKE 'suppressions\_%\_idx'`).Scan(&defs).Error; err != nil {
			return err
		}
		if len(defs) < 4 {
			return errors.New("found fewer than 4 report indexes on suppressions")
		}
		var names []string
		if err := tx.Raw(`SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()
	AND tablename = 'suppressions' AND indexname LIKE 'suppressions\_%\_idx'`).Scan(&names).Error; err != nil {
			return err
		}
		stmts := []string{`SET LOCAL synchronous_commit = off`, `SET LOCAL maintenance_work_mem = '128MB'`}
		for _, n := range names {
			stmts = append(stmts, `DROP INDEX `+n)
		}
		stmts = append(stmts, `INSERT INTO suppressions (message_id, scene, recipient, priority, limit_scope,
	limit_window_ms, limit_max, count_seen, shadow, reason, rules_version, decided_at, next_allowed_at, payload)
SELECT 'm' || i,
	'scene' || lpad((i % 20)::text, 2, '0'),
	CASE WHEN i % 10 = 0 THEN 'open_id:ou_hot' || (i / 10 % 100) ELSE 'open_id:ou_' || (i::bigint * 7919 % 50000) END,
	'normal', 'scene', 3600000, 1, 1, i % 50 = 0, 'limit', 'v1',
	$1::timestamptz + (i * interval '90 days' / $2::int),
	$1::timestamptz + (i * interval '90 days' / $2::int) + interval '1 hour',
	'{"text":"disk /data is ' || (i % 100) || '% full on host-' || (i % 300) || '"}'
FROM generate_series(1, $2::int) AS i`,
			`INSERT INTO scene_counters (scene, hour, received, forwarded, suppressed, dropped)
SELECT 'scene' || lpad(sc::text, 2, '0'), $1::timestamptz + h * interval '1 hour', 40, 30, 8, 2
FROM generate_series(0, 90 * 24 - 1) AS h, generate_series(0, 19) AS sc
ORDER BY h, sc`)
		for _, d := range defs {
			// A partitioned table's index reads "ON ONLY": built so, it
			// would cover no partition.
			stmts = append(stmts, strings.Replace(d, " ON ONLY ", " ON ", 1))
		}
		for _, q := range stmts {
			var args []any
			if strings.Contains(q, "$1") {
				args = []any{explainStart}
				if strings.Contains(q, "$2") {
					args = append(args, explainRows)
				}
			}
			if _, err := tx.Statement.ConnPool.ExecContext(ctx, q, args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	vacuumUntilVisible(t, s)
}

// vacuumUntilVisible runs VACUUM ANALYZE until the visibility map covers
// every page of the loaded tables, as it does on a settled database. VACUUM
// cannot mark a page all-visible while any session of the database holds a
// snapshot older than the page's rows (a test running beside this one, an
// autovacuum ANALYZE of another schema), and without those marks the
// planner prices index-only scans as plain index scans and picks other
// plans: under load in CI it chose a Seq Scan for retention.
func vacuumUntilVisible(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	var pages, visible int64
	for start := time.Now(); ; time.Sleep(500 * time.Millisecond) {
		if _, err := s.sqlDB.ExecContext(ctx, `VACUUM ANALYZE suppressions, scene_counters`); err != nil {
			t.Fatalf("vacuum analyze: %v", err)
		}
		err := s.sqlDB.QueryRowContext(ctx, `SELECT sum(relpages), sum(relallvisible) FROM pg_class
			WHERE oid IN (to_regclass('suppressions'), to_regclass('scene_counters'))`).Scan(&pages, &visible)
		if err != nil {
			t.Fatalf("visibility map: %v", err)
		}
		if visible >= pages {
			if d := time.Since(start); d > time.Second {
				t.Logf("VACUUM marked every page all-visible after %s", d.Round(time.Millisecond))
			}
			return
		}
		if time.Since(start) > time.Minute {
			var holders string
			_ = s.sqlDB.QueryRowContext(ctx, `SELECT coalesce(string_agg(format('pid %s (%s, %s): %s', pid, backend_type,
				state, left(query, 80)), E'\n'), '') FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()`).Scan(&holders)
			t.Fatalf("after a minute of VACUUM, %d of %d pages are all-visible; sessions holding old snapshots:\n%s", visible, pages, holders)
		}
	}
}

// statement is one SQL statement a Store method sent, with its arguments.
type statement struct {
	sql  string
	vars []any
}

var errCaptured = errors.New("statement captured, not run")

// captureStatements makes the store record, instead of running, the first
// statement a function sends: so the test explains the very SQL the store
// builds, not a copy of it.
func captureStatements(t *testing.T, s *Store) func(f func()) statement {
	t.Helper()
	var got *statement
	grab := func(db *gorm.DB) {
		if got == nil {
			got = &statement{sql: db.Statement.SQL.String(), vars: append([]any(nil), db.Statement.Vars...)}
		}
		_ = db.AddError(errCaptured)
	}
	if err := s.db.Callback().Row().Before("gorm:row").Register("test:capture_row", grab); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Callback().Raw().Before("gorm:raw").Register("test:capture_raw", grab); err != nil {
		t.Fatal(err)
	}
	return func(f func()) statement {
		t.Helper()
		got = nil
		f()
		if got == nil {
			t.Fatal("the function sent no statement")
		}
		return *got
	}
}

// queryPlan runs an EXPLAIN and returns its text.
func queryPlan(t *testing.T, s *Store, q string, vars []any) string {
	t.Helper()
	rows, err := s.sqlDB.QueryContext(context.Background(), q, vars...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line sql.NullString
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		b.WriteString(line.String + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

var execTimeRE = regexp.MustCompile(`Execution Time: [0-9.]+ ms`)

// planTime returns the execution time line of an EXPLAIN ANALYZE.
func planTime(plan string) string {
	if m := execTimeRE.FindString(plan); m != "" {
		return m
	}
	return "planned only"
}

// parentIndex is the index of the partitioned table that index, a
// partition's, is a copy of (the name the test expects), or index itself.
func parentIndex(t *testing.T, s *Store, index string) string {
	t.Helper()
	var parent string
	err := s.sqlDB.QueryRowContext(context.Background(), `SELECT coalesce((SELECT p.relname FROM pg_inherits i
	JOIN pg_class p ON p.oid = i.inhparent WHERE i.inhrelid = to_regclass($1)), $1)`, index).Scan(&parent)
	if err != nil {
		t.Fatalf("parent of index %s: %v", index, err)
	}
	return parent
}
