package gormstore

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/migrations"
)

// DefaultLedgerRetention is how long a decided key stays in the idempotency
// ledger when Options.LedgerRetention is zero: long enough to outlive any
// redelivery of the message it names.
const DefaultLedgerRetention = 7 * 24 * time.Hour

// Options configures Open.
type Options struct {
	// DatabaseURL is a postgres:// or postgresql:// URL. Empty means SQLite
	// at SQLitePath.
	DatabaseURL string
	// SQLitePath is the SQLite database file, created with its folder when
	// missing. Used only when DatabaseURL is empty.
	SQLitePath string
	// RedactPayload keeps message payloads out of suppression rows.
	RedactPayload bool
	// Logger receives migrations applied and gorm's warnings (slow
	// statements, never their arguments). Nil discards them.
	Logger *slog.Logger
	// LedgerRetention is how long Prune keeps decided keys; zero means
	// DefaultLedgerRetention. A key pruned and then seen again is counted
	// again.
	LedgerRetention time.Duration
	// PartitionWidth cuts the PostgreSQL tables' partitions (see
	// partition.go); zero means DefaultPartitionWidth. CheckPartitionWidth
	// says which widths are accepted. SQLite ignores it.
	PartitionWidth time.Duration
	// PruneInterval is how often the caller prunes, so that the partitions
	// made ahead last until the next prune; zero means an hour.
	PruneInterval time.Duration

	// unpartitioned keeps the PostgreSQL tables as the migrations make
	// them, as a gate before partitions did (tests of the switch).
	unpartitioned bool
}

// Store is the audit store. It is safe for concurrent use.
type Store struct {
	db        *gorm.DB
	sqlDB     *sql.DB
	dialect   dialect
	redact    bool
	retention time.Duration
	log       *slog.Logger
	// width and pruneEvery are Options.PartitionWidth and PruneInterval.
	width, pruneEvery time.Duration
	// partitioned: the PostgreSQL tables are partitioned (partition.go).
	partitioned bool
	// claimHook, when set, runs in a PostgreSQL claim between its lookup
	// and its insert (tests of the claim lock).
	claimHook func()

	// auditPruneRows and auditPrunePause, when set, replace
	// PruneSuppressions' batch size and pause (tests make them small).
	auditPruneRows  int
	auditPrunePause time.Duration
}

var (
	_ gate.AuditLog = (*Store)(nil)
	_ gate.Reports  = (*Store)(nil)
)

