package natsbus

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// testPassword is the gate user's password on the tests' embedded servers.
const testPassword = "test-gate-password"

// anonymous is a client of the server behind nc that brings no
// credentials (or those of its options), with the permission errors the
// server sends it.
type anonymous struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error
}

func connectAnonymous(t *testing.T, nc *nats.Conn, opts ...nats.Option) *anonymous {
	t.Helper()
	a := &anonymous{errs: make(chan error, 64)}
	var err error
	a.nc, err = nats.Connect(nc.ConnectedUrl(), append([]nats.Option{nats.PermissionErrOnSubscribe(true),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case a.errs <- err:
			default:
			}
		})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.nc.Close)
	if a.js, err = jetstream.New(a.nc); err != nil {
		t.Fatal(err)
	}
	return a
}

// refused waits for the server's permissions violation naming subject.
func (a *anonymous) refused(t *testing.T, what, subject string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case err := <-a.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return
			}
		case <-deadline:
			t.Errorf("%s: no permissions violation for %s", what, subject)
			return
		}
	}
}

// An anonymous client of the embedded server is a producer: it publishes
// to gate.in with a JetStream publish ack, and asks gate.check; it can
// neither refund, nor forge or read what the gate forwards, nor read what
// other producers send the gate, nor touch its streams and consumers.
func TestEmbeddedAnonymousMayOnlyProduce(t *testing.T) {
	ctx := t.Context()
	nc := startServer(t)
	b := newBusOn(t, nc)
	if _, err := b.EnsureConsumer(ctx); err != nil {
		t.Fatal(err)
	}
	check, err := nc.Subscribe(DefaultCheckSubject, func(m *nats.Msg) { _ = m.Respond([]byte("checked")) })
	if err != nil {
		t.Fatal(err)
	}
	defer check.Unsubscribe()
	if _, err := b.js.Publish(ctx, DefaultOutSubject, []byte("forwarded")); err != nil {
		t.Fatal(err)
	}
	p := connectAnonymous(t, nc)

	// What a producer does.
	ack, err := p.js.Publish(ctx, DefaultInSubject, []byte(`{"id":"m1"}`))
	if err != nil {
		t.Fatalf("publish to %s: %v", DefaultInSubject, err)
	}
	if ack.Stream != StreamIn {
		t.Errorf("publish to %s: acked by stream %q, want %q", DefaultInSubject, ack.Stream, StreamIn)
	}
	reply, err := p.nc.RequestWithContext(ctx, DefaultCheckSubject, []byte(`{}`))
	if err != nil {
		t.Fatalf("request %s: %v", DefaultCheckSubject, err)
	}
	if got, want := string(reply.Data), "checked"; got != want {
		t.Errorf("check answer = %q, want %q", got, want)
	}

	// What it may not.
	for _, subject := range []string{DefaultOutSubject, DefaultRefundSubject, DefaultSentSubject} {
		if err := p.nc.Publish(subject, []byte(`{"id":"m1"}`)); err != nil {
			t.Fatal(err)
		}
		p.refused(t, "publish to "+subject, subject)
	}
	// Subscribing to what other producers send (gate.in, gate.check,
	// gate.cancel) would show their messages and the reply subjects of
	// their checks.
	for _, subject := range []string{DefaultOutSubject, DefaultDeadSubject, EmbeddedInboxPrefix + ".>",
		DefaultInSubject, DefaultCheckSubject, DefaultCancelSubject, DefaultRefundSubject, "gate.>", ">"} {
		sub, err := p.nc.SubscribeSync(subject)
		if err == nil {
			_, err = sub.NextMsg(10 * time.Second)
		}
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("subscribe to %s: err = %v, want a permissions violation", subject, err)
		}
	}
	api := func(what string, subject string, call func(ctx context.Context) error) {
		t.Helper()
		// A refused request gets no answer: it ends with its context.
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := call(actx); err == nil {
			t.Errorf("%s: succeeded", what)
		}
		p.refused(t, what, subject)
	}
	api("delete the gate consumer", "$JS.API.CONSUMER.DELETE."+StreamIn+"."+ConsumerName, func(ctx context.Context) error {
		return p.js.DeleteConsumer(ctx, StreamIn, ConsumerName)
	})
	api("delete GATE_DEAD", "$JS.API.STREAM.DELETE."+StreamDead, func(ctx context.Context) error {
		return p.js.DeleteStream(ctx, StreamDead)
	})
	api("purge GATE_OUT", "$JS.API.STREAM.PURGE."+StreamOut, func(ctx context.Context) error {
		// As an attacker would: the API request itself (Stream's look-up
		// would be refused first).
		_, err := p.nc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+StreamOut, nil)
		return err
	})

	// The gate's side is untouched.
	if _, err := b.js.Consumer(ctx, StreamIn, ConsumerName); err != nil {
		t.Errorf("the gate consumer: %v", err)
	}
	if _, err := b.js.Stream(ctx, StreamDead); err != nil {
		t.Errorf("stream %s: %v", StreamDead, err)
	}
	out, err := b.js.Stream(ctx, StreamOut)
	if err != nil {
		t.Fatal(err)
	}
	info, err := out.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := info.State.Msgs, uint64(1); got != want {
		t.Errorf("GATE_OUT holds %d messages, want %d (the gate's own, neither forged nor purged)", got, want)
	}
}

// A producer listening on every inbox (_INBOX.>, where its own replies
// arrive) does not see the messages the gate's consumer pulls: they come
// to the gate's inbox prefix.
func TestEmbeddedProducerCannotReadTheGatesDeliveries(t *testing.T) {
	ctx := t.Context()
	nc := startServer(t)
	b := newBusOn(t, nc)
	cons, err := b.EnsureConsumer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sniffer := connectAnonymous(t, nc)
	seen, err := sniffer.nc.SubscribeSync(nats.InboxPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	if err := sniffer.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	const secret = `{"id":"m1","text":"for the gate only"}`
	if _, err := connectAnonymous(t, nc).js.Publish(ctx, DefaultInSubject, []byte(secret)); err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, string(m.Data()))
	}
	if len(got) != 1 || got[0] != secret {
		t.Fatalf("the gate fetched %q, want the message", got)
	}
	// The server routed any copy to the sniffer before the gate's; a
	// round trip later it has arrived.
	if err := sniffer.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	n, _, err := seen.Pending()
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		m, err := seen.NextMsg(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(m.Data), "for the gate only") {
			t.Errorf("a producer read the gate's delivery on %s", m.Subject)
		}
	}
}
