package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/pgschema"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// seedResult is the seed baseline's part of a run: its phase, and its
// outcomes beside what the simulation says the same messages must get.
type seedResult struct {
	phase
	counted, expected outcomes
}

// The seed's streams, consumer and table.
const (
	seedStreamIn, seedSubjectIn   = "SEED_IN", "seed.in"
	seedStreamOut, seedSubjectOut = "SEED_OUT", "seed.out"
	seedDurable                   = "seed"
	seedTable                     = `CREATE TABLE seed_suppressions (
	id              bigserial PRIMARY KEY,
	message_id      text NOT NULL,
	scene           text NOT NULL,
	recipient       text NOT NULL,
	priority        text NOT NULL,
	reason          text NOT NULL,
	limit_scope     text,
	limit_window_ms bigint,
	limit_max       integer,
	count_seen      integer,
	decided_at      timestamptz NOT NULL,
	payload         text NOT NULL
)`
)

// seedBaseline runs the seed design, as a careful engineer would build it
// from the seed posts (isActionAllowed(user, action, period, max) over a
// Redis ZSET) and the contract, under the gate run's rules, on its first
// messages:
//
//   - a normal JetStream Consume callback, one message at a time, its body
//     decoded (the seed knew no headers);
//   - every limit of the scene and every recipient cap checked in one
//     MULTI of ZADD / ZREMRANGEBYSCORE / ZCARD / EXPIRE per limit (see
//     seed.decide);
//   - a forward is a JetStream publish to a stream configured as GATE_OUT
//     is, awaited; a suppression is one row inserted into a plain table
//     of PostgreSQL; a drop is nothing;
//   - then a synchronous ack (DoubleAck).
//
// It is measured from a full stream, so no publisher competes with it,
// which favours the seed. Its streams, keys and schema are its own, and
// removed afterwards.
func (r *runner) seedBaseline(ctx context.Context, rs *gate.RuleSet, data [][]byte) (seedResult, error) {
	var res seedResult
	sim := newSimulator(rs)
	if _, err := sim.decide(data, false); err != nil {
		return res, err
	}
	res.expected = sim.got

	js := r.pub.js
	if _, err := ensureWorkQueue(ctx, js, seedStreamIn, seedSubjectIn); err != nil {
		return res, err
	}
	defer func() { _ = js.DeleteStream(context.Background(), seedStreamIn) }()
	// GATE_OUT itself already holds these ids, forwarded by the gate's run:
	// its de-duplication would make the seed's forwards cheaper than they
	// are. A copy of its configuration on a subject of its own is not.
	out, err := js.Stream(ctx, natsbus.StreamOut)
	if err != nil {
		return res, fmt.Errorf("look up %s: %w", natsbus.StreamOut, err)
	}
	outCfg := out.CachedInfo().Config
	outCfg.Name, outCfg.Subjects, outCfg.Description = seedStreamOut, []string{seedSubjectOut}, "the seed baseline's forwards"
	if _, err := js.CreateStream(ctx, outCfg); err != nil {
		return res, fmt.Errorf("create stream %s: %w", seedStreamOut, err)
	}
	defer func() { _ = js.DeleteStream(context.Background(), seedStreamOut) }()
	if _, err := r.pub.publish(ctx, seedSubjectIn, messages{data: data}, 0); err != nil {
		return res, fmt.Errorf("fill the seed stream: %w", err)
	}

	dbURL, drop, err := pgschema.Create(ctx, r.cfg.databaseURL, "gatebench_"+r.tag+"_seed")
	if err != nil {
		return res, err
	}
	defer r.dropSchema(drop)
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return res, fmt.Errorf("postgres: connect: %w", err)
	}
	defer db.Close(context.Background())
	if _, err := db.Exec(ctx, seedTable); err != nil {
		return res, fmt.Errorf("postgres: create the seed's table: %w", err)
	}

	// The seed's process has a connection of its own, as the gate does.
	nc, err := r.connect("gatebench-seed")
	if err != nil {
		return res, err
	}
	defer nc.Close()
	sjs, err := jetstream.New(nc)
	if err != nil {
		return res, fmt.Errorf("jetstream: %w", err)
	}
	cons, err := sjs.CreateOrUpdateConsumer(ctx, seedStreamIn, jetstream.ConsumerConfig{
		Durable: seedDurable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
	})
	if err != nil {
		return res, fmt.Errorf("seed consumer: %w", err)
	}
	s := &seed{rs: rs, redis: r.redis, prefix: "gatebench-" + r.tag + "-seed", js: sjs, db: db}
	defer func() {
		if _, err := deleteKeys(context.Background(), r.redis, s.prefix+":*"); err != nil {
			r.logf("delete seed keys: %v", err)
		}
	}()

	// The callback runs one message at a time, so what it alone touches
	// needs no lock; done and failed hand the end over.
	var seqs seqTally
	done, failed := make(chan struct{}), make(chan error, 1)
	stopped := false
	handle := func(m jetstream.Msg) {
		if stopped {
			return
		}
		meta, err := m.Metadata()
		var o gate.Outcome
		if err == nil {
			o, err = s.decide(ctx, m.Data())
		}
		if err == nil {
			err = m.DoubleAck(ctx)
		}
		if err != nil {
			_ = m.Nak()
			res.naks++
			stopped = true
			failed <- err
			return
		}
		if !seqs.add(meta.Sequence.Stream) {
			res.repeats = seqs.repeats
			return
		}
		res.counted.add(o)
		if res.n++; res.n == len(data) {
			stopped = true
			close(done)
		}
	}
	meter := r.meter(0)
	before := meter.read()
	cc, err := cons.Consume(handle)
	if err != nil {
		return res, fmt.Errorf("seed consume: %w", err)
	}
	timeout := time.NewTimer(time.Minute + time.Duration(len(data))*10*time.Millisecond)
	defer timeout.Stop()
	select {
	case <-done:
	case err = <-failed:
	case <-timeout.C:
		err = errors.New("timed out")
	case <-ctx.Done():
		err = ctx.Err()
	}
	after := meter.read()
	cc.Stop()
	<-cc.Closed()
	if err != nil {
		return res, fmt.Errorf("seed: %d of %d messages decided: %w", res.n, len(data), err)
	}
	res.cpu = before.to(after)
	res.rate = float64(res.n) / res.cpu.wall.Seconds()
	return res, nil
}

