package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/ratelog"
)

// Releaser settles held messages as they come due: it forwards deferred
// messages their windows admit again, and digests, and applies fallbacks.
// Every gate runs one; the hold store hands each queue to one of them at a
// time.
type Releaser struct {
	o ReleaserOptions
	// core serves the stages a round shares with the other front ends:
	// plan, admit, resolve, forget (see round).
	core core
	// failing is the run of failed rounds under way, if any: a store that
	// is down is logged once a minute, not every round.
	failing ratelog.Run
}

// Run settles due messages every Interval until ctx ends. A round that
// fails is logged and counted, and tried again at the next tick: its
// settlements were rolled back.
func (r *Releaser) Run(ctx context.Context) {
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	for ctx.Err() == nil {
		if more, _ := r.Round(ctx); more {
			continue
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// Round settles one page of due queues and reports whether there may be
// more due at once (it settled something and the page was full).
func (r *Releaser) Round(ctx context.Context) (more bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.Timeout)
	defer cancel()
	now := r.o.Now()
	if err := r.drain(ctx); err != nil {
		r.failed(now, err)
		return false, err
	}
	rules := r.o.Rules.Current()
	var (
		settled []gate.Settlement
		full    bool
	)
	n, err := r.o.Holds.Settle(ctx, now, r.o.Queues, r.o.PerQueue, func(ctx context.Context, due [][]gate.Held) ([]gate.Settlement, error) {
		full = len(due) >= r.o.Queues
		for _, q := range due {
			full = full || len(q) >= r.o.PerQueue
		}
		settled, err = r.settle(ctx, rules, now, due)
		return settled, err
	})
	if err != nil {
		r.failed(now, err)
		return false, err
	}
	r.count(rules, settled)
	if err := r.drain(ctx); err != nil {
		// Settled: their forwards wait in the outbox for the next round.
		r.failed(now, err)
		return false, err
	}
	if since := r.failing.Ended(); !since.IsZero() {
		r.o.Log.Info("releasing held messages again", "failing_since", since)
	}
	return n > 0 && full, nil
}

// outboxPage bounds the forwards one read of the outbox publishes.
const outboxPage = 500

// drain publishes the outbox: the forwards of the messages settled released
// or digested, by this gate or by another that died between its settle and
// its publish, in the order they were settled, through the core's forward
// stage; and marks Sent those the outbound stream stored. It stops at the
// first forward that fails, keeping it and every later one for the next
// round, in order. A forward two gates publish is stored once, under its
// Nats-Msg-Id (GATE_OUT's duplicate window).
func (r *Releaser) drain(ctx context.Context) (err error) {
	defer func() {
		if v := recover(); v != nil {
			recovered(r.o.Log, r.o.Metrics, "release", "recovered from a panic while publishing released messages", v)
			err = fmt.Errorf("release: forward: panic: %v", v)
		}
	}()
	for {
		fs, err := r.o.Holds.Outbox(ctx, outboxPage)
		if err != nil {
			return err
		}
		r.outboxLeft(len(fs))
		if len(fs) == 0 {
			return nil
		}
		errs := r.core.forward(ctx, fs)
		stored := len(fs)
		for i, err := range errs {
			if err != nil {
				stored = i
				break
			}
		}
		ids := make([]string, stored)
		for i := range ids {
			ids[i] = fs[i].MessageID
		}
		if len(ids) > 0 {
			if err := r.o.Holds.Sent(ctx, ids); err != nil {
				return fmt.Errorf("release: outbox: %w", err)
			}
		}
		if stored < len(fs) {
			r.outboxLeft(len(fs) - stored)
			return fmt.Errorf("release: forward: %w", errs[stored])
		}
		if len(fs) < outboxPage {
			r.outboxLeft(0)
			return nil
		}
	}
}

// outboxLeft reports n forwards left in the outbox by this round's drain.
func (r *Releaser) outboxLeft(n int) {
	if r.o.Metrics != nil {
		r.o.Metrics.OutboxLeft.Set(float64(n))
	}
}

// failed logs a failed round: the first of a run of failures, then once a
// minute.
func (r *Releaser) failed(now time.Time, err error) {
	if log, since := r.failing.Failed(now); log {
		r.o.Log.Warn("releasing held messages failed; they stay held and are tried again", "failing_since", since, "err", err)
	}
}

// count counts committed settlements.
func (r *Releaser) count(rules *gate.RuleSet, settled []gate.Settlement) {
	m := r.o.Metrics
	if m == nil {
		return
	}
	digests := map[string]bool{}
	for _, s := range settled {
		m.Settled.WithLabelValues(sceneLabel(rules, s.Scene), string(s.Kind)).Inc()
		if s.Kind == gate.SettleDigested && !digests[s.DigestID] {
			digests[s.DigestID] = true
			m.Digests.Inc()
		}
	}
}

// settle decides the due messages of one round (see release): the hold
// store's callback. A panic is a bug; it is recovered, logged and counted,
// and the round is rolled back.
func (r *Releaser) settle(ctx context.Context, rules *gate.RuleSet, now time.Time, due [][]gate.Held) (out []gate.Settlement, err error) {
	defer func() {
		if v := recover(); v != nil {
			recovered(r.o.Log, r.o.Metrics, "release", "recovered from a panic while releasing held messages", v)
			out, err = nil, fmt.Errorf("release: panic: %v", v)
		}
	}()
	rd := &round{r: r, rules: rules, now: now}
	for _, rows := range due {
		if len(rows) == 0 {
			continue
		}
		if rows[0].Kind == gate.HoldDigest {
			rd.planDigest(ctx, rows)
		} else {
			rd.planDefer(ctx, rows)
		}
	}
	if err := rd.decide(ctx); err != nil {
		return nil, err
	}
	for _, q := range rd.queues {
		q.finish(rd)
	}
	r.core.forgetLogged(ctx, rd.unadmit, "admissions of messages that stay held stay counted in their windows")
	return rd.out, nil
}
