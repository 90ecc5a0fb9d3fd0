package natsbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/nats-io/nats.go"
)

// serveChecks runs ServeChecks on b until the test ends, and checks that it
// returns nil then.
func serveChecks(t *testing.T, b *Bus, check CheckFunc) {
	t.Helper()
	serveChecksWith(t, b, check, CheckOptions{Status: status})
}

// serveChecksWith is serveChecks with options o.
func serveChecksWith(t *testing.T, b *Bus, check CheckFunc, o CheckOptions) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- b.ServeChecks(ctx, func(ctx context.Context, body []byte) (gate.CheckAnswer, error) {
			return check(ctx, body)
		}, o)
	}()
	// The subscription is in place once a request is answered.
	go func() {
		defer close(ready)
		for {
			if _, err := producerOf(t, b).Request(b.opts.CheckSubject, []byte(`ping`), time.Second); err == nil || ctx.Err() != nil {
				return
			}
		}
	}()
	<-ready
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeChecks: %v", err)
		}
	})
}

// status stands for httpapi.Status, which cmd/gate hands ServeChecks (an
// adapter imports no other): the statuses of the classes a check meets.
func status(c gate.Class) int {
	switch c {
	case gate.ClassPark:
		return 400
	case gate.ClassUnavailable:
		return 503
	}
	return 500
}

// producers holds a producer's connection to each bus's server.
var producers sync.Map // *Bus → *nats.Conn

// producerOf is a connection to b's server without credentials, a
// producer's, whose inbox the checks' reply guard lets be answered (the
// gate's own, EmbeddedInboxPrefix, it refuses).
func producerOf(t *testing.T, b *Bus) *nats.Conn {
	t.Helper()
	if nc, ok := producers.Load(b); ok {
		return nc.(*nats.Conn)
	}
	nc, err := nats.Connect(b.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	if prior, loaded := producers.LoadOrStore(b, nc); loaded {
		nc.Close()
		return prior.(*nats.Conn)
	}
	t.Cleanup(func() { producers.Delete(b); nc.Close() })
	return nc
}

// request sends body on b's check subject, as a producer, and decodes the
// reply.
func request(t *testing.T, b *Bus, body string) (gate.CheckAnswer, checkError) {
	t.Helper()
	msg, err := producerOf(t, b).Request(b.opts.CheckSubject, []byte(body), 5*time.Second)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	var a gate.CheckAnswer
	var e checkError
	if err := json.Unmarshal(msg.Data, &e); err != nil {
		t.Fatalf("reply %s: %v", msg.Data, err)
	}
	if e.Error == "" {
		if err := json.Unmarshal(msg.Data, &a); err != nil {
			t.Fatalf("reply %s: %v", msg.Data, err)
		}
	}
	return a, e
}

func TestServeChecksAnswers(t *testing.T) {
	b := newBus(t.Context(), t)
	serveChecks(t, b, func(_ context.Context, body []byte) (gate.CheckAnswer, error) {
		switch string(body) {
		case "down":
			return gate.CheckAnswer{}, fmt.Errorf("redis at 10.0.0.1: %w", gate.ErrUnavailable)
		case "bug":
			return gate.CheckAnswer{}, errors.New("nil map")
		}
		req, err := gate.ParseCheck(body)
		if err != nil {
			return gate.CheckAnswer{}, err
		}
		return gate.CheckAnswer{Decision: gate.OutcomeForward, Admitted: true, RulesVersion: req.Message.ID}, nil
	})
	a, e := request(t, b, `{"id":"c1","scene":"s","receive_id":"u"}`)
	if e.Error != "" || a.Decision != gate.OutcomeForward || !a.Admitted || a.RulesVersion != "c1" {
		t.Errorf("got %+v %+v, want the answer to c1", a, e)
	}
	for body, want := range map[string]int{`{"id":1}`: 400, `down`: 503, `bug`: 500} {
		_, e := request(t, b, body)
		if e.Status != want || e.Error == "" {
			t.Errorf("%s: got %+v, want status %d with an error", body, e, want)
		}
		if body != `{"id":1}` && (e.Error == "nil map" || len(e.Error) == 0) {
			t.Errorf("%s: got %q", body, e.Error)
		}
	}
}

// TestServeChecksQueueGroup: two gates share gate.check; each request is
// answered once, by one of them.
func TestServeChecksQueueGroup(t *testing.T) {
	b1 := newBus(t.Context(), t)
	b2 := newBusOn(t, connect(t, b1.nc))
	var calls atomic.Int64
	var mu sync.Mutex
	by := map[string]int{}
	count := func(who string) CheckFunc {
		return func(context.Context, []byte) (gate.CheckAnswer, error) {
			calls.Add(1)
			mu.Lock()
			by[who]++
			mu.Unlock()
			return gate.CheckAnswer{Decision: gate.OutcomeDrop}, nil
		}
	}
	serveChecks(t, b1, count("one"))
	serveChecks(t, b2, count("two"))
	calls.Store(0) // the pings that waited for the subscriptions
	const n = 50
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if a, e := request(t, b1, `{}`); a.Decision != gate.OutcomeDrop {
				t.Errorf("got %+v %+v", a, e)
			}
		})
	}
	wg.Wait()
	if got := calls.Load(); got != n {
		t.Errorf("%d requests answered by %d calls, want one call each", n, got)
	}
}

// TestServeChecksIgnoresNoReply: a check nobody reads is not decided.
func TestServeChecksIgnoresNoReply(t *testing.T) {
	b := newBus(t.Context(), t)
	var calls atomic.Int64
	serveChecks(t, b, func(context.Context, []byte) (gate.CheckAnswer, error) {
		calls.Add(1)
		return gate.CheckAnswer{}, nil
	})
	calls.Store(0)
	if err := b.nc.Publish(DefaultCheckSubject, []byte(`{"id":"c"}`)); err != nil {
		t.Fatal(err)
	}
	// Handled in order on the subscription: once this one is answered, the
	// publish before it was seen.
	request(t, b, `{"id":"d"}`)
	if got := calls.Load(); got != 1 {
		t.Errorf("%d checks decided, want 1 (the request with a reply subject)", got)
	}
}

// TestServeChecksOnItsSubject: a bus whose CheckSubject is set answers
// checks there, and nothing answers on gate.check.
func TestServeChecksOnItsSubject(t *testing.T) {
	b, err := New(t.Context(), startServerWith(t, EmbeddedOptions{CheckSubject: "ops.check"}), Options{CheckSubject: "ops.check"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	serveChecks(t, b, func(context.Context, []byte) (gate.CheckAnswer, error) {
		return gate.CheckAnswer{Decision: "forward", Admitted: true}, nil
	})
	if a, e := request(t, b, `{"id":"x"}`); e.Error != "" || a.Decision != "forward" {
		t.Errorf("check on ops.check: %+v, %+v; want the answer", a, e)
	}
	if _, err := b.nc.Request(DefaultCheckSubject, []byte(`{"id":"x"}`), 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("check on %s: %v, want no responders", DefaultCheckSubject, err)
	}
}

// TestServeChecksNeedsStatus: without the map of classes to statuses a
// failed check's reply could not say its status; ServeChecks refuses to
// start rather than answer 0.
func TestServeChecksNeedsStatus(t *testing.T) {
	b := newBus(t.Context(), t)
	err := b.ServeChecks(t.Context(), func(context.Context, []byte) (gate.CheckAnswer, error) {
		return gate.CheckAnswer{}, nil
	}, CheckOptions{})
	if err == nil || !strings.Contains(err.Error(), "Status is required") {
		t.Errorf("ServeChecks without Status: %v, want it refused", err)
	}
}