// Open connects to the database named by opts, checks that it answers and
// applies pending migrations. A database that cannot be reached gives an
// error wrapping gate.ErrUnavailable; a bad option gives one wrapping
// gate.ErrBadRequest.
func Open(ctx context.Context, opts Options) (*Store, error) {
	s := &Store{redact: opts.RedactPayload, retention: opts.LedgerRetention, log: opts.Logger,
		width: cmp.Or(opts.PartitionWidth, DefaultPartitionWidth), pruneEvery: cmp.Or(opts.PruneInterval, time.Hour)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.retention == 0 {
		s.retention = DefaultLedgerRetention
	}
	if s.retention < 0 {
		return nil, fmt.Errorf("open audit store: %w: negative ledger retention %s", gate.ErrBadRequest, s.retention)
	}
	if err := CheckPartitionWidth(s.width); err != nil {
		return nil, fmt.Errorf("open audit store: %w: %w", gate.ErrBadRequest, err)
	}
	if s.pruneEvery < 0 {
		return nil, fmt.Errorf("open audit store: %w: negative prune interval %s", gate.ErrBadRequest, s.pruneEvery)
	}
	dialector, d, err := pickDialect(opts)
	if err != nil {
		return nil, fmt.Errorf("open audit store: %w", err)
	}
	s.dialect = d
	// SkipDefaultTransaction: every write here is already inside an
	// explicit transaction, or is a single statement.
	err = retryBusy(ctx, s.log, func() (err error) {
		s.db, err = gorm.Open(dialector, &gorm.Config{
			Logger:                 newGormLogger(s.log),
			SkipDefaultTransaction: true,
			DisableAutomaticPing:   true,
		})
		if err != nil && s.db != nil && s.db.ConnPool != nil {
			if sqlDB, e := s.db.DB(); e == nil {
				sqlDB.Close() // a retry opens another
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open audit store: %w", d.openFailed(err))
	}
	if s.sqlDB, err = s.db.DB(); err != nil {
		return nil, fmt.Errorf("open audit store: %w", err)
	}
	s.dialect.pool(s.sqlDB)
	if err := s.start(ctx); err != nil {
		s.sqlDB.Close()
		return nil, fmt.Errorf("open audit store: %w", err)
	}
	if s.dialect.name == migrations.Postgres && !opts.unpartitioned {
		if err := s.partitionUp(ctx, time.Now()); err != nil {
			s.sqlDB.Close()
			return nil, fmt.Errorf("open audit store: %w", err)
		}
		s.partitioned = true
	}
	return s, nil
}

// startBusyFor bounds how long Open retries a SQLite database that another
// process holds locked while it, too, sets the database up.
const startBusyFor = 10 * time.Second

// start checks the connection and migrates.
func (s *Store) start(ctx context.Context) error {
	return retryBusy(ctx, s.log, func() error {
		if err := s.Ping(ctx); err != nil {
			return err
		}
		return s.migrate(ctx)
	})
}

// retryBusy runs step until it succeeds, fails otherwise than with
// SQLITE_BUSY, or startBusyFor passes. Several processes opening one new
// SQLite file at once meet SQLITE_BUSY before the busy timeout applies
// (switching the file to WAL takes it whole): a short pause resolves it.
func retryBusy(ctx context.Context, log *slog.Logger, step func() error) error {
	deadline := time.Now().Add(startBusyFor)
	for pause := 20 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		err := step()
		if err == nil || !isBusy(err) || time.Now().Add(pause).After(deadline) {
			return err
		}
		log.WarnContext(ctx, "audit store busy at start, retrying", "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
}

// isBusy reports a SQLite "database is locked" (SQLITE_BUSY and its
// extended codes). The driver's connection set-up reports it as text only.
func isBusy(err error) bool {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		return coded.Code()&0xff == 5
	}
	return strings.Contains(err.Error(), "(SQLITE_BUSY)")
}

// Ping checks that the database answers. Errors wrap gate.ErrUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.sqlDB.PingContext(ctx); err != nil {
		return unavailable("ping", err)
	}
	return nil
}

// Close releases the connections. The Store is unusable afterwards.
func (s *Store) Close() error {
	if err := s.sqlDB.Close(); err != nil {
		return fmt.Errorf("close audit store: %w", err)
	}
	return nil
}

// unavailable marks err, from the database or its driver, as transient.
func unavailable(op string, err error) error {
	return fmt.Errorf("%s: %w: %w", op, gate.ErrUnavailable, err)
}

// deleteInBatches runs stmt, a DELETE of at most batch rows that takes args
// then batch as its arguments, again and again until one run deletes fewer
// than batch rows, and returns how many rows it deleted in all. between, if
// not nil, runs after each full batch, before the next; an error from it
// ends the loop. Errors, the statement's and between's, are wrapped by
// unavailable(op, …).
func (s *Store) deleteInBatches(ctx context.Context, op, stmt string, batch int, between func() error, args ...any) (int64, error) {
	args = append(args[:len(args):len(args)], batch)
	var total int64
	for {
		res := s.db.WithContext(ctx).Exec(stmt, args...)
		if res.Error != nil {
			return total, unavailable(op, res.Error)
		}
		total += res.RowsAffected
		if res.RowsAffected < int64(batch) {
			return total, nil
		}
		if between != nil {
			if err := between(); err != nil {
				return total, unavailable(op, err)
			}
		}
	}
}

// classify marks err, from the database or its driver, as permanent when
// the database refused the data it was sent (see refused), and as transient
// otherwise. Only the calls that carry a message's data (Commit, Decided)
// classify: for any other, a refusal is a fault of the gate or its schema,
// which waiting out is the safer answer to.
func classify(op string, err error) error {
	if refused(err) {
		return fmt.Errorf("%s: %w: %w", op, gate.ErrPermanent, err)
	}
	return unavailable(op, err)
}

// lostSight reports whether err left a write's outcome unknown
// (gate.ErrOutcomeUnknown): PostgreSQL neither refused it (a *PgError rolls
// the transaction back) nor was it failed before anything was sent
// (pgconn.SafeToRetry) or before a connection was made. A connection lost
// while the statements or the commit were under way is: the transaction
// may have committed. SQLite runs in process, and says how each write
// ended.
func lostSight(err error) bool {
	var (
		pgErr   *pgconn.PgError
		connErr *pgconn.ConnectError
	)
	switch {
	case errors.As(err, &pgErr), errors.As(err, &connErr), pgconn.SafeToRetry(err):
		return false
	case errors.Is(err, driver.ErrBadConn):
		// database/sql found the connection broken before using it
		return false
	}
	var coded interface{ Code() int }
	return !errors.As(err, &coded)
}

// SQLite's primary result codes of a refusal of the data (an extended
// code's low byte is its primary code).
const (
	sqliteTooBig     = 18 // a string or blob over SQLITE_MAX_LENGTH
	sqliteConstraint = 19 // CHECK, NOT NULL, UNIQUE, PRIMARY KEY
	sqliteMismatch   = 20 // a value of the wrong type for a column
)

// refused reports whether err is the database refusing the values of a
// statement, so that running it again with the same values fails the same
// way. On PostgreSQL that is SQLSTATE class 22 (data exception: 22021 for
// invalid UTF-8 or a NUL byte in text, 22P05, 22001, 22003, 22008, …),
// class 23 (integrity constraint violation) and class 54 (program limit
// exceeded: 54000 for an index row over the btree limit, …). Serialization
// failures and deadlocks (class 40), lost connections, timeouts and anything
// the driver reports without a code are transient.
func refused(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:min(2, len(pgErr.Code))] {
		case "22", "23", "54":
			return true
		}
		return false
	}
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		switch coded.Code() & 0xff {
		case sqliteTooBig, sqliteConstraint, sqliteMismatch:
			return true
		}
	}
	return false
}

// badRequest marks a mistake of the caller, which retrying cannot fix.
func badRequest(op, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", op, gate.ErrBadRequest, fmt.Sprintf(format, args...))
}
