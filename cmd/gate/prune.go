package main

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/antifatigue/gate/internal/gormstore"
)

// tombstoneRetention is how long the tombstone of deleted preferences is
// kept. It is there for the other gates' preference caches to see the
// delete, and a cache polls every second for the changes since its last
// poll, looking back only seconds more (prefcache's Margin): a day is far
// past the last poll that could need it. Only a gate whose polls failed for a whole day could miss a
// delete, and keep that recipient's old preferences cached until the entry
// is evicted or written again.
const tombstoneRetention = 24 * time.Hour

// pruneLoop prunes, every interval (GATE_PRUNE_INTERVAL), the decision
// ledger, the stored check answers, the preference tombstones past
// tombstoneRetention and, when auditRetention is set, the suppression rows
// older than it. On PostgreSQL each prune also makes partitions ahead.
func pruneLoop(ctx context.Context, audit *gormstore.Store, interval, auditRetention time.Duration, log *slog.Logger) {
	t := time.NewTicker(cmp.Or(interval, time.Hour))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := audit.Prune(ctx, time.Now()); err != nil {
				log.Warn("pruning the decision ledger failed; will try again at the next prune", "err", err)
			}
			if _, err := audit.PruneCheckAnswers(ctx, time.Now()); err != nil {
				log.Warn("pruning the stored check answers failed; will try again at the next prune", "err", err)
			}
			if _, err := audit.PruneTombstones(ctx, time.Now().Add(-tombstoneRetention)); err != nil {
				log.Warn("pruning preference tombstones failed; will try again at the next prune", "err", err)
			}
			if auditRetention <= 0 {
				continue
			}
			n, err := audit.PruneSuppressions(ctx, time.Now().Add(-auditRetention))
			if err != nil {
				log.Warn("pruning old suppression rows failed; will try again at the next prune", "deleted", n, "err", err)
			} else if n > 0 {
				log.Info("pruned suppression rows past GATE_AUDIT_RETENTION", "deleted", n, "retention", auditRetention)
			}
		}
	}
}
