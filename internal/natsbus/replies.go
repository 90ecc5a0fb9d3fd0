package natsbus

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/antifatigue/gate/internal/ratelog"
)

// replyStreamsEvery is how often ServeChecks reads again the subjects the
// gate's streams capture, which an operator may have changed.
const replyStreamsEvery = time.Minute

// replyGuard decides whether a check may be answered on its reply subject.
// A requester picks the reply subject, and the answer is published there
// with the gate's own permissions: a reply subject of gate.out would put
// the answer into GATE_OUT as if it were a forward, one of $JS.API would
// call JetStream's API. So a check whose reply subject some subject of the
// gate's could match (in, out, dead, check, refund, whatever the gate's
// streams capture, and EmbeddedInboxPrefix, where its consumer's pulled
// messages arrive), that starts with $ (JetStream, the system account, KV
// and object stores), or that matches one of the configured subjects is
// refused: neither decided nor answered.
type replyGuard struct {
	b *Bus
	// refused is the configured subjects (CheckOptions.RefusedReplies).
	refused []string
	// own is the gate's subjects, those of its streams included.
	own atomic.Pointer[[]string]
	// streams is the subjects each stream captured when last read; only
	// readOwn uses it, one call at a time.
	streams map[string][]string
	metrics *metrics.Metrics
	// logged keeps refusals to one log line a minute; unlogged counts
	// those since the last line.
	logged   ratelog.Run
	unlogged atomic.Int64
}

// newReplyGuard checks the configured subjects and reads the gate's own.
func (b *Bus) newReplyGuard(ctx context.Context, refused []string, m *metrics.Metrics) (*replyGuard, error) {
	for _, s := range refused {
		if !server.IsValidSubject(s) {
			return nil, fmt.Errorf("refused reply subject %q is not a NATS subject", s)
		}
	}
	g := &replyGuard{b: b, refused: refused, metrics: m, streams: map[string][]string{}}
	g.readOwn(ctx)
	return g, nil
}

// readOwn sets the gate's subjects: the bus's, and those its streams
// capture now. A stream that cannot be read keeps the subjects it was last
// read with; the bus's subjects are refused in any case.
func (g *replyGuard) readOwn(ctx context.Context) {
	o := g.b.opts
	own := []string{o.InSubject, o.OutSubject, o.DeadSubject, o.CheckSubject, o.RefundSubject, o.CancelSubject, EmbeddedInboxPrefix + ".>"}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, cfg := range g.b.streams() {
		if s, err := g.b.js.Stream(ctx, cfg.Name); err == nil {
			g.streams[cfg.Name] = s.CachedInfo().Config.Subjects
		} else {
			g.b.log.Debug("reading a stream's subjects for the checks' reply guard", "stream", cfg.Name, "err", err)
		}
		own = append(own, g.streams[cfg.Name]...)
	}
	g.own.Store(&own)
}

// follow reads the gate's subjects again every replyStreamsEvery until ctx
// ends.
func (g *replyGuard) follow(ctx context.Context) {
	t := time.NewTicker(replyStreamsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.readOwn(ctx)
		}
	}
}

// refuses reports whether a check with reply subject reply must be
// refused, and if so counts and logs it.
func (g *replyGuard) refuses(m *nats.Msg) bool {
	if !refusedReply(m.Reply, *g.own.Load(), g.refused) {
		return false
	}
	if g.metrics != nil {
		g.metrics.CheckRepliesRefused.Inc()
	}
	g.unlogged.Add(1)
	if log, since := g.logged.Failed(time.Now()); log {
		g.b.log.Warn("check refused: its reply subject is the gate's own, JetStream's or a refused one",
			"reply", gate.OneLine(m.Reply, 256), "subject", m.Subject, "refused", g.unlogged.Swap(0), "refusing_since", since)
	}
	return true
}

// refusedReply reports whether reply starts with $ or one subject could
// match both reply and one of the lists' subjects (NATS's wildcards on
// either side).
func refusedReply(reply string, lists ...[]string) bool {
	if strings.HasPrefix(reply, "$") {
		return true
	}
	for _, l := range lists {
		for _, s := range l {
			if server.SubjectsCollide(reply, s) {
				return true
			}
		}
	}
	return false
}
