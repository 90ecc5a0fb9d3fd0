package gormstore

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/antifatigue/gate/migrations"
)

// migrate applies the migrations the database has not recorded yet, in
// version order.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations.Load(s.dialect.name)
	if err != nil {
		return err
	}
	for _, m := range ms {
		applied, err := s.apply(ctx, m)
		if err != nil {
			return fmt.Errorf("migrate %04d_%s: %w", m.Version, m.Name, err)
		}
		if applied {
			s.log.InfoContext(ctx, "audit store migrated", "dialect", s.dialect.name, "version", m.Version, "name", m.Name)
		}
	}
	return nil
}

// apply runs one migration and records it, in one transaction, unless it is
// recorded already. The check happens under the lock, so of several
// processes starting at once exactly one applies it and the others see it
// recorded.
func (s *Store) apply(ctx context.Context, m migrations.Migration) (applied bool, err error) {
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if s.dialect.migrateLock != "" {
			if err := tx.Exec(s.dialect.migrateLock).Error; err != nil {
				return fmt.Errorf("lock: %w", err)
			}
		}
		if err := tx.Exec(s.dialect.bookkeeping).Error; err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		var n int64
		if err := tx.Raw(`SELECT count(*) FROM schema_migrations WHERE version = ?`, m.Version).Scan(&n).Error; err != nil {
			return fmt.Errorf("read schema_migrations: %w", err)
		}
		if n > 0 {
			return nil
		}
		// Straight to the driver: the file is several statements, and gorm
		// would read any '?' in it as a placeholder.
		if _, err := tx.Statement.ConnPool.ExecContext(ctx, m.SQL); err != nil {
			return err
		}
		if err := tx.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.Version, m.Name, s.dbTime(time.Now())).Error; err != nil {
			return fmt.Errorf("record: %w", err)
		}
		applied = true
		return nil
	})
	return applied, err
}
