// Package porttest holds the conformance suites of the gate's durable
// ports other than the window store (whose suite is storetest): the audit
// log (gate.AuditLog), the hold store (gate.HoldStore) and the preference
// store (gate.PreferenceStore). Every implementation runs them: gormstore
// on SQLite and on PostgreSQL, prefcache in front of a store, and the
// pipeline's in-memory fakes, so that a fake the pipeline's tests lean on
// keeps the meaning of the real store.
//
// A store's test calls RunAuditLog, RunHoldStore or RunPreferenceStore
// with a harness that opens a fresh, empty store per case. A case an
// implementation cannot meet by design is named by an explicit capability
// field of the harness, and reported as skipped with the reason; no case
// is left out silently.
//
// It imports the standard library and internal/gate, and is imported only
// by tests.
package porttest
