// Package gormstore is the gate's audit store: it implements gate.AuditLog
// (the idempotency ledger, suppression rows, held messages and per-scene
// hourly counters, written together in one transaction per batch),
// gate.HoldStore (which queues hold messages; settling due ones, each queue
// by one gate at a time; cancelling held ones by cancel_key under the same
// queue locks), gate.Reports (the suppression list and the
// summary) and gate.Trends (hourly counters over time, the most suppressed
// recipients) over gorm, on PostgreSQL or, for the embedded default, on
// SQLite (github.com/glebarez/sqlite, pure Go). It prunes the idempotency
// ledger (Prune) and, for audit retention, old suppression rows
// (PruneSuppressions), in small batches.
//
// Opening a Store applies the SQL files of package migrations that the
// database has not seen yet, each in its own transaction, and records them in
// schema_migrations. On PostgreSQL a transaction-scoped advisory lock keeps
// several gate processes starting at once from applying one twice; on SQLite
// every transaction begins IMMEDIATE, which serializes writers the same way.
//
// Times are stored in UTC with microsecond precision. On PostgreSQL they are
// timestamptz; SQLite has no time type, so they are TEXT in one fixed-width
// format, 2006-01-02T15:04:05.000000Z, whose text order is time order (the
// schema rejects any other spelling). Summaries resolve to one hour: the
// counters are kept per scene and UTC hour.
//
// It may import the standard library, internal/gate, migrations, gorm and its
// postgres and sqlite drivers, and pgx (the postgres driver's own library,
// for per-query options); never another adapter.
package gormstore
