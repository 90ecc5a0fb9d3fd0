// Package prometheus holds no code: it is the home of the gate's Prometheus
// alert rules (alerts.yaml), their promtool unit tests (alerts_test.yaml)
// and the Go test that runs `promtool check rules` and `promtool test rules`
// on them under `go test` (make test) and checks that every gate_* metric
// they name is one the gate registers. The Go test imports test support
// (internal/testing/testenv), internal/metrics and the Prometheus client;
// the package itself imports nothing.
package prometheus
