package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// On PostgreSQL the ledger (decisions), the audit rows (suppressions) and
// the stored check answers (check_answers) are declarative partitions by
// RANGE (decided_at), so that retention detaches and drops whole tables
// instead of deleting rows one by one. Each has a default partition (rows
// outside every range: a clock far off, a gap in the partitions made ahead)
// and, after the switch from an unpartitioned table (partition_switch.go),
// that table as <t>_legacy, the partition of everything before the switch.
//
// The audit rows are cut every partition width (Options.PartitionWidth).
// The ledger and the check answers are looked up by id on every message, with
// no time to bound the lookup by: each of their partitions costs every lookup
// one index probe. They are cut in spans of the ledger's retention (rounded
// up to the width), so a lookup reads two indexes that hold rows (this
// span's and the last) however long the retention and however fine the
// width; a key is kept between one and two retentions.

// Partition widths: the default, and the finest accepted.
const (
	DefaultPartitionWidth = 24 * time.Hour
	MinPartitionWidth     = 10 * time.Minute
)

// CheckPartitionWidth reports whether w can cut the partitions: a whole
// number of minutes, from MinPartitionWidth to a day, that divides a day
// evenly, so that every gate's boundaries fall on the same UTC instants.
func CheckPartitionWidth(w time.Duration) error {
	const day = 24 * time.Hour
	if w < MinPartitionWidth || w > day || w%time.Minute != 0 || day%w != 0 {
		return fmt.Errorf("partition width %s: want a whole number of minutes from %s to 24h that divides a day evenly (10m, 15m, 30m, 1h, 2h, 6h, 24h, …)",
			w, MinPartitionWidth)
	}
	return nil
}

// partTable is one partitioned table: its name, and the indexes its parent
// carries (each partition gets its own copy).
type partTable struct {
	name string
	// ledger: cut in ledger spans (looked up by id), else in widths.
	ledger bool
	// indexes are the parent's indexes (each partition gets its own copy).
	indexes []partIndex
}

// partIndex is an index of a partitioned table. old, when set, is the index
// the unpartitioned table already has with the same definition, which the
// switch's ATTACH takes over; otherwise the switch builds one beforehand.
type partIndex struct {
	suffix, columns, old string
}

var (
	decisionsTable = partTable{name: "decisions", ledger: true, indexes: []partIndex{
		{suffix: "key", columns: `("key")`},
		{suffix: "decided_at", columns: `(decided_at)`, old: "decisions_decided_at_idx"},
	}}
	suppressionsTable = partTable{name: "suppressions", indexes: []partIndex{
		{suffix: "message_id", columns: `(message_id)`},
		{suffix: "decided", columns: `(decided_at DESC, id DESC)`, old: "suppressions_decided_idx"},
		{suffix: "scene", columns: `(scene, decided_at DESC, id DESC)`, old: "suppressions_scene_idx"},
		{suffix: "recipient", columns: `(recipient, decided_at DESC, id DESC)`, old: "suppressions_recipient_idx"},
		{suffix: "decided_recipient", columns: `(decided_at, recipient, shadow)`, old: "suppressions_decided_recipient_idx"},
	}}
	checkAnswersTable = partTable{name: "check_answers", ledger: true, indexes: []partIndex{
		{suffix: "id", columns: `(id)`},
		{suffix: "decided_at", columns: `(decided_at)`, old: "check_answers_decided_at_idx"},
	}}
	partTables = []partTable{decisionsTable, suppressionsTable, checkAnswersTable}
)

// name is the parent's index: the old table's name for it, so that report
// plans and operators find the names they know, else <table>_<suffix>_idx.
func (ix partIndex) name(t partTable) string {
	if ix.old != "" {
		return ix.old
	}
	return t.name + "_" + ix.suffix + "_idx"
}

// span is the width of t's partitions.
func (s *Store) span(t partTable) time.Duration {
	if !t.ledger {
		return s.width
	}
	n := (s.retention + s.width - 1) / s.width
	return max(1, n) * s.width
}

// floorTo is t rounded down to a multiple of d since the Unix epoch (UTC).
func floorTo(t time.Time, d time.Duration) time.Time {
	ns := t.UnixNano()
	r := ns % int64(d)
	if r < 0 {
		r += int64(d)
	}
	return time.Unix(0, ns-r).UTC()
}

// partName is the name of t's partition starting at lo.
func partName(t partTable, lo time.Time) string {
	return t.name + "_p" + lo.UTC().Format("200601021504")
}

// partition is one partition of a table as the catalog describes it. lo is
// zero for MINVALUE; a default partition has neither bound.
type partition struct {
	name    string
	isDef   bool
	lo, hi  time.Time
	hasLow  bool
	hasHigh bool
}

