package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// seedBaseline runs the seed design on its own stream: one message at a
// time (a pull of one), decoded, then MULTI ZADD / ZREMRANGEBYSCORE / ZCARD /
// EXPIRE on the (recipient, scene) key with the scene's first window, then a
// synchronous ack (DoubleAck). It is measured from a full stream, so no
// publisher competes with it, which favours the seed. Its messages are bodies
// alone, without the gate's headers: the seed decoded the body.
func (r *runner) seedBaseline(ctx context.Context, rs *gate.RuleSet, data [][]byte) (phase, error) {
	js := r.pub.js
	const stream, subject, durable = "SEED_IN", "seed.in", "seed"
	if _, err := ensureWorkQueue(ctx, js, stream, subject); err != nil {
		return phase{}, err
	}
	defer func() { _ = js.DeleteStream(context.Background(), stream) }()
	if _, err := r.pub.publish(ctx, subject, messages{data: data}, 0); err != nil {
		return phase{}, fmt.Errorf("fill the seed stream: %w", err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
	})
	if err != nil {
		return phase{}, fmt.Errorf("seed consumer: %w", err)
	}
	prefix := "gatebench-" + r.tag + "-seed"
	defer func() {
		if _, err := deleteKeys(context.Background(), r.redis, prefix+":*"); err != nil {
			r.logf("delete seed keys: %v", err)
		}
	}()
	meter := r.meter(0)
	before := meter.read()
	for range data {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			return phase{}, fmt.Errorf("seed next: %w", err)
		}
		if err := seedDecide(ctx, r.redis, rs, prefix, m.Data()); err != nil {
			return phase{}, err
		}
		if err := m.DoubleAck(ctx); err != nil {
			return phase{}, fmt.Errorf("seed ack: %w", err)
		}
	}
	after := meter.read()
	p := phase{n: len(data), cpu: before.to(after)}
	p.rate = float64(p.n) / p.cpu.wall.Seconds()
	return p, nil
}

// seedDecide is the seed's decision: add first, then trim and count, on the
// gate host's clock.
func seedDecide(ctx context.Context, c *redis.Client, rs *gate.RuleSet, prefix string, data []byte) error {
	var env struct {
		ID            string `json:"id"`
		Scene         string `json:"scene"`
		ReceiveIDType string `json:"receive_id_type"`
		ReceiveID     string `json:"receive_id"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return fmt.Errorf("seed decode: %w", err)
	}
	rule, ok := rs.Scene(env.Scene)
	if !ok || len(rule.Limits) == 0 {
		return nil
	}
	l := rule.Limits[0]
	key := prefix + ":" + env.ReceiveIDType + ":" + env.ReceiveID + ":" + env.Scene
	now := time.Now().UnixMilli()
	var card *redis.IntCmd
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, key, redis.Z{Score: float64(now), Member: env.ID})
		p.ZRemRangeByScore(ctx, key, "-inf", strconv.FormatInt(now-l.Window.Milliseconds(), 10))
		card = p.ZCard(ctx, key)
		p.Expire(ctx, key, l.Window)
		return nil
	})
	if err != nil {
		return fmt.Errorf("seed multi: %w", err)
	}
	_ = card.Val() <= int64(l.Max) // the seed's verdict; it forwards nothing
	return nil
}
