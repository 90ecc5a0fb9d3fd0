// Package testenv finds the real services integration tests run against.
//
// Under a plain `go test` a test whose service URL is unset is skipped; under
// `make test`, which sets GATE_TEST_REQUIRE_SERVICES=1, the same test fails,
// so CI never passes by skipping. It is imported only by tests. Besides the
// standard library it uses pgx, to give each test a schema of its own, and
// go-redis, to find a test's keys on the shared Redis Cluster.
package testenv