// seed is the seed design's decision and effect for one message.
type seed struct {
	rs     *gate.RuleSet
	redis  *redis.Client
	prefix string // of its Redis keys
	js     jetstream.JetStream
	db     *pgx.Conn
}

// seedEnvelope is what the seed decodes of a message.
type seedEnvelope struct {
	ID            string        `json:"id"`
	Scene         string        `json:"scene"`
	ReceiveIDType string        `json:"receive_id_type"`
	ReceiveID     string        `json:"receive_id"`
	Priority      gate.Priority `json:"priority"`
}

// seedCheck is one window the seed checks: a limit of the scene, or a
// recipient cap.
type seedCheck struct {
	key   string
	scope gate.Scope
	limit gate.Limit
	card  *redis.IntCmd
}

// decide decides one message, then forwards it or inserts its suppression,
// synchronously.
//
// The windows follow the seed posts: one ZSET per (recipient, scene, limit)
// and per (recipient, cap), the message id as member (not a timestamp,
// which collides within a millisecond), the gate host's clock as score. All
// the windows go in one MULTI, one round trip: ZADD, ZREMRANGEBYSCORE of
// what fell out of the window, ZCARD, EXPIRE, per window. That favours the
// seed over a call of isActionAllowed per limit.
//
// The seed adds before it checks, so as the posts have it a rejected
// attempt would stay in its windows and fill them: a producer retrying in a
// loop locks a recipient out, and "max 1" holds back the first message. A
// careful engineer, and this variant, removes the member again (ZREM from
// every window, a second round trip) when any window is over its max, so
// that only admitted messages count, as the contract says. What stays of
// the seed's design: the check and the removal are two steps, not one
// atomic one (two consumers can both see a window over its max and both
// reject, or see the other's rejected member); the clock is each host's
// own; and nothing remembers decided ids, so a redelivered message is
// decided again (a second suppression row; its forward is de-duplicated by
// the outbound stream's Nats-Msg-Id window only). It knows what the
// benchmark's rules use (limits, recipient caps, bypass priorities,
// on_exceed, unknown_scene), not shadow scenes.
func (s *seed) decide(ctx context.Context, data []byte) (gate.Outcome, error) {
	var env seedEnvelope
	if err := json.Unmarshal(data, &env); err != nil {
		return "", fmt.Errorf("seed decode: %w", err)
	}
	if env.Priority == "" {
		env.Priority = gate.PriorityNormal
	}
	recipient := env.ReceiveIDType + ":" + env.ReceiveID
	rule, ok := s.rs.Scene(env.Scene)
	if !ok {
		return s.apply(ctx, env, recipient, data, s.rs.UnknownScene, "unknown_scene", nil)
	}
	checks := make([]seedCheck, 0, len(rule.Limits)+len(s.rs.RecipientCaps))
	for i, l := range rule.Limits {
		checks = append(checks, seedCheck{key: s.prefix + ":" + recipient + ":" + env.Scene + ":" + strconv.Itoa(i), scope: gate.ScopeScene, limit: l})
	}
	for i, l := range s.rs.RecipientCaps {
		checks = append(checks, seedCheck{key: s.prefix + ":" + recipient + ":cap:" + strconv.Itoa(i), scope: gate.ScopeRecipient, limit: l})
	}
	now := time.Now().UnixMilli()
	_, err := s.redis.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i := range checks {
			c := &checks[i]
			p.ZAdd(ctx, c.key, redis.Z{Score: float64(now), Member: env.ID})
			p.ZRemRangeByScore(ctx, c.key, "-inf", strconv.FormatInt(now-c.limit.WindowMillis(), 10))
			c.card = p.ZCard(ctx, c.key)
			p.Expire(ctx, c.key, c.limit.Window)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("seed multi: %w", err)
	}
	var over *gate.Exceeded
	for _, c := range checks {
		if n := int(c.card.Val()); n > c.limit.Max {
			over = &gate.Exceeded{Scope: c.scope, Limit: c.limit, Count: n - 1}
			break
		}
	}
	if over == nil || rule.Bypasses(env.Priority) {
		return s.apply(ctx, env, recipient, data, gate.ActionForward, "", nil)
	}
	_, err = s.redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range checks {
			p.ZRem(ctx, c.key, env.ID)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("seed remove a rejected member: %w", err)
	}
	return s.apply(ctx, env, recipient, data, rule.OnExceed, "limit", over)
}

