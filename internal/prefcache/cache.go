package prefcache

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/ratelog"
)

// Defaults of a Cache.
const (
	DefaultSize = 100_000
	// DefaultPoll: a change reaches every gate within about a second, well
	// within the 2 s issue 12 asks.
	DefaultPoll = time.Second
	// DefaultMargin is how far behind the newest change seen a poll looks
	// again: a write stamped by the database's clock may commit after a
	// later-stamped one that a poll has seen already.
	DefaultMargin = 2 * time.Second
	// pollPage is how many changes one poll reads; a full page (a burst
	// of changes) empties the whole cache instead of reading on.
	pollPage = 1000
	// keepPolls is how many polls an invalidation is remembered, against a
	// lookup still in flight storing what it read before it: longer than
	// any lookup lasts (each is bounded by its context).
	keepPolls = 120
)

// Options configure a Cache.
type Options struct {
	// Size bounds the recipients remembered, with or without preferences;
	// DefaultSize when 0.
	Size int
	// Mirror is the most preferences (rows of the store, deleted ones
	// too) the cache holds whole: then every recipient's preferences are
	// in memory, and one missing has none, so no lookup reaches the store.
	// With more, the cache is an LRU of Size recipients. Size when 0;
	// negative: never mirror.
	Mirror int
	// Poll is how often the store's changes are read; DefaultPoll when 0.
	Poll time.Duration
	// Margin: see DefaultMargin; DefaultMargin when 0.
	Margin time.Duration
	// Log receives a poll's failures (once a minute while they last).
	Log *slog.Logger
}

// Cache is a gate.PreferenceStore that remembers what its store said.
// Reads (Preferences) are served from memory where they can be, and ask
// the store once for the rest; writes go to the store and drop the
// recipient here at once; Run drops what other gates changed. It is safe
// for concurrent use.
type Cache struct {
	store gate.PreferenceStore
	o     Options

	mu  sync.Mutex
	lru *lru
	// synced is set once a poll has read the store's clock: until then
	// nothing is cached, since no change before it could be noticed.
	synced bool
	cursor time.Time // the newest change seen, on the store's clock
	// gen counts the polls (and local writes) that dropped something;
	// dropped remembers, for keepPolls of them, in which one each recipient
	// was last dropped, so that a lookup begun before it does not cache
	// what it read.
	gen     uint64
	dropped map[string]uint64
	// failing is the run of failed polls under way, if any.
	failing ratelog.Run
	// mirror, when not nil, is every recipient's preferences (see
	// Options.Mirror); mirrorTried is when a read of them last found too
	// many or failed.
	mirror      map[string]gate.Preferences
	mirrorTried time.Time
}

var _ gate.PreferenceStore = (*Cache)(nil)

