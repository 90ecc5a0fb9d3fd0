package main

import (
	"context"
	"fmt"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/redisstore"
)

// memoryResult is Redis memory per tracked (recipient, scene).
type memoryResult struct {
	pairs       int
	perPair     float64 // INFO used_memory growth per pair
	sampleUsage int64   // MEMORY USAGE of one recipient's key (of one scene)
}

// redisMemory fills the steady state of a scene {1h/1, 24h/3} at one message
// per recipient per hour: of a day's 24 messages 3 were admitted and are
// kept (the ids double as idempotency records), the 21 others wrote
// nothing. Three forced admissions per pair build exactly that state
// through the gate's own script; ids are 36-character UUIDs.
func (r *runner) redisMemory(ctx context.Context) (memoryResult, error) {
	res := memoryResult{pairs: r.cfg.memPairs}
	// The gate's own key prefix, so keys are as long as in production;
	// recipients carry the run's tag and an "m" the gate run's do not.
	store, err := redisstore.New(r.redis, redisstore.Options{Timeout: 10 * time.Second})
	if err != nil {
		return res, fmt.Errorf("window store: %w", err)
	}
	defer func() {
		if _, err := deleteKeys(context.Background(), r.redis, "gate:{open_id:ou_"+r.tag+"m*"); err != nil {
			r.logf("delete memory keys: %v", err)
		}
	}()
	limits := []gate.Limit{{Window: time.Hour, Max: 1}, {Window: 24 * time.Hour, Max: 3}}
	w := newWorkload(r.seed^0x5eed, r.tag, res.pairs)
	before, err := settledMemory(ctx, r)
	if err != nil {
		return res, err
	}
	batch := make([]gate.AdmitRequest, 0, r.cfg.batch)
	var recipient string
	for i := range res.pairs {
		recipient = fmt.Sprintf("open_id:ou_%sm%023x", r.tag, i)
		for range 3 {
			batch = append(batch, gate.AdmitRequest{
				ID: w.envelope().id, Recipient: recipient, Scene: "alert.disk_full", Limits: limits, Force: true,
			})
			if len(batch) == cap(batch) {
				if _, err := store.Admit(ctx, batch); err != nil {
					return res, fmt.Errorf("fill: %w", err)
				}
				batch = batch[:0]
			}
		}
	}
	if len(batch) > 0 {
		if _, err := store.Admit(ctx, batch); err != nil {
			return res, fmt.Errorf("fill: %w", err)
		}
	}
	after, err := settledMemory(ctx, r)
	if err != nil {
		return res, err
	}
	res.perPair = float64(after-before) / float64(res.pairs)
	res.sampleUsage, err = r.redis.MemoryUsage(ctx, store.Key(recipient)).Result()
	if err != nil {
		return res, fmt.Errorf("memory usage: %w", err)
	}
	return res, nil
}

// settledMemory reads used_memory once Redis has had a moment to finish
// rehashing its key tables.
func settledMemory(ctx context.Context, r *runner) (int64, error) {
	time.Sleep(300 * time.Millisecond)
	return redisInt(ctx, r.redis, "memory", "used_memory")
}
