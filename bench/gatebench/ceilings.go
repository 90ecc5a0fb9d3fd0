package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/gormstore"
	"github.com/antifatigue/gate/internal/redisstore"
	"github.com/antifatigue/gate/internal/testing/pgschema"
	"github.com/nats-io/nats.go/jetstream"
)

// ceilings are the rates this machine reaches on each service alone, doing
// the least the gate must do there.
type ceilings struct {
	jetstream phase // consume + ack, no work, while a publisher runs
	redis     phase // the gate's script, batches pipelined as the gate does
	audit     phase // the gate's audit commit, batches as the gate makes them
}

// smallest returns the lowest ceiling and its name.
func (c ceilings) smallest() (float64, string) {
	rate, name := c.jetstream.rate, "jetstream"
	if c.redis.rate < rate {
		rate, name = c.redis.rate, "redis"
	}
	if c.audit.rate < rate {
		rate, name = c.audit.rate, "audit"
	}
	return rate, name
}

// jetstreamCeiling publishes the gate run's messages to a work-queue stream
// like GATE_IN and consumes them with a pull consumer configured like the
// gate's, acking each at once: the gate without the gate. The messages go
// with the headers the gate's run had, if any.
func (r *runner) jetstreamCeiling(ctx context.Context, data messages) (phase, error) {
	js := r.pub.js
	const stream, subject, durable = "CEIL_IN", "ceil.in", "ceil"
	if _, err := ensureWorkQueue(ctx, js, stream, subject); err != nil {
		return phase{}, err
	}
	defer func() { _ = js.DeleteStream(context.Background(), stream) }()
	_, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxAckPending: r.cfg.maxAckPending, MaxDeliver: -1,
	})
	if err != nil {
		return phase{}, fmt.Errorf("ceiling consumer: %w", err)
	}
	// The consumer has a connection of its own, as the gate process does.
	nc, err := r.connect("gatebench-ceiling")
	if err != nil {
		return phase{}, err
	}
	defer nc.Close()
	cjs, err := jetstream.New(nc)
	if err != nil {
		return phase{}, fmt.Errorf("jetstream: %w", err)
	}
	cons, err := cjs.Consumer(ctx, stream, durable)
	if err != nil {
		return phase{}, fmt.Errorf("ceiling consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2 * r.cfg.batch))
	if err != nil {
		return phase{}, fmt.Errorf("ceiling consume: %w", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			m, err := it.Next()
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			if err == nil {
				_ = m.Ack()
			}
		}
	})
	defer func() { it.Stop(); wg.Wait() }()

	watch, err := watchAcks(r.nc, stream, durable)
	if err != nil {
		return phase{}, err
	}
	defer watch.close()
	return measure(ctx, r.pub, subject, watch, r.meter(0), data, 0)
}

// redisCeiling runs the gate's own script through the window store, a
// batch per pipeline as the gate sends it, from enough goroutines to keep
// Redis busy, on keys of its own.
func (r *runner) redisCeiling(ctx context.Context, reqs []gate.AdmitRequest) (phase, error) {
	prefix := "gatebench-" + r.tag + "-ceil"
	store, err := redisstore.New(r.redis, redisstore.Options{KeyPrefix: prefix, Timeout: 10 * time.Second})
	if err != nil {
		return phase{}, fmt.Errorf("window store: %w", err)
	}
	defer func() {
		if _, err := deleteKeys(context.Background(), r.redis, prefix+":*"); err != nil {
			r.logf("delete ceiling keys: %v", err)
		}
	}()
	return r.parallel(ctx, len(reqs), func(ctx context.Context, lo, hi int) error {
		_, err := store.Admit(ctx, reqs[lo:hi])
		return err
	})
}

// auditCeiling commits the records the gate would write for a run's
// messages (ledger rows, suppression rows with payload, counters), a batch
// per transaction, into a schema of its own.
func (r *runner) auditCeiling(ctx context.Context, recs []gate.Record) (phase, error) {
	dbURL, drop, err := pgschema.Create(ctx, r.cfg.databaseURL, "gatebench_"+r.tag+"_audit")
	if err != nil {
		return phase{}, err
	}
	defer r.dropSchema(drop)
	st, err := gormstore.Open(ctx, gormstore.Options{DatabaseURL: dbURL})
	if err != nil {
		return phase{}, fmt.Errorf("audit store: %w", err)
	}
	defer st.Close()
	return r.parallel(ctx, len(recs), func(ctx context.Context, lo, hi int) error {
		_, err := st.Commit(ctx, recs[lo:hi])
		return err
	})
}

// parallel runs do over [0, n) in batches of the gate's size, from
// r.cfg.workers goroutines, and measures the rate.
func (r *runner) parallel(ctx context.Context, n int, do func(ctx context.Context, lo, hi int) error) (phase, error) {
	meter := r.meter(0)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, r.cfg.workers)
	before := meter.read()
	for range r.cfg.workers {
		wg.Go(func() {
			for {
				lo := int(next.Add(int64(r.cfg.batch))) - r.cfg.batch
				if lo >= n || ctx.Err() != nil {
					return
				}
				if err := do(ctx, lo, min(lo+r.cfg.batch, n)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	after := meter.read()
	select {
	case err := <-errs:
		return phase{}, err
	default:
	}
	p := phase{n: n, cpu: before.to(after)}
	p.rate = float64(n) / p.cpu.wall.Seconds()
	return p, nil
}
