// Package archtest holds the repository's import rules as one test, so the
// layering the packages' doc.go files describe is checked, not only stated:
// internal/gate imports only the standard library; an adapter imports the
// domain and the few packages its doc.go names, never another adapter; no
// production package imports test support (internal/testing/... and the
// older internal/testenv, pgschema, storetest, procstat, faulttest); only
// commands (cmd/...) and measuring tools (bench/..., tools/...) wire
// adapters together; nothing imports a command.
//
// It has no code of its own and imports nothing outside its test, which runs
// `go list` from the module root.
package archtest
