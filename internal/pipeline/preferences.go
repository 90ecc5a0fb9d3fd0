package pipeline

import (
	"context"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// preferenceTimeout bounds a batch's preference lookup: preferences are a
// courtesy, and a slow lookup must not hold back every message of the
// batch for long.
const preferenceTimeout = 2 * time.Second

// lookupPreferences asks store for the preferences of recipients, each
// asked once, in one call bounded by preferenceTimeout, timed and, should
// it fail, counted (gate_store_errors_total{store="audit",
// op="preferences"}) on m, which may be nil. Logging the failure is the
// caller's.
func lookupPreferences(ctx context.Context, store gate.PreferenceStore, m *metrics.Metrics, recipients []string) (map[string]gate.Preferences, error) {
	seen := make(map[string]bool, len(recipients))
	unique := recipients[:0:0]
	for _, r := range recipients {
		if !seen[r] {
			seen[r] = true
			unique = append(unique, r)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, preferenceTimeout)
	defer cancel()
	done := startTimer(m, "audit", "preferences")
	found, err := store.Preferences(ctx, unique)
	done()
	if err != nil {
		countFailure(m, "audit", "preferences")
		return nil, err
	}
	return found, nil
}

// preferences looks up the preferences of the recipients of the batch's
// messages still to decide, in one call (the cache in front of the store
// answers what it holds from memory and asks the store once for the rest).
// It fails open: should the lookup fail, the batch is decided as if no
// recipient had preferences, and the failure is logged (once a minute
// while it lasts) and counted. A muted recipient may then get a message:
// the lesser harm than holding every message back while the audit store is
// slow, since the commit that follows needs that store anyway.
func (p *Pipeline) preferences(ctx context.Context, items []item) map[string]gate.Preferences {
	if p.o.Preferences == nil {
		return nil
	}
	var recipients []string
	for i := range items {
		if it := &items[i]; it.undecided() {
			recipients = append(recipients, it.msg.Recipient())
		}
	}
	if len(recipients) == 0 {
		return nil
	}
	found, err := lookupPreferences(ctx, p.o.Preferences, p.o.Metrics, recipients)
	if err != nil {
		p.mu.Lock()
		now := time.Now()
		log := now.Sub(p.prefsLogged) >= time.Minute
		if log {
			p.prefsLogged = now
		}
		p.mu.Unlock()
		if log {
			p.o.Log.Warn("reading recipient preferences failed; this batch is decided without them", "messages", len(recipients), "err", err)
		}
		return nil
	}
	return found
}