// New returns a cache in front of store. Call Run for it to see other
// gates' changes; until its first poll it caches nothing.
func New(store gate.PreferenceStore, o Options) *Cache {
	if o.Size <= 0 {
		o.Size = DefaultSize
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Margin <= 0 {
		o.Margin = DefaultMargin
	}
	if o.Mirror == 0 {
		o.Mirror = o.Size
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Cache{store: store, o: o, lru: newLRU(o.Size), dropped: make(map[string]uint64)}
}

// Run polls the store's changes every Poll until ctx ends.
func (c *Cache) Run(ctx context.Context) {
	t := time.NewTicker(c.o.Poll)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*c.o.Poll)
		err := c.Poll(pctx)
		cancel()
		c.failed(err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// failed logs a failing poll: the first of a run of failures, then once a
// minute. The cache keeps serving what it has: a change missed meanwhile
// is read by the first poll that succeeds, since the cursor stays.
func (c *Cache) failed(err error) {
	switch {
	case err == nil:
		if since := c.failing.Ended(); !since.IsZero() {
			c.o.Log.Info("reading recipient preference changes again", "failing_since", since)
		}
	case errors.Is(err, context.Canceled):
	default:
		if log, since := c.failing.Failed(time.Now()); log {
			c.o.Log.Warn("reading recipient preference changes failed; cached preferences may be stale until it works again", "failing_since", since, "err", err)
		}
	}
}

// Poll reads the changes since the newest one seen (less Margin) and drops
// their recipients. The first poll reads only the store's clock, where the
// changes begin. A page full of changes empties the cache.
func (c *Cache) Poll(ctx context.Context) error {
	c.mu.Lock()
	since := time.Time{}
	if c.synced {
		since = c.cursor.Add(-c.o.Margin)
	}
	mirrored := c.mirror != nil
	remirror := !mirrored && c.o.Mirror > 0 && (!c.synced || time.Since(c.mirrorTried) >= remirrorEvery)
	c.mu.Unlock()
	if remirror {
		err := c.loadMirror(ctx)
		if !errors.Is(err, errTooMany) {
			return err
		}
		return nil // synced as an LRU
	}
	changes, now, err := c.store.PreferenceChanges(ctx, since, pollPage)
	if err != nil {
		return err
	}
	var found map[string]gate.Preferences
	if mirrored && len(changes) > 0 && len(changes) < pollPage {
		// The mirror takes the changed recipients' preferences as they
		// are now; on failure the cursor stays, and the next poll reads
		// the same changes again.
		if found, err = c.store.Preferences(ctx, recipientsOf(changes)); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.synced:
		c.synced, c.cursor = true, now
		c.gen++
		c.lru.clear()
	case len(changes) >= pollPage:
		c.gen++
		c.lru.clear()
		c.cursor = now
		// A burst of changes is read whole again by the next poll.
		c.mirror, c.mirrorTried = nil, time.Time{}
	case len(changes) > 0:
		if c.mirror != nil && found != nil {
			c.applyMirror(changes, found)
		}
		c.gen++
		for _, ch := range changes {
			c.lru.remove(ch.Recipient)
			c.dropped[ch.Recipient] = c.gen
			if ch.At.After(c.cursor) {
				c.cursor = ch.At
			}
		}
	}
	for r, g := range c.dropped {
		if g+keepPolls < c.gen {
			delete(c.dropped, r)
		}
	}
	return nil
}

// Preferences returns the preferences of those of recipients that have
// any: from memory for the recipients cached, and in one call to the store
// for the rest. Its errors are the store's.
func (c *Cache) Preferences(ctx context.Context, recipients []string) (map[string]gate.Preferences, error) {
	out := make(map[string]gate.Preferences)
	var miss []string
	c.mu.Lock()
	if c.mirror != nil {
		for _, r := range recipients {
			if p, ok := c.mirror[r]; ok {
				out[r] = p
			}
		}
		c.mu.Unlock()
		return out, nil
	}
	gen, synced := c.gen, c.synced
	for _, r := range recipients {
		p, ok := c.lru.get(r)
		switch {
		case !ok:
			miss = append(miss, r)
		case p != nil:
			out[r] = *p
		}
	}
	c.mu.Unlock()
	if len(miss) == 0 {
		return out, nil
	}
	found, err := c.store.Preferences(ctx, miss)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// What was read is cached unless a change may have come since: the
	// recipient was dropped after the lookup began (or the lookup is older
	// than what dropped remembers).
	keep := synced && c.gen <= gen+keepPolls
	for _, r := range miss {
		p, ok := found[r]
		if ok {
			out[r] = p
		}
		if !keep || c.dropped[r] > gen {
			continue
		}
		if ok {
			c.lru.put(r, &p)
		} else {
			c.lru.put(r, nil)
		}
	}
	return out, nil
}

// PutPreferences writes through to the store and drops the recipient here.
func (c *Cache) PutPreferences(ctx context.Context, p gate.Preferences) (gate.Preferences, error) {
	stored, err := c.store.PutPreferences(ctx, p)
	c.wrote(p.Recipient, &stored, err)
	return stored, err
}

// DeletePreferences deletes in the store and drops the recipient here.
func (c *Cache) DeletePreferences(ctx context.Context, recipient string) error {
	err := c.store.DeletePreferences(ctx, recipient)
	c.wrote(recipient, nil, err)
	return err
}

// PreferenceChanges is the store's.
func (c *Cache) PreferenceChanges(ctx context.Context, since time.Time, limit int) ([]gate.PreferenceChange, time.Time, error) {
	return c.store.PreferenceChanges(ctx, since, limit)
}

// Len is how many recipients the cache holds, with or without preferences.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.len()
}

// wrote records a write of recipient's preferences through this cache: p
// stored, or deleted when p is nil. The LRU forgets the recipient whatever
// became of the write (one that failed may still have committed); the
// mirror takes a write that succeeded, and a poll brings one that failed
// but committed.
func (c *Cache) wrote(recipient string, p *gate.Preferences, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.lru.remove(recipient)
	c.dropped[recipient] = c.gen
	if err == nil {
		c.mirrorWrite(recipient, p)
	}
}
