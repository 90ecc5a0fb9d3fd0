package prefcache

import (
	"context"
	"errors"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// remirrorEvery is how often a cache whose store held too many preferences
// to mirror (or whose read of them failed) tries again: one read of up to
// Mirror+1 change rows, cheap at that pace, lets a store that shrank (its
// tombstones pruned) be mirrored again.
const remirrorEvery = 10 * time.Minute

// errTooMany says the store holds more preferences than Options.Mirror.
var errTooMany = errors.New("more recipient preferences than the mirror holds")

// mirrorSince is the earliest change a mirror's read lists: every row of
// the store, deleted ones too. It must not be the zero time, which asks a
// store for its clock alone.
var mirrorSince = time.Unix(0, 0)

// loadMirror reads every recipient's preferences, when the store holds at
// most Options.Mirror rows (tombstones included), and makes them the
// mirror: from then on a recipient missing from it has none, and no lookup
// reaches the store. It reads the store's clock first and the rows after,
// as a poll does, so the next poll (Margin behind that clock) sees what
// was written meanwhile. A store with more rows leaves the cache an LRU,
// synced from now on, and errTooMany is returned.
func (c *Cache) loadMirror(ctx context.Context) error {
	rows, now, err := c.store.PreferenceChanges(ctx, mirrorSince, c.o.Mirror+1)
	var found map[string]gate.Preferences
	if err == nil && len(rows) <= c.o.Mirror {
		found, err = c.store.Preferences(ctx, recipientsOf(rows))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.mirrorTried = time.Now()
		return err
	}
	c.gen++
	c.lru.clear()
	c.synced, c.cursor = true, now
	if len(rows) > c.o.Mirror {
		c.mirrorTried = time.Now()
		return errTooMany
	}
	c.o.Log.Info("recipient preferences mirrored whole: no lookups", "recipients", len(found), "rows", len(rows))
	if found == nil {
		found = map[string]gate.Preferences{} // mirrored, and empty
	}
	c.mirror = found
	return nil
}

// applyMirror brings the mirror up to date with the recipients changed,
// whose preferences are now found (a recipient missing from it has none),
// and gives the mirror up when it outgrew Options.Mirror. c.mu is held.
func (c *Cache) applyMirror(changed []gate.PreferenceChange, found map[string]gate.Preferences) {
	for _, ch := range changed {
		if p, ok := found[ch.Recipient]; ok {
			c.mirror[ch.Recipient] = p
		} else {
			delete(c.mirror, ch.Recipient)
		}
	}
	c.checkMirrorSize()
}

// checkMirrorSize gives the mirror up when it holds more than
// Options.Mirror recipients: the cache is an LRU from then on, until a
// later read finds the store small enough again. c.mu is held.
func (c *Cache) checkMirrorSize() {
	if len(c.mirror) <= c.o.Mirror {
		return
	}
	c.o.Log.Info("recipient preferences no longer mirrored whole: looking up the uncached", "more_than", c.o.Mirror)
	c.mirror = nil
	c.mirrorTried = time.Now()
	c.gen++
	c.lru.clear()
}

// mirrorWrite applies a write that succeeded through this cache to the
// mirror, if there is one: p stored, or the recipient deleted when p is
// nil. c.mu is held.
func (c *Cache) mirrorWrite(recipient string, p *gate.Preferences) {
	if c.mirror == nil {
		return
	}
	if p == nil {
		delete(c.mirror, recipient)
		return
	}
	c.mirror[recipient] = *p
	c.checkMirrorSize()
}

// recipientsOf lists the recipients of changes, in their order.
func recipientsOf(changes []gate.PreferenceChange) []string {
	out := make([]string, len(changes))
	for i, ch := range changes {
		out[i] = ch.Recipient
	}
	return out
}
