package natsbus

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// shortAckWait keeps the tests quick; every wait below is on a condition.
const shortAckWait = time.Second

// connect is one more client of the server behind nc, as another gate
// process would be.
func connect(t *testing.T, nc *nats.Conn) *nats.Conn {
	t.Helper()
	other, err := nats.Connect(nc.ConnectedUrl(), EmbeddedGate(testPassword)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	return other
}

// newBusOn is a Bus over nc with a short AckWait.
func newBusOn(t *testing.T, nc *nats.Conn) *Bus {
	t.Helper()
	b, err := New(t.Context(), nc, Options{AckWait: shortAckWait}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runStaged runs ConsumeStaged until the test ends, and checks that it
// returns nil then.
func runStaged(t *testing.T, b *Bus, start gate.BatchStarter, o ConsumeOptions) {
	t.Helper()
	runUntilEnd(t, "ConsumeStaged", func(ctx context.Context) error { return b.ConsumeStaged(ctx, start, o) })
}

// runUntilEnd runs a work loop (ConsumeStaged, ConsumeRefunds) until the
// test ends, and checks that it returns nil then.
func runUntilEnd(t *testing.T, name string, loop func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s returned %v", name, err)
		}
	})
}

// waitFor polls cond until it holds, failing after a deadline generous
// enough for a loaded machine.
func waitFor(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	t0 := time.Now()
	for !cond() {
		if time.Since(t0) > time.Minute {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(t0)
}

func consumerInfo(t *testing.T, js jetstream.JetStream) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := js.Consumer(t.Context(), StreamIn, ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	return c.CachedInfo()
}

// A batch that takes longer than AckWait keeps its message: the heartbeats
// (InProgress) hold JetStream's redelivery off, so neither this gate nor
// another gets it a second time.
func TestSlowBatchKeepsItsMessagesWithHeartbeats(t *testing.T) {
	nc := startServer(t)
	b := newBusOn(t, nc)
	js := b.JetStream()
	// The acknowledgements the gate sends, seen from another client.
	var beats atomic.Int64
	sub, err := connect(t, nc).Subscribe("$JS.ACK.>", func(m *nats.Msg) {
		if string(m.Data) == "+WPI" {
			beats.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	var mu sync.Mutex
	var deliveries []uint64 // NumDelivered of each delivery handed over
	release := make(chan struct{})
	start := func(_ context.Context, batch []gate.Delivery) func() []error {
		mu.Lock()
		for _, d := range batch {
			deliveries = append(deliveries, d.NumDelivered)
		}
		mu.Unlock()
		return func() []error {
			<-release
			return make([]error, len(batch))
		}
	}
	// Two batches in flight: a redelivered copy would be handed over while
	// the first is held.
	runStaged(t, b, start, ConsumeOptions{InFlight: 2, HandleTimeout: time.Hour})
	// A second gate on the same consumer gets nothing either.
	runStaged(t, newBusOn(t, connect(t, nc)), start, ConsumeOptions{})
	if _, err := js.Publish(t.Context(), "gate.in", []byte("slow")); err != nil {
		t.Fatal(err)
	}
	// Six heartbeats, AckWait/3 apart at least: twice AckWait has passed.
	waitFor(t, "six heartbeats", func() bool { return beats.Load() >= 6 })
	if info := consumerInfo(t, js); info.NumRedelivered != 0 || info.NumAckPending != 1 {
		t.Errorf("while the slow batch is in hand: %d redelivered, %d pending; want 0 and 1", info.NumRedelivered, info.NumAckPending)
	}
	close(release)
	waitEmpty(t, js)
	mu.Lock()
	defer mu.Unlock()
	if len(deliveries) != 1 || deliveries[0] != 1 {
		t.Errorf("deliveries handed over: %v, want one first delivery", deliveries)
	}
}

// A gate that dies with messages in hand (its connection closed, nothing
// acked) does not keep them: heartbeats stop with it, and another gate
// decides them once AckWait passes.
func TestDeadGatesMessagesGoToAnother(t *testing.T) {
	nc := startServer(t)
	dying := newBusOn(t, connect(t, nc))
	js := newBusOn(t, nc).JetStream()
	const n = 20
	for i := range n {
		if _, err := js.Publish(t.Context(), "gate.in", fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	held := make(chan []gate.Delivery, 1)
	hang := make(chan struct{})
	runStaged(t, dying, func(_ context.Context, batch []gate.Delivery) func() []error {
		select {
		case held <- batch:
		default:
		}
		return func() []error { <-hang; return make([]error, len(batch)) }
	}, ConsumeOptions{InFlight: 1, HandleTimeout: time.Hour})
	// Cleanups run last first: the hung batch ends before its consumer stops.
	t.Cleanup(func() { close(hang) })
	batch := <-held
	// Its heartbeats run: the messages stay with it past AckWait...
	waitFor(t, "the dying gate to hold its batch past AckWait", func() bool {
		return time.Since(batch[0].ReceivedAt) > 2*shortAckWait
	})
	// Only the batch in hand is heartbeated: messages the first pull
	// brought beyond it wait in the client's buffer, unheartbeated, and may
	// be redelivered (to the same gate) meanwhile; none of the batch's may.
	if info, most := consumerInfo(t, js), n-len(batch); info.NumRedelivered > most {
		t.Fatalf("%d messages redelivered while their gate lived, want at most the %d outside its batch of %d", info.NumRedelivered, most, len(batch))
	}
	// ...until it dies.
	dying.nc.Close()
	died := time.Now()

	var mu sync.Mutex
	decided := map[string]uint64{}
	runStaged(t, newBusOn(t, connect(t, nc)), func(_ context.Context, batch []gate.Delivery) func() []error {
		mu.Lock()
		for _, d := range batch {
			decided[string(d.Data)] = d.NumDelivered
		}
		mu.Unlock()
		return func() []error { return make([]error, len(batch)) }
	}, ConsumeOptions{})
	waitFor(t, "the dead gate's messages decided by the other", func() bool {
		info := consumerInfo(t, js)
		return info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream == n
	})
	t.Logf("the dead gate's messages were decided %s after it died (AckWait %s)", time.Since(died).Round(10*time.Millisecond), shortAckWait)
	mu.Lock()
	defer mu.Unlock()
	for _, d := range batch {
		if got := decided[string(d.Data)]; got < 2 {
			t.Errorf("%s, held by the dead gate: decided by the other as delivery %d, want a redelivery", d.Data, got)
		}
	}
	if len(decided) != n {
		t.Errorf("the other gate decided %d messages, want %d", len(decided), n)
	}
}

// A handler that panics (a library panicking on one input) does not end
// the process: the batch is decided again one message at a time, the
// message that panics alone is parked with the panic as its reason and
// counted, and the others are decided.
func TestPanicParksOnlyTheMessageThatPanics(t *testing.T) {
	// What a label library says of invalid UTF-8: a header cannot carry it
	// as it is.
	const boom = "label value \"sc\xffene\" is not valid UTF-8\r\nGate-Error: forged"
	for _, where := range []string{"start", "finish"} {
		t.Run("panic in "+where, func(t *testing.T) {
			nc := startServer(t)
			b := newBusOn(t, nc)
			js := b.JetStream()
			m := metrics.New(prometheus.NewRegistry())
			var mu sync.Mutex
			decided := map[string]uint64{}
			start := func(_ context.Context, batch []gate.Delivery) func() []error {
				bad := false
				for _, d := range batch {
					bad = bad || string(d.Data) == "poison"
				}
				if bad && where == "start" {
					panic(boom)
				}
				return func() []error {
					if bad {
						panic(boom)
					}
					mu.Lock()
					defer mu.Unlock()
					for _, d := range batch {
						decided[string(d.Data)] = d.NumDelivered
					}
					return make([]error, len(batch))
				}
			}
			bodies := []string{"ok-1", "ok-2", "poison", "ok-3", "ok-4"}
			var poisonSeq uint64
			for _, body := range bodies {
				ack, err := js.Publish(t.Context(), "gate.in", []byte(body))
				if err != nil {
					t.Fatal(err)
				}
				if body == "poison" {
					poisonSeq = ack.Sequence
				}
			}
			runStaged(t, b, start, ConsumeOptions{Metrics: m})
			dead := waitDead(t, js, 1)
			waitEmpty(t, js)
			if len(dead) != 1 || string(dead[0].Data) != "poison" {
				t.Fatalf("dead letters %v, want the poison message alone", dead)
			}
			reason := dead[0].Header.Get(HeaderError)
			if reason != PanicReason(boom) || !strings.HasPrefix(reason, "the gate failed on this message: ") {
				t.Errorf("Gate-Error = %q, want %q", reason, PanicReason(boom))
			}
			if !utf8.ValidString(reason) || strings.ContainsAny(reason, "\r\n") || len(dead[0].Header.Values(HeaderError)) != 1 {
				t.Errorf("Gate-Error %q: the panic's bytes reached the header", dead[0].Header.Values(HeaderError))
			}
			if got := dead[0].Header.Get(HeaderStreamSeq); got != fmt.Sprint(poisonSeq) {
				t.Errorf("Gate-Stream-Seq = %s, want %d", got, poisonSeq)
			}
			var panicked dto.Metric
			if err := m.Panicked.Write(&panicked); err != nil || panicked.GetCounter().GetValue() != 1 {
				t.Errorf("gate_panicked_messages_total = %v (err %v), want 1", panicked.GetCounter().GetValue(), err)
			}
			// The consumer goes on.
			if _, err := js.Publish(t.Context(), "gate.in", []byte("ok-5")); err != nil {
				t.Fatal(err)
			}
			waitEmpty(t, js)
			mu.Lock()
			defer mu.Unlock()
			for _, body := range append(bodies, "ok-5") {
				if _, ok := decided[body]; !ok && body != "poison" {
					t.Errorf("%s was not decided", body)
				}
			}
			if _, ok := decided["poison"]; ok {
				t.Error("the poison message was decided")
			}
		})
	}
}

func TestPanicReasonFitsAHeader(t *testing.T) {
	for _, v := range []any{"plain", "a\r\nb", "\xff\xfe", strings.Repeat("é", 1000), fmt.Errorf("wrapped: %w", gate.ErrUnavailable)} {
		got := PanicReason(v)
		if !strings.HasPrefix(got, "the gate failed on this message: ") || !utf8.ValidString(got) || strings.ContainsAny(got, "\r\n\x00") || len(got) > 1024 {
			t.Errorf("PanicReason(%q) = %q: not a header value", v, got)
		}
	}
}
