package gormstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// The statements on every message's and check's path (the claim's locks
// and commit, Decided, the check answers' lookup and save) go in pipelines
// on their generic plans. Each is prepared once per connection under a name,
// with one constant text whatever the batch's size, and its generic plan
// probes each key's index as a custom plan does. Left to choose,
// PostgreSQL took a custom plan every time: it knows the length of the
// array behind unnest() only in a custom plan, which therefore always looks
// cheaper for a small batch, and planning LATERAL probes into every
// partition of two tables cost a batch of checks at 1,000 a second 240 µs
// for the lookup and 67 µs for the locks, as much as running them
// (pg_stat_statements; docs/benchmarks.md).
//
// The setting holds for the pipeline's implicit transaction alone
// (set_config's is_local): every other statement of the connection
// (reports, retention) keeps PostgreSQL's own choice. SET LOCAL would do
// the same, but outside an explicit BEGIN it sends the client, and writes
// to the server's log, a warning each time.
const (
	genericPlans     = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`
	genericPlansName = "gate_generic_plans"
)

// inOnePipeline sends b's statements in one pipeline on one connection, so
// that PostgreSQL runs them as one implicit transaction, in one round trip,
// on their generic plans, and read reads their results in order. named are
// statements (name to text) to prepare on the connection first, once per
// connection: b may queue them by name.
func (s *Store) inOnePipeline(ctx context.Context, b *pgx.Batch, named map[string]string, read func(pgx.BatchResults) error) error {
	conn, err := s.sqlDB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(driverConn any) error {
		pc := driverConn.(*stdlib.Conn).Conn()
		if _, err := pc.Prepare(ctx, genericPlansName, genericPlans); err != nil {
			return fmt.Errorf("prepare %s: %w", genericPlansName, err)
		}
		for name, text := range named {
			if _, err := pc.Prepare(ctx, name, text); err != nil {
				return fmt.Errorf("prepare %s: %w", name, err)
			}
		}
		b.QueuedQueries = append([]*pgx.QueuedQuery{{SQL: genericPlansName}}, b.QueuedQueries...)
		br := pc.SendBatch(ctx, b)
		err := func() error {
			if _, err := br.Exec(); err != nil {
				return err
			}
			return read(br)
		}()
		return errors.Join(err, br.Close())
	})
}

// rowSource is rows as the scanners read them: *sql.Rows, or a pipeline's
// (pgxRows).
type rowSource interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// pgxRows is a pipeline's rows as a rowSource.
type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error {
	r.Rows.Close()
	return r.Rows.Err()
}

// queryGeneric runs the statement text, prepared under name, with args in a
// pipeline of its own (on its generic plan), and hands its rows to scan.
func (s *Store) queryGeneric(ctx context.Context, name, text string, args []any, scan func(rowSource) error) error {
	b := new(pgx.Batch)
	b.Queue(name, args...)
	return s.inOnePipeline(ctx, b, map[string]string{name: text}, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		return scan(pgxRows{rows})
	})
}
