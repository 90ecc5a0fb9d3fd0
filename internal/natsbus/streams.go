package natsbus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultStreamWatch is how often gate serve looks for a lost stream
// (WatchStreams).
const DefaultStreamWatch = 5 * time.Second

// streams are the gate's streams as it creates them: GATE_IN, GATE_OUT,
// GATE_DEAD and GATE_REFUND.
func (b *Bus) streams() []jetstream.StreamConfig {
	return []jetstream.StreamConfig{b.inStream(), b.outStream(), b.deadStream(), b.refundStream()}
}

// inStream is GATE_IN: a work queue (a message leaves it once the gate
// acks it), so it holds only undecided work.
func (b *Bus) inStream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: StreamIn, Subjects: []string{b.opts.InSubject}, Storage: jetstream.FileStorage, Replicas: b.newReplicas(),
		Retention: jetstream.WorkQueuePolicy, MaxAge: b.opts.InMaxAge,
		MaxMsgSize: b.opts.MaxMsgBytes, Duplicates: 2 * time.Minute,
		Description: "notifications waiting for the anti-fatigue gate",
	}
}

func (b *Bus) outStream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: StreamOut, Subjects: []string{b.opts.OutSubject}, Storage: jetstream.FileStorage, Replicas: b.newReplicas(),
		Retention: jetstream.LimitsPolicy, MaxAge: b.opts.OutMaxAge, Duplicates: b.opts.OutDuplicates,
		Description: "notifications the gate forwarded",
	}
}

func (b *Bus) deadStream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: StreamDead, Subjects: []string{b.opts.DeadSubject}, Storage: jetstream.FileStorage, Replicas: b.newReplicas(),
		Retention: jetstream.LimitsPolicy, MaxAge: b.opts.DeadMaxAge, Duplicates: 2 * time.Hour,
		Description: "messages the gate could not decide, with a Gate-Error header",
	}
}

// createMissing creates the stream cfg if there is none of its name, and
// reports whether it did. One that exists must capture cfg's subject; its
// other settings are the operator's.
func (b *Bus) createMissing(ctx context.Context, cfg jetstream.StreamConfig) (created bool, err error) {
	s, err := b.js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := b.js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return false, fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up stream %s: %w", cfg.Name, err)
	}
	return false, captures(s, cfg)
}

// captures says whether the stream s captures cfg's subject.
func captures(s jetstream.Stream, cfg jetstream.StreamConfig) error {
	have := s.CachedInfo().Config.Subjects
	if slices.Contains(have, cfg.Subjects[0]) {
		return nil
	}
	return fmt.Errorf("stream %s exists but does not capture subject %s (it captures %v)", cfg.Name, cfg.Subjects[0], have)
}

// CheckStreams is a readiness check: it fails while one of the gate's
// streams is missing (WatchStreams recreates it) or no longer captures its
// subject, naming each.
func (b *Bus) CheckStreams(ctx context.Context) error {
	var problems []string
	for _, cfg := range b.streams() {
		s, err := b.js.Stream(ctx, cfg.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			problems = append(problems, cfg.Name+" is missing")
		case err != nil:
			return fmt.Errorf("look up stream %s: %w", cfg.Name, err)
		default:
			if err := captures(s, cfg); err != nil {
				problems = append(problems, err.Error())
			}
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// WatchStreams recreates every one of the gate's streams that goes
// missing, every interval, until ctx ends, as the work loops recreate a
// lost consumer: a stream deleted by hand would otherwise fail each
// forward or dead letter to it for good. Meanwhile those fail and are
// retried, and CheckStreams fails. A stream that cannot be recreated is
// logged once, until it can.
func (b *Bus) WatchStreams(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := map[string]string{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, cfg := range b.streams() {
			created, err := b.createMissing(ctx, cfg)
			if ctx.Err() != nil {
				return
			}
			switch {
			case created:
				b.log.Warn("stream lost, recreated it", "stream", cfg.Name, "subjects", cfg.Subjects)
			case err != nil && failing[cfg.Name] != err.Error():
				b.log.Error("stream unusable, retrying", "stream", cfg.Name, "err", err)
			}
			if err != nil {
				failing[cfg.Name] = err.Error()
			} else {
				delete(failing, cfg.Name)
			}
		}
	}
}
