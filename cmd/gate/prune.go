package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/antifatigue/gate/internal/gormstore"
)

// pruneLoop prunes, every hour, the decision ledger and, when
// auditRetention is set, the suppression rows older than it.
func pruneLoop(ctx context.Context, audit *gormstore.Store, auditRetention time.Duration, log *slog.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := audit.Prune(ctx, time.Now()); err != nil {
				log.Warn("pruning the decision ledger failed; will try again in an hour", "err", err)
			}
			if _, err := audit.PruneCheckAnswers(ctx, time.Now()); err != nil {
				log.Warn("pruning the stored check answers failed; will try again in an hour", "err", err)
			}
			if auditRetention <= 0 {
				continue
			}
			n, err := audit.PruneSuppressions(ctx, time.Now().Add(-auditRetention))
			if err != nil {
				log.Warn("pruning old suppression rows failed; will try again in an hour", "deleted", n, "err", err)
			} else if n > 0 {
				log.Info("pruned suppression rows past GATE_AUDIT_RETENTION", "deleted", n, "retention", auditRetention)
			}
		}
	}
}
