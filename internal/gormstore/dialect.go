package gormstore

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/migrations"
)

// dialect is everything that differs between the two databases beyond the
// SQL files: Open picks one, and the rest of the package reads its pieces
// instead of asking which database it talks to. The pieces are either text
// spliced into a statement shared by both, or, where PostgreSQL takes a path
// of its own (one statement of constant text over arrays, tuned for the
// gate's hot path), the function that runs it.
type dialect struct {
	name string // migrations.Postgres or migrations.SQLite
	// textTimes stores times as fixed-width UTC text instead of timestamptz.
	textTimes bool
	// migrateLock, run first in each migration's transaction, keeps
	// concurrent processes from applying one migration twice. Empty where
	// the transaction is already exclusive (SQLite's BEGIN IMMEDIATE).
	migrateLock string
	// bookkeeping creates schema_migrations.
	bookkeeping string
	// clock is the database's clock as the dialect stores a time. On
	// PostgreSQL clock_timestamp(), not now(): now() is the transaction's
	// start, and a poller must not miss a write stamped long before it
	// commits. On SQLite the text layout of textTimeLayout (SQLite's %f has
	// milliseconds; three zeros make the microseconds).
	clock string
	// lockDue ends the query of due queues: on PostgreSQL it locks them,
	// skipping those another releaser holds; SQLite's writer is alone.
	lockDue string
	// heldRead is the column list Settle reads held messages with (see
	// heldPayloadPostgres).
	heldRead string
	// byteOrder is the recipient column as ORDER BY must name it for ties
	// to go by byte order: PostgreSQL's default collation would follow the
	// locale.
	byteOrder string
	// pruneFirst, when set, runs before audit rows are pruned (see
	// sharedPayloadsBack).
	pruneFirst string

	// decided, commit and waiting run Decided's lookup, Commit's
	// transaction and Waiting's lookup on checked, non-empty input.
	decided func(s *Store, ctx context.Context, keys []string) (map[string]gate.Prior, error)
	commit  func(s *Store, ctx context.Context, recs []gate.Record) (map[string]bool, error)
	waiting func(s *Store, ctx context.Context, queues []gate.Queue, into map[gate.Queue]bool) error
	// answers runs the statement of Answers.
	answers func(s *Store, ctx context.Context, ids []string, scan func(rowSource) error) error
	// held reads the oldest perQueue messages of each queue, in Settle's
	// transaction.
	held func(s *Store, tx *gorm.DB, queues []gate.Queue, perQueue int, into map[gate.Queue][]gate.Held) error
	// pool sizes the connection pool.
	pool func(db *sql.DB)
	// openFailed classifies an error of gorm.Open.
	openFailed func(err error) error
}

// The PostgreSQL pool of one gate: what it keeps idle, and at most.
const (
	pgMaxIdleConns = 8
	pgMaxOpenConns = 16
)

var (
	postgresDialect = dialect{
		name: migrations.Postgres,
		// Keyed by schema, so databases shared by schema (tests, tenants)
		// migrate independently.
		migrateLock: `SELECT pg_advisory_xact_lock(1734440037, hashtext(coalesce(current_schema(), '')))`,
		bookkeeping: `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL
)`,
		clock:      `clock_timestamp()`,
		lockDue:    ` FOR UPDATE SKIP LOCKED`,
		heldRead:   heldNoPayload + ", " + heldPayloadPostgres,
		byteOrder:  `recipient COLLATE "C"`,
		pruneFirst: sharedPayloadsBack,
		decided:    (*Store).decidedOnPostgres,
		commit:     (*Store).commitOnPostgres,
		waiting:    (*Store).waitingOnPostgres,
		answers:    (*Store).answersOnPostgres,
		held:       (*Store).heldOnPostgres,
		pool: func(db *sql.DB) {
			// A gate talks to PostgreSQL from several goroutines at once: two
			// batches committing, a batch's Waiting or Decided lookup, the
			// releaser's Settle, the report API. database/sql keeps only 2 idle
			// connections by default, so a third was closed after each use and
			// the next one dialled again: a new backend (fork, authentication,
			// catalog caches) per batch, which cost a deferring gate a quarter
			// of its rate. Keep enough idle for the gate's own concurrency, and
			// bound the total so many gates cannot exhaust max_connections.
			db.SetMaxOpenConns(pgMaxOpenConns)
			db.SetMaxIdleConns(pgMaxIdleConns)
			db.SetConnMaxIdleTime(5 * time.Minute)
		},
		openFailed: func(err error) error {
			// The postgres driver only parses the URL here: a failure is a bad
			// setting, not an outage. (pgx's message hides the password.)
			return fmt.Errorf("%w: %w", gate.ErrBadRequest, err)
		},
	}
	sqliteDialect = dialect{
		name:      migrations.SQLite,
		textTimes: true,
		bookkeeping: `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at TEXT    NOT NULL
)`,
		clock:     `(strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z')`,
		heldRead:  heldColumns,
		byteOrder: "recipient",
		decided:   (*Store).decidedInChunks,
		commit:    (*Store).commitInTransaction,
		waiting:   (*Store).waitingInChunks,
		answers:   (*Store).answersInOne,
		held:      (*Store).heldInChunks,
		pool: func(db *sql.DB) {
			// SQLite has one writer; a single connection queues writers in
			// process instead of making them spin on SQLITE_BUSY.
			db.SetMaxOpenConns(1)
		},
		openFailed: func(err error) error { return err },
	}
)

// pickDialect picks the database from opts. Error messages never repeat the
// URL: it may hold a password.
func pickDialect(opts Options) (gorm.Dialector, dialect, error) {
	if opts.DatabaseURL != "" {
		if !strings.HasPrefix(opts.DatabaseURL, "postgres://") && !strings.HasPrefix(opts.DatabaseURL, "postgresql://") {
			return nil, dialect{}, fmt.Errorf("%w: database URL must start with postgres:// or postgresql://", gate.ErrBadRequest)
		}
		return postgres.Open(describeOnly(opts.DatabaseURL)), postgresDialect, nil
	}
	path := opts.SQLitePath
	if path == "" {
		return nil, dialect{}, fmt.Errorf("%w: set a database URL or a SQLite path", gate.ErrBadRequest)
	}
	// The driver reads everything after '?' as options.
	if strings.Contains(path, "?") {
		return nil, dialect{}, fmt.Errorf("%w: SQLite path %q must not contain '?'", gate.ErrBadRequest, path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, dialect{}, fmt.Errorf("create folder for %s: %w", path, err)
	}
	// WAL lets readers (reports) run beside the writer; busy_timeout waits
	// for another process's write instead of failing; _txlock=immediate
	// takes the write lock at BEGIN, so a transaction never fails halfway
	// when it upgrades from reading to writing.
	return sqlite.Open(path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)" +
		"&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"), sqliteDialect, nil
}

// describeOnly has pgx cache what a statement takes and returns, but run
// it as PostgreSQL's unnamed statement, unless the URL chooses a mode of
// its own (default_query_exec_mode). pgx's default keeps up to 512
// prepared statements per connection on the server, and the IN lists of
// settle and Waiting take a text per chunk size: over partitioned tables
// their cached plans grew each backend by about 30 MiB a minute in the
// soak, to some 200 MiB each (pg_log_backend_memory_contexts: CachedPlan).
func describeOnly(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return databaseURL // gorm.Open refuses it, saying why
	}
	q := u.Query()
	if q.Has("default_query_exec_mode") {
		return databaseURL
	}
	q.Set("default_query_exec_mode", "cache_describe")
	u.RawQuery = q.Encode()
	return u.String()
}
