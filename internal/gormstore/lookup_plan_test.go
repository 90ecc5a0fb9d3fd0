package gormstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/antifatigue/gate/internal/gate"
)

// TestPostgresLookupsByIDProbe loads 60,000 ledger rows and as many check
// answers into the partitions of now, then asks PostgreSQL how it would run
// each statement of the hot path that reads a batch of ids: every populated
// partition must be read through an index of its id, never scanned whole
// (asked as "key" = ANY(256 ids), a partition with more pages than the batch
// had ids was scanned: 6 ms a batch at 50,000 rows) nor walked in decision
// order (ORDER BY decided_at LIMIT 1 did that for every id: 100-400 ms a
// batch in the soak), nor read by parallel workers.
func TestPostgresLookupsByIDProbe(t *testing.T) {
	s := MustOpen(t, postgresOptions(t))
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, q := range []string{
		`INSERT INTO decisions ("key", outcome, decided_at) SELECT 'k-' || i, 'forward', $1::timestamptz FROM generate_series(1, 60000) i`,
		`INSERT INTO check_answers (id, answer, decided_at) SELECT 'k-' || i, '{}', $1::timestamptz FROM generate_series(1, 60000) i`,
	} {
		if _, err := s.sqlDB.ExecContext(ctx, q, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.sqlDB.ExecContext(ctx, `ANALYZE decisions, check_answers`); err != nil {
		t.Fatal(err)
	}
	var populated []string
	for _, table := range []string{"decisions", "check_answers"} {
		rows, err := s.sqlDB.QueryContext(ctx, `SELECT DISTINCT tableoid::regclass::text FROM `+table)
		if err != nil {
			t.Fatal(err)
		}
		var parts []string
		if err := scanStrings(rows, &parts); err != nil {
			t.Fatal(err)
		}
		populated = append(populated, parts...)
	}
	keys := make([]string, 256)
	recs := make([]gate.Record, len(keys))
	for i := range keys {
		keys[i] = fmt.Sprintf("k-%d", 59_000+i) // half of them held, half new
		recs[i] = record(keys[i], "disk", gate.OutcomeForward, now)
	}
	statements := []struct {
		name string
		sql  string
		args []any
	}{
		{"Decided", decidedPostgres, []any{keys}},
		{"the claim's lookup", claimedKeys, []any{keys}},
		{"the commit in one round trip", commitAtOnce, columnsOf(recs, false).freshArgs()},
		{"Answers", answersPostgres, []any{keys}},
		{"SaveAll", saveAnswers, []any{keys, make([]string, len(keys)), make([]time.Time, len(keys))}},
	}
	for _, st := range statements {
		rows, err := s.sqlDB.QueryContext(ctx, "EXPLAIN "+st.sql, append([]any{pgx.QueryExecModeExec}, st.args...)...)
		if err != nil {
			t.Fatalf("%s: explain: %v", st.name, err)
		}
		var lines []string
		if err := scanStrings(rows, &lines); err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		t.Logf("%s:\n%s", st.name, plan)
		for _, p := range populated {
			if strings.Contains(plan, "Seq Scan on "+p+" ") {
				t.Errorf("%s scans %s whole; want one probe of its id index per id", st.name, p)
			}
		}
		for _, bad := range []string{"decided_at_idx", "Parallel"} {
			if strings.Contains(plan, bad) {
				t.Errorf("%s: plan has %q; want one probe of an id index per id", st.name, bad)
			}
		}
	}
}

// scanStrings reads rows of one text column into out, and closes rows.
func scanStrings(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close() error
}, out *[]string) error {
	defer rows.Close()
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return err
		}
		*out = append(*out, v)
	}
	return rows.Err()
}
