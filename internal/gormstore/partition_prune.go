package gormstore

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// prunePartitions is retention on PostgreSQL for t: it makes the partitions
// ahead (a prune runs often enough for that), detaches every range partition
// whose rows are all older than cutoff, each in a short transaction of its
// own, drops it in a second one, and deletes in batches (batch rows a
// statement, between in between) the rows older than cutoff that the
// default partition and the legacy one, while it stays, hold. Retention so
// rounds up to a whole partition. It returns the rows deleted, those of the
// partitions dropped as the catalog estimates them. A partition detached
// and not dropped (a failure between the two) is dropped by the next run.
func (s *Store) prunePartitions(ctx context.Context, t partTable, cutoff time.Time, batch int, between func() error) (int64, error) {
	op := "prune " + t.name
	if err := s.ensureTable(ctx, t, time.Now()); err != nil {
		// A failure to make partitions ahead must not stop retention: rows
		// meanwhile go to the default partition.
		s.log.WarnContext(ctx, "making partitions ahead failed; rows go to the default partition meanwhile", "table", t.name, "err", err)
	}
	parts, err := s.partitions(ctx, t)
	if err != nil {
		return 0, unavailable(op, err)
	}
	var total int64
	for _, p := range parts {
		if p.isDef || !p.hasHigh || p.hi.After(cutoff) {
			continue
		}
		rows := s.estimate(ctx, p.name)
		start := time.Now()
		if err := s.ddl(ctx, fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s`, t.name, p.name)); err != nil {
			return total, unavailable(op, err)
		}
		detached := time.Since(start)
		if err := s.ddl(ctx, `DROP TABLE IF EXISTS `+p.name); err != nil {
			return total, unavailable(op, err)
		}
		s.log.InfoContext(ctx, "dropped a partition past retention", "table", t.name, "partition", p.name,
			"rows", rows, "detach", detached, "drop", time.Since(start)-detached)
		total += rows
	}
	if err := s.dropDetached(ctx, t, cutoff); err != nil {
		return total, unavailable(op, err)
	}
	for _, p := range parts {
		if !p.isDef && p.hasLow {
			continue
		}
		if !p.isDef && p.hasHigh && !p.hi.After(cutoff) {
			continue // dropped above
		}
		n, err := s.deleteInBatches(ctx, op, fmt.Sprintf(`DELETE FROM %s WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM %s WHERE decided_at < ? ORDER BY decided_at LIMIT ?))`, p.name, p.name), batch, between, s.dbTime(cutoff))
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// estimate is the catalog's row count of table (0 when unknown).
func (s *Store) estimate(ctx context.Context, table string) int64 {
	var n float64
	if err := s.sqlDB.QueryRowContext(ctx, `SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)`, table).Scan(&n); err != nil || n < 0 {
		return 0
	}
	return int64(n)
}

// dropDetached drops t's partitions left detached by a run that failed
// between its detach and its drop: tables named as t's partitions, no
// longer attached, whose range ended before cutoff (a table another gate
// has just created, to attach it, is younger).
func (s *Store) dropDetached(ctx context.Context, t partTable, cutoff time.Time) error {
	rows, err := s.sqlDB.QueryContext(ctx, `SELECT c.relname FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND NOT c.relispartition
	AND (starts_with(c.relname, $1) OR c.relname = $2)`, t.name+"_p", t.name+"_legacy")
	if err != nil {
		return err
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, n := range names {
		if rest, ok := strings.CutPrefix(n, t.name+"_p"); ok {
			lo, err := time.Parse("200601021504", rest)
			if err != nil || lo.Add(s.span(t)).After(cutoff) {
				continue
			}
		}
		if err := s.ddl(ctx, `DROP TABLE IF EXISTS `+n); err != nil {
			return err
		}
	}
	return nil
}
