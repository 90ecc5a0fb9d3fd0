// Package migrations holds the SQL schema of the gate's audit store, one
// folder per dialect (postgres/, sqlite/), embedded into the binary so the
// store can bring any database up to date when it opens.
//
// Files are named NNNN_name.sql and apply in version order, each once. Both
// folders hold the same versions with the same names: a change to the schema
// is a new file in each, never an edit of a file that has shipped.
//
// The Go code lives here, not in internal/, because go:embed cannot reach
// files in a parent folder. It imports only the standard library; applying
// the files, and recording them, is internal/gormstore's job.
package migrations