// apply carries out action on a message and returns its outcome: a
// forward published and awaited, a suppression row inserted, or nothing.
func (s *seed) apply(ctx context.Context, env seedEnvelope, recipient string, data []byte, action gate.Action, reason string, over *gate.Exceeded) (gate.Outcome, error) {
	switch action {
	case gate.ActionForward:
		m := nats.NewMsg(seedSubjectOut)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, env.ID)
		m.Header.Set(natsbus.HeaderScene, env.Scene)
		m.Header.Set(natsbus.HeaderDecision, string(gate.OutcomeForward))
		if _, err := s.js.PublishMsg(ctx, m); err != nil {
			return "", fmt.Errorf("seed forward %s: %w", env.ID, err)
		}
		return gate.OutcomeForward, nil
	case gate.ActionSuppress:
		var scope *string
		var window *int64
		var limitMax, count *int
		if over != nil {
			sc, w := string(over.Scope), over.Limit.WindowMillis()
			scope, window, limitMax, count = &sc, &w, &over.Limit.Max, &over.Count
		}
		_, err := s.db.Exec(ctx, `INSERT INTO seed_suppressions
			(message_id, scene, recipient, priority, reason, limit_scope, limit_window_ms, limit_max, count_seen, decided_at, payload)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			env.ID, env.Scene, recipient, string(env.Priority), reason, scope, window, limitMax, count, time.Now(), string(data))
		if err != nil {
			return "", fmt.Errorf("seed insert the suppression of %s: %w", env.ID, err)
		}
		return gate.OutcomeSuppress, nil
	default:
		return gate.OutcomeDrop, nil
	}
}
