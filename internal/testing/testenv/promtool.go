package testenv

import "testing"

// Promtool returns the path of Prometheus's promtool, which checks and
// unit-tests the alert rules in deploy/prometheus (scripts/promtool.sh
// installs it and prints GATE_TEST_PROMTOOL).
func Promtool(tb testing.TB) string { return need(tb, "promtool", "GATE_TEST_PROMTOOL") }
