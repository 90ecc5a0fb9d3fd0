package gormstore

import (
	"context"
	"crypto/md5"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/antifatigue/gate/internal/gate"
)

// TestPostgresLookupsByIDProbe loads 30,000 ledger rows and as many check
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
	// Rows as wide as the gate's, with random ids, and a partition of the
	// size where a scan looks cheaper to the planner than 256 probes (at
	// 100,000 rows or sequential ids it probes even when asked with = ANY).
	for _, q := range []string{
		`INSERT INTO decisions ("key", outcome, decided_at, scene, recipient, priority, tz)
		SELECT 'k-' || md5(i::text), 'forward', $1::timestamptz, 'alert.disk_full', 'open_id:ou_' || md5(i::text), 'normal', 'Asia/Shanghai'
		FROM generate_series(1, 30000) i`,
		`INSERT INTO check_answers (id, answer, decided_at)
		SELECT 'k-' || md5(i::text), '{"decision":"suppress","admitted":false,"limit":{"scope":"scene","window":"1h","max":1},"count":1,"next_allowed_at":"2026-11-28T14:00:00Z","rules_version":"` + "sha256:' || md5(i::text) || '" + `","reason":"limit"}', $1::timestamptz
		FROM generate_series(1, 30000) i`,
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
		// Half of them held, half new; random, as message ids are.
		keys[i] = fmt.Sprintf("k-%x", md5.Sum([]byte(strconv.Itoa(29_872+i))))
		recs[i] = record(keys[i], "disk", gate.OutcomeForward, now)
	}
	statements := []struct {
		name string
		sql  string
		args []any
	}{
		{"Decided", decidedPostgres, []any{keys}},
		{"the claim's lookup", claimedKeys, []any{keys}},
		{"the commit in one round trip", commitAtOnce(everyPart), columnsOf(recs, false).freshArgs(everyPart)},
		{"Answers", answersPostgres, []any{keys}},
		{"SaveAll", saveAnswers, []any{keys, make([]string, len(keys)), make([]time.Time, len(keys))}},
	}
	for _, st := range statements {
		// The gate prepares these statements, and PostgreSQL may plan
		// them once for any ids (a generic plan): both plans must probe.
		for _, mode := range []string{"auto", "force_generic_plan"} {
			plan := explain(t, s, mode, st.sql, st.args)
			t.Logf("%s (plan_cache_mode %s):\n%s", st.name, mode, plan)
			checkProbes(t, st.name+" ("+mode+")", plan, populated)
		}
	}
}

// explain is PostgreSQL's plan of text with args, prepared under the
// plan_cache_mode mode.
func explain(t *testing.T, s *Store, mode, text string, args []any) string {
	t.Helper()
	ctx := context.Background()
	tx, err := s.sqlDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // read only
	if _, err := tx.ExecContext(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.QueryContext(ctx, "EXPLAIN "+text, append([]any{pgx.QueryExecModeCacheStatement}, args...)...)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	var lines []string
	if err := scanStrings(rows, &lines); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// checkProbes fails when plan reads one of the populated partitions other
// than by probing an index of its id.
func checkProbes(t *testing.T, name, plan string, populated []string) {
	t.Helper()
	for _, p := range populated {
		if strings.Contains(plan, "Seq Scan on "+p+" ") {
			t.Errorf("%s scans %s whole; want one probe of its id index per id", name, p)
		}
	}
	for _, bad := range []string{"decided_at_idx", "Parallel"} {
		if strings.Contains(plan, bad) {
			t.Errorf("%s: plan has %q; want one probe of an id index per id", name, bad)
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

// TestCommitShapesPrepare has PostgreSQL parse and plan the commit statement
// of every shape, fresh and at once, and run the shape of claims alone:
// a part left out must not leave the others pointing at it.
func TestCommitShapesPrepare(t *testing.T) {
	s := MustOpen(t, postgresOptions(t))
	ctx := context.Background()
	conn, err := s.sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for shape := range everyPart + 1 {
		for _, q := range []string{commitFresh(shape), commitAtOnce(shape)} {
			if _, err := conn.ExecContext(ctx, "PREPARE p AS "+q); err != nil {
				t.Fatalf("shape %03b: %v\n%s", shape, err, q)
			}
			if _, err := conn.ExecContext(ctx, "DEALLOCATE p"); err != nil {
				t.Fatal(err)
			}
		}
	}
	recs := []gate.Record{{Key: "k1", Outcome: gate.OutcomeForward, Scene: "s", Recipient: "open_id:u", At: time.Now()}}
	cols := columnsOf(recs, false)
	if shape := cols.shape(); shape != 0 {
		t.Fatalf("a forward alone: shape %03b, want 0", shape)
	}
	var hits, wrote int64
	if err := conn.QueryRowContext(ctx, commitAtOnce(0), cols.freshArgs(0)...).Scan(&hits, &wrote); err != nil || hits != 0 || wrote != 1 {
		t.Fatalf("claims alone: hits %d, wrote %d, %v; want 0, 1", hits, wrote, err)
	}
}
