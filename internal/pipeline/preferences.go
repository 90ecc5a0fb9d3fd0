package pipeline

import (
	"context"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// preferenceTimeout bounds a batch's preference lookup: preferences are a
// courtesy, and a slow lookup must not hold back every message of the
// batch for long.
const preferenceTimeout = 2 * time.Second

// preferences looks up the preferences of the recipients of the batch's
// messages still to decide, in one call (the cache in front of the store
// answers what it holds from memory and asks the store once for the rest).
// It fails open: should the lookup fail, the batch is decided as if no
// recipient had preferences, and the failure is logged (once a minute
// while it lasts) and counted (gate_store_errors_total{store="audit",
// op="preferences"}). A muted recipient may then get a message: the
// lesser harm than holding every message back while the audit store is
// slow, since the commit that follows needs that store anyway.
func (p *Pipeline) preferences(ctx context.Context, items []item) map[string]*gate.Preferences {
	if p.o.Preferences == nil {
		return nil
	}
	var recipients []string
	seen := map[string]bool{}
	for i := range items {
		if it := &items[i]; it.undecided() {
			if r := it.msg.Recipient(); !seen[r] {
				seen[r] = true
				recipients = append(recipients, r)
			}
		}
	}
	if len(recipients) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, preferenceTimeout)
	defer cancel()
	done := p.timer("audit", "preferences")
	found, err := p.o.Preferences.Preferences(ctx, recipients)
	done()
	if err != nil {
		p.failedCall("audit", "preferences")
		p.mu.Lock()
		now := time.Now()
		log := now.Sub(p.prefsLogged) >= time.Minute
		if log {
			p.prefsLogged = now
		}
		p.mu.Unlock()
		if log {
			p.o.Log.Warn("reading recipient preferences failed; this batch is decided without them", "recipients", len(recipients), "err", err)
		}
		return nil
	}
	out := make(map[string]*gate.Preferences, len(found))
	for r, pr := range found {
		out[r] = &pr
	}
	return out
}
