package natsbus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// What running on a JetStream cluster asks of the bus: streams with the
// replicas the operator chose, and patience at start while the cluster
// elects the leaders of its meta group and of each stream.

// MaxReplicas is the most replicas JetStream keeps of a stream.
const MaxReplicas = 5

// DefaultStartWait is how long New waits for a JetStream cluster that
// does not answer yet (Options.StartWait): long enough for a cluster that
// starts with the gate to elect its leaders (seconds each), short enough
// that a gate pointed at a cluster that never forms says so and stops.
const DefaultStartWait = 2 * time.Minute

// JetStream API error codes that mean "not now" while a cluster forms or
// elects: no meta leader yet (temporarily unavailable), this server is not
// the leader, or not all peers known yet (no suitable peers, insufficient
// resources).
const (
	jsClusterNoPeers        jetstream.ErrorCode = 10005
	jsClusterNotAvailable   jetstream.ErrorCode = 10008
	jsClusterNotLeader      jetstream.ErrorCode = 10009
	jsInsufficientResources jetstream.ErrorCode = 10023
)

// newReplicas is how many replicas a stream the gate creates gets.
func (b *Bus) newReplicas() int { return max(1, b.opts.Replicas) }

// clusterPending reports whether err is one that a JetStream cluster that
// is starting or electing a leader answers, and that waiting cures: no
// responders, a timeout, a connection between servers, or a JetStream API
// error of the kind.
func clusterPending(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected):
		return true
	case errors.As(err, &apiErr):
		switch apiErr.ErrorCode {
		case jsClusterNoPeers, jsClusterNotAvailable, jsClusterNotLeader, jsInsufficientResources:
			return true
		}
		return apiErr.Code == 503
	}
	return false
}

// waitCluster runs f until it succeeds, and again with a growing delay
// (250ms to 5s) while it fails for a reason clusterPending names, for up
// to Options.StartWait in all. It logs what it waits for on the first
// failure and every tenth after, and once when it is over.
func (b *Bus) waitCluster(ctx context.Context, what string, f func(ctx context.Context) error) error {
	start := time.Now()
	deadline := start.Add(b.opts.StartWait)
	delay := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		// Each attempt is bounded on its own: a request a server without
		// a leader never answers must not use up the whole wait.
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			if attempt > 1 {
				b.log.Info("nats cluster ready", "for", what, "waited", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if ctx.Err() != nil || !clusterPending(err) {
			return err
		}
		if time.Now().Add(delay).After(deadline) {
			return fmt.Errorf("nats cluster not ready within %s: %w", b.opts.StartWait, err)
		}
		if attempt == 1 || attempt%10 == 0 {
			b.log.Warn("waiting for the nats cluster (leader elections)", "for", what, "attempt", attempt, "err", err)
		}
		if !sleep(ctx, delay) {
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// reconcile gives the existing stream named by want what the gate's
// settings ask of it, in one update: the replicas of Options.Replicas when
// set (a stream someone made R3 keeps its replicas under a gate that sets
// none), and for GATE_OUT the duplicate window, without which the
// pipeline's replays would not be safe. JetStream scales the stream's
// consumers with it. Each change is logged from/to. Then its byte limit
// (reconcileBytes).
func (b *Bus) reconcile(ctx context.Context, want jetstream.StreamConfig) error {
	s, err := b.js.Stream(ctx, want.Name)
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", want.Name, err)
	}
	cfg := s.CachedInfo().Config
	var changes []func()
	if r := b.opts.Replicas; r > 0 && cfg.Replicas != r {
		was := cfg.Replicas
		cfg.Replicas = r
		changes = append(changes, func() { b.log.Warn("scaled a stream", "stream", want.Name, "replicas_from", was, "replicas_to", r) })
	}
	if want.Name == StreamOut && cfg.Duplicates != want.Duplicates {
		was := cfg.Duplicates
		cfg.Duplicates = want.Duplicates
		changes = append(changes, func() {
			b.log.Info("changed the duplicate window of a stream", "stream", want.Name, "from", was, "to", want.Duplicates)
		})
	}
	if len(changes) == 0 {
		return b.reconcileBytes(ctx, want)
	}
	if _, err := b.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("update stream %s (replicas %d, duplicate window %s): %w", want.Name, cfg.Replicas, cfg.Duplicates, err)
	}
	for _, logged := range changes {
		logged()
	}
	return b.reconcileBytes(ctx, want)
}
