package gormstore

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The live switch from the unpartitioned tables the migrations make (and
// every gate before partitions kept) to partitioned ones, at start, under an
// advisory lock so that of several gates starting at once one switches and
// the others wait, then find it done. No row is copied: the old table
// becomes the first partition, <t>_legacy, covering everything before a
// boundary ahead of now. An older gate may go on writing meanwhile; its
// writes wait at most for the last step's short transaction.
//
//  1. build, CONCURRENTLY, the indexes the partitioned table has and the old
//     one lacks, so that ATTACH takes them over instead of building them
//     under its lock;
//  2. add CHECK (decided_at < boundary) NOT VALID, then VALIDATE it (a scan
//     that lets writes go on), so that ATTACH need not scan;
//  3. in one short transaction: rename the old table to <t>_legacy, create
//     the partitioned table with its indexes, drop the legacy table's unique
//     indexes (uniqueness is the claim's lock now, see commit_postgres.go),
//     attach it FROM (MINVALUE) TO (boundary).
//
// A table of fewer than smallTable rows skips steps 1 and 2: its ATTACH
// scans it and builds its indexes at once (a new database, a test).

// smallTable is the size below which the switch is one transaction.
var smallTable = 10000

// switchLock keys the session advisory lock the switch runs under, by schema
// as the migrations' lock is.
const switchLock = `pg_advisory_lock(1734440038, hashtext(coalesce(current_schema(), '')))`

// legacyUnique are the unique constraints of the old tables that the
// partitioned ones cannot keep (their unique indexes would have to hold
// decided_at): dropped from the legacy partition at the switch.
var legacyUnique = map[string][]string{
	"decisions":     {"decisions_pkey"},
	"suppressions":  {"suppressions_message_id_key"},
	"check_answers": {"check_answers_pkey"},
}

// partitionUp switches every table still unpartitioned, then makes the
// partitions ahead.
func (s *Store) partitionUp(ctx context.Context, now time.Time) error {
	todo := false
	for _, t := range partTables {
		done, err := s.isPartitioned(ctx, s.sqlDB, t)
		if err != nil {
			return unavailable("read partitioning", err)
		}
		todo = todo || !done
	}
	if todo {
		if err := s.switchAll(ctx, now); err != nil {
			return err
		}
	}
	if err := s.ensurePartitions(ctx, now); err != nil {
		return unavailable("partitions ahead", err)
	}
	return nil
}

// switchAll holds the switch's lock on a connection of its own while it
// switches each table that is still unpartitioned.
func (s *Store) switchAll(ctx context.Context, now time.Time) error {
	conn, err := s.sqlDB.Conn(ctx)
	if err != nil {
		return unavailable("switch to partitions", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT `+switchLock); err != nil {
		return unavailable("switch to partitions: lock", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock_all()`) //nolint:errcheck // closing the session unlocks too
	for _, t := range partTables {
		done, err := s.isPartitioned(ctx, conn, t)
		if err != nil {
			return unavailable("switch to partitions", err)
		}
		if done {
			continue
		}
		start := time.Now()
		if err := s.switchTable(ctx, t, now); err != nil {
			return unavailable("switch "+t.name+" to partitions", err)
		}
		s.log.InfoContext(ctx, "audit store table switched to partitions", "table", t.name, "took", time.Since(start))
	}
	return nil
}

// switchTable runs the three steps above on t.
func (s *Store) switchTable(ctx context.Context, t partTable, now time.Time) error {
	span := s.span(t)
	// Ahead of now by an hour at least, so that an older gate still
	// writing, its clock a little ahead, meets the CHECK of step 2 never.
	boundary := floorTo(now.Add(max(time.Hour, span)), span).Add(span)
	var n int
	if err := s.sqlDB.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %s LIMIT %d) x`, t.name, smallTable)).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		// Nothing to keep, and nobody can write into it unseen: the ATTACH
		// below scans it under its lock. The range partitions start now.
		boundary = floorTo(now, span)
	}
	check := t.name + "_switch_range"
	if n >= smallTable {
		for _, ix := range t.indexes {
			if ix.old != "" {
				continue
			}
			if err := s.buildConcurrently(ctx, t.name+"_l_"+ix.suffix, t.name, ix.columns); err != nil {
				return err
			}
		}
		if err := s.ddl(ctx, fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT IF EXISTS %s`, t.name, check)); err != nil {
			return err
		}
		if err := s.ddl(ctx, fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT %s CHECK (decided_at < '%s') NOT VALID`,
			t.name, check, boundary.Format(time.RFC3339))); err != nil {
			return err
		}
		if _, err := s.sqlDB.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE %s VALIDATE CONSTRAINT %s`, t.name, check)); err != nil {
			return fmt.Errorf("validate %s: %w", check, err)
		}
	}
	legacy := t.name + "_legacy"
	stmts := []string{
		fmt.Sprintf(`ALTER TABLE %s RENAME TO %s`, t.name, legacy),
		fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS) PARTITION BY RANGE (decided_at)`, t.name, legacy),
	}
	for _, ix := range t.indexes {
		if ix.old != "" {
			stmts = append(stmts, fmt.Sprintf(`ALTER INDEX %s RENAME TO %s_legacy_%s`, ix.old, t.name, ix.suffix))
		}
		stmts = append(stmts, fmt.Sprintf(`CREATE INDEX %s ON %s %s`, ix.name(t), t.name, ix.columns))
	}
	for _, c := range legacyUnique[t.name] {
		stmts = append(stmts, fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT IF EXISTS %s`, legacy, c))
	}
	stmts = append(stmts,
		fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (MINVALUE) TO ('%s')`, t.name, legacy, boundary.Format(time.RFC3339)),
		fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT IF EXISTS %s`, legacy, check))
	if t.name == "suppressions" {
		// The id sequence belongs to the new table, or dropping the legacy
		// partition one day would drop it.
		stmts = append(stmts, `ALTER SEQUENCE suppressions_id_seq OWNED BY suppressions.id`)
	}
	return s.ddl(ctx, strings.Join(stmts, ";\n"))
}

// buildConcurrently makes index name on table, without blocking its
// writers. An invalid index of that name (a build cut short) is dropped and
// built again.
func (s *Store) buildConcurrently(ctx context.Context, name, table, columns string) error {
	var valid *bool
	err := s.sqlDB.QueryRowContext(ctx, `SELECT (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1))`, name).Scan(&valid)
	if err != nil {
		return err
	}
	if valid != nil && *valid {
		return nil
	}
	if valid != nil {
		if _, err := s.sqlDB.ExecContext(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+name); err != nil {
			return fmt.Errorf("drop invalid index %s: %w", name, err)
		}
	}
	if _, err := s.sqlDB.ExecContext(ctx, fmt.Sprintf(`CREATE INDEX CONCURRENTLY %s ON %s %s`, name, table, columns)); err != nil {
		return fmt.Errorf("build index %s: %w", name, err)
	}
	return nil
}
