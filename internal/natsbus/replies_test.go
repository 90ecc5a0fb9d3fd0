package natsbus

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// TestServeChecksRefusesReplySubjects: a check whose reply subject is one
// of the gate's subjects, one its streams capture, JetStream's API or a
// configured one is neither decided nor answered, and is counted; a check
// with an inbox for a reply is answered as before. (A reply on gate.out
// used to land in GATE_OUT as if the gate had forwarded it, one on
// _GATE_INBOX in the gate's own pull deliveries.)
func TestServeChecksRefusesReplySubjects(t *testing.T) {
	var logs lockedLog
	b, err := New(t.Context(), startServer(t), Options{}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	js := b.JetStream()
	// An operator's extra subject on GATE_OUT is the gate's too.
	out, err := js.Stream(t.Context(), StreamOut)
	if err != nil {
		t.Fatal(err)
	}
	cfg := out.CachedInfo().Config
	cfg.Subjects = append(cfg.Subjects, "out.copy")
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	// Core subscribers on the subjects no stream captures see what
	// would have been answered there.
	seen := make(chan *nats.Msg, 16)
	for _, subject := range []string{"ops.audit.>", "$JS.API.x", EmbeddedInboxPrefix + ".pull.>"} {
		sub, err := b.nc.ChanSubscribe(subject, seen)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}

	m := metrics.New(prometheus.NewRegistry())
	var calls atomic.Int64
	serveChecksWith(t, b, func(context.Context, []byte) (gate.CheckAnswer, error) {
		calls.Add(1)
		return gate.CheckAnswer{Decision: gate.OutcomeForward, Admitted: true}, nil
	}, CheckOptions{Status: status, InFlight: 1, RefusedReplies: []string{"ops.*.>"}, Metrics: m})
	calls.Store(0) // the pings that waited for the subscription

	refused := []string{"gate.out", "gate.in", "gate.dead", "gate.refund", "gate.check", "out.copy", "$JS.API.x", "ops.audit.x", "gate.*", ">",
		// The gate's own inbox, where its consumer's pulled messages arrive:
		// an answer there would be taken for a message of GATE_IN.
		EmbeddedInboxPrefix + ".pull.1"}
	for _, reply := range refused {
		if err := b.nc.PublishRequest(DefaultCheckSubject, reply, []byte(`{"id":"c","scene":"s","receive_id":"u"}`)); err != nil {
			t.Fatal(err)
		}
	}
	// Handled in order on the subscription, one at a time: once this one
	// is answered, every request before it was refused or answered (the
	// flush has the server take those before it).
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if a, e := request(t, b, `{"id":"d","scene":"s","receive_id":"u"}`); e.Error != "" || a.Decision != gate.OutcomeForward {
		t.Errorf("a check with an inbox reply: %+v %+v, want its answer", a, e)
	}
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("%d checks decided, want 1 (the one with an inbox reply)", got)
	}
	var counted dto.Metric
	if err := m.CheckRepliesRefused.Write(&counted); err != nil || counted.GetCounter().GetValue() != float64(len(refused)) {
		t.Errorf("gate_check_replies_refused_total = %v (err %v), want %d", counted.GetCounter().GetValue(), err, len(refused))
	}
	for _, name := range []string{StreamIn, StreamOut, StreamDead, StreamRefund} {
		s, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.CachedInfo().State.Msgs; n != 0 {
			t.Errorf("%s holds %d messages, want none: a check was answered into it", name, n)
		}
	}
	select {
	case msg := <-seen:
		t.Errorf("a check was answered on %s: %s", msg.Subject, msg.Data)
	default:
	}
	// Logged once for the run, not once each.
	if got := logs.String(); strings.Count(got, `msg="check refused`) != 1 || !strings.Contains(got, "reply=gate.out") {
		t.Errorf("log:\n%s\nwant one line on the refusals, naming the first reply subject", got)
	}
}

// lockedLog is a log's output, written from several goroutines.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestRefusedReplyTakesNoSlot: a refused check is refused while every
// slot is taken, so refusals cost a slot nobody else could use.
func TestRefusedReplyTakesNoSlot(t *testing.T) {
	b := newBus(t.Context(), t)
	m := metrics.New(prometheus.NewRegistry())
	entered, release := make(chan struct{}), make(chan struct{})
	serveChecksWith(t, b, func(_ context.Context, body []byte) (gate.CheckAnswer, error) {
		if string(body) == "block" {
			close(entered)
			<-release
		}
		return gate.CheckAnswer{Decision: gate.OutcomeForward}, nil
	}, CheckOptions{Status: status, InFlight: 1, Metrics: m})
	// Runs before ServeChecks is stopped, which waits for the blocked check.
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free)
	answered := make(chan error, 1)
	go func() {
		_, err := producerOf(t, b).Request(DefaultCheckSubject, []byte("block"), time.Minute)
		answered <- err
	}()
	<-entered // the one slot is taken
	for range 3 {
		if err := b.nc.PublishRequest(DefaultCheckSubject, "gate.out", []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "three refusals while the slot is taken", func() bool {
		var counted dto.Metric
		return m.CheckRepliesRefused.Write(&counted) == nil && counted.GetCounter().GetValue() == 3
	})
	free()
	if err := <-answered; err != nil {
		t.Errorf("the check that held the slot: %v", err)
	}
}

// TestServeChecksRefusesMalformedRefusedReplies: a configured subject
// that is not one stops ServeChecks at start.
func TestServeChecksRefusesMalformedRefusedReplies(t *testing.T) {
	b := newBus(t.Context(), t)
	err := b.ServeChecks(t.Context(), func(context.Context, []byte) (gate.CheckAnswer, error) {
		return gate.CheckAnswer{}, nil
	}, CheckOptions{Status: status, RefusedReplies: []string{"ops..audit"}})
	if err == nil || !strings.Contains(err.Error(), `"ops..audit" is not a NATS subject`) {
		t.Errorf("ServeChecks with a malformed refused subject: %v, want it refused", err)
	}
}

// TestRefusedReply: NATS's subject matching, wildcards on either side.
func TestRefusedReply(t *testing.T) {
	own := []string{"gate.in", "gate.out", "ops.*.audit", "tail.>"}
	for reply, want := range map[string]bool{
		"gate.in": true, "gate.out": true, "$JS.API.STREAM.INFO.GATE_IN": true, "$SYS.REQ.x": true, "$KV.b.k": true,
		"ops.eu.audit": true, "tail.x.y": true, "gate.*": true, ">": true, "*.in": true,
		"_INBOX.abc.1": false, "gate.inbox": false, "gate.in.x": false, "ops.eu.audit.x": false, "tail": false, "gate": false,
	} {
		if got := refusedReply(reply, own); got != want {
			t.Errorf("refusedReply(%q) = %v, want %v", reply, got, want)
		}
	}
}
