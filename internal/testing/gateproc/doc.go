// Package gateproc is the one launcher of gate processes (and the other
// programs an acceptance test runs beside them, such as nats-server or
// redis-server) for the tests: it builds a binary once per test run, starts
// it with an environment of the test's choosing in a process group of its
// own, appends every run's output to one log file, waits for the gate's
// /readyz, and stops it with SIGTERM or kills it with SIGKILL (kill -9),
// printing the log's tail when the test failed.
//
// cmd/gate's tests start a child gate through it (the test binary run
// again as `gate serve`), internal/faulttest its whole stack.
//
// It imports the standard library only, and is imported only by tests.
package gateproc
