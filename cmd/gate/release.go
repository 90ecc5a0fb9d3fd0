package main

import (
	"log/slog"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/antifatigue/gate/internal/pipeline"
)

// newReleaser is the loop that settles the held messages of holds as they
// come due, under the rules in force and the same windows and outbound
// subject as new messages, on the gate's clock now. Every gate runs one:
// the hold store hands each due queue to one of them at a time. It stops
// with the consumer, and the round in hand finishes (within
// GATE_SHUTDOWN_TIMEOUT) before the stores close.
func newReleaser(c *config, now func() time.Time, rules gate.RuleSource, store gate.WindowStore, holds gate.HoldStore, fwd gate.Forwarder,
	m *metrics.Metrics, log *slog.Logger) (*pipeline.Releaser, error) {
	return pipeline.NewReleaser(pipeline.ReleaserOptions{
		Rules: rules, Store: store, Holds: holds, Forwarder: fwd, Metrics: m, Log: log,
		Interval: c.ReleaseInterval, Timeout: c.ShutdownTimeout, Now: now,
	})
}
