// Package pgschema gives a test or a benchmark run a PostgreSQL schema of
// its own in a shared database, so that runs at the same time never see
// each other's tables.
//
// It imports the standard library and pgx. Besides the tests, the
// benchmark tool (cmd/gatebench) uses it for its runs; no production
// package does.
package pgschema