// partitions lists t's partitions: the legacy one first, then by their
// lower bound, and the default one last, so that retention goes oldest
// first and does the same on every run.
func (s *Store) partitions(ctx context.Context, t partTable) ([]partition, error) {
	rows, err := s.sqlDB.QueryContext(ctx, `SELECT c.relname, b = 'DEFAULT',
	(regexp_match(b, 'FROM \(''([^'']+)''\)'))[1]::timestamptz,
	(regexp_match(b, 'TO \(''([^'']+)''\)'))[1]::timestamptz
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
	LATERAL pg_get_expr(c.relpartbound, c.oid) AS b
WHERE i.inhparent = to_regclass($1)
ORDER BY b = 'DEFAULT', 3 NULLS FIRST, c.relname`, t.name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []partition
	for rows.Next() {
		var (
			p      partition
			lo, hi sql.NullTime
		)
		if err := rows.Scan(&p.name, &p.isDef, &lo, &hi); err != nil {
			return nil, err
		}
		p.lo, p.hasLow = lo.Time, lo.Valid
		p.hi, p.hasHigh = hi.Time, hi.Valid
		out = append(out, p)
	}
	return out, rows.Err()
}

// partitioned reports whether t is a partitioned table already.
func (s *Store) isPartitioned(ctx context.Context, db queryer, t partTable) (bool, error) {
	var kind sql.NullString
	err := db.QueryRowContext(ctx, `SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`, t.name).Scan(&kind)
	if err != nil {
		return false, err
	}
	return kind.String == "p", nil
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// madeElsewhere reports the errors of DDL that another gate's same DDL,
// run at the same moment, gives: the partition exists, or overlaps it.
func madeElsewhere(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "42P07", "23505", "42P17", "42710", "42809": // duplicate table, catalog unique, overlap, duplicate object, already a partition
		return true
	}
	return false
}

// ensurePartitions makes the partitions of every table that cover now and
// what the gate will write until the next prune but one (at least three
// partition widths ahead), plus the default partition. A range that overlaps an existing
// partition (the legacy one, or one cut by a gate with another width) is
// skipped: its rows go to the partition that covers them, or the default.
func (s *Store) ensurePartitions(ctx context.Context, now time.Time) error {
	for _, t := range partTables {
		if err := s.ensureTable(ctx, t, now); err != nil {
			return fmt.Errorf("make partitions of %s: %w", t.name, err)
		}
	}
	return nil
}

func (s *Store) ensureTable(ctx context.Context, t partTable, now time.Time) error {
	parts, err := s.partitions(ctx, t)
	if err != nil {
		return err
	}
	span := s.span(t)
	hasDefault := false
	for _, p := range parts {
		hasDefault = hasDefault || p.isDef
	}
	if !hasDefault {
		if err := s.ddl(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s_default PARTITION OF %s DEFAULT`, t.name, t.name)); err != nil && !madeElsewhere(err) {
			return err
		}
	}
	until := now.Add(max(3*s.width, 2*s.pruneEvery))
	for lo := floorTo(now, span); lo.Before(until); lo = lo.Add(span) {
		hi := lo.Add(span)
		if overlaps(parts, lo, hi) {
			continue
		}
		if err := s.addPartition(ctx, t, lo, hi); err != nil && !madeElsewhere(err) {
			return err
		}
		parts = append(parts, partition{name: partName(t, lo), lo: lo, hi: hi, hasLow: true, hasHigh: true})
	}
	return nil
}

// overlaps reports whether [lo, hi) meets a range partition of parts.
func overlaps(parts []partition, lo, hi time.Time) bool {
	for _, p := range parts {
		if p.isDef {
			continue
		}
		if (!p.hasLow || p.lo.Before(hi)) && (!p.hasHigh || lo.Before(p.hi)) {
			return true
		}
	}
	return false
}

// addPartition creates t's partition [lo, hi) as a table of its own, then
// attaches it: ATTACH takes a lock that lets writers of the other partitions
// go on (CREATE … PARTITION OF would lock the whole table), and the default
// partition is only scanned, empty of that range as it is.
func (s *Store) addPartition(ctx context.Context, t partTable, lo, hi time.Time) error {
	name := partName(t, lo)
	if err := s.ddl(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (LIKE %s INCLUDING DEFAULTS)`, name, t.name)); err != nil {
		return err
	}
	err := s.ddl(ctx, fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
		t.name, name, lo.Format(time.RFC3339), hi.Format(time.RFC3339)))
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23514" {
			// The default partition holds rows of the range: they stay there
			// (pruned in batches), the range with them.
			s.log.WarnContext(ctx, "a partition made ahead overlaps rows of the default partition; its rows stay there",
				"table", t.name, "from", lo, "to", hi)
			return s.ddl(ctx, `DROP TABLE IF EXISTS `+name)
		}
		return err
	}
	return nil
}

// Locking DDL waits at most lockWait for its lock, so that writers queued
// behind it wait no longer, and is tried lockTries times, lockPause apart,
// before the prune gives up until its next run.
const (
	lockWait  = 50 * time.Millisecond
	lockTries = 40
	lockPause = 100 * time.Millisecond
)

// ddl runs stmt in a transaction of its own with a short lock_timeout,
// again while it times out waiting for a lock.
func (s *Store) ddl(ctx context.Context, stmt string) error {
	var err error
	for try := 0; try < lockTries; try++ {
		if err = s.ddlOnce(ctx, stmt); !lockTimeout(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(lockPause):
		}
	}
	return fmt.Errorf("%w (gave up after %d tries; next prune tries again)", err, lockTries)
}

func (s *Store) ddlOnce(ctx context.Context, stmt string) error {
	tx, err := s.sqlDB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit a no-op
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, lockWait.Milliseconds())); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("%s: %w", firstWords(stmt), err)
	}
	return tx.Commit()
}

// lockTimeout reports PostgreSQL's lock_not_available (55P03).
func lockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// firstWords is the start of a statement, for an error message.
func firstWords(stmt string) string {
	f := strings.Fields(stmt)
	return strings.Join(f[:min(len(f), 6)], " ")
}
