package natsbus

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// testSenderPassword is the sender's password on the tests' embedded
// servers that have one.
const testSenderPassword = "test-sender-password"

// startRoles runs an embedded server with a sender password, and returns
// the gate's connection and bus, with the gate's streams and the senders'
// consumer made.
func startRoles(t *testing.T) (*nats.Conn, *Bus) {
	t.Helper()
	nc := startServerWith(t, EmbeddedOptions{SenderPassword: testSenderPassword})
	b := newBusOn(t, nc)
	if _, err := b.EnsureConsumer(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureSenderConsumer(t.Context()); err != nil {
		t.Fatal(err)
	}
	return nc, b
}

// streamMsgs is how many messages stream holds.
func streamMsgs(t *testing.T, b *Bus, stream string) uint64 {
	t.Helper()
	s, err := b.js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// A producer's publish ack goes to the reply subject it picked, in its own
// account: a reply of gate.out, gate.dead or gate.in puts nothing into the
// gate's streams (on one account, the ack became a forward in GATE_OUT, a
// dead letter in GATE_DEAD, or a second message in GATE_IN).
func TestEmbeddedPublishAckStaysWithTheProducer(t *testing.T) {
	nc, b := startRoles(t)
	p := connectAnonymous(t, nc)
	replies := []string{DefaultOutSubject, DefaultDeadSubject, DefaultInSubject, DefaultRefundSubject, DefaultCheckSubject, EmbeddedInboxPrefix + ".x"}
	for i, reply := range replies {
		m := nats.NewMsg(DefaultInSubject)
		m.Reply = reply
		m.Header.Set(nats.MsgIdHdr, "ack-"+reply)
		m.Data = []byte(`{"id":"x"}`)
		if err := p.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		if err := p.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		_ = i
	}
	// Wait until GATE_IN holds every publish: by then their acks were sent.
	deadline := time.Now().Add(20 * time.Second)
	for streamMsgs(t, b, StreamIn) < uint64(len(replies)) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if got, want := streamMsgs(t, b, StreamIn), uint64(len(replies)); got != want {
		t.Errorf("GATE_IN holds %d messages, want %d (one per publish, no ack stored as a message)", got, want)
	}
	for _, s := range []string{StreamOut, StreamDead, StreamRefund} {
		if got := streamMsgs(t, b, s); got != 0 {
			t.Errorf("%s holds %d messages, want 0: a producer's publish ack landed there", s, got)
		}
	}
}

// The sender reads gate.out through the senders' consumer and refunds; it
// may neither produce nor touch the gate's streams, and a producer may not
// refund.
func TestEmbeddedSenderRole(t *testing.T) {
	ctx := t.Context()
	nc, b := startRoles(t)
	if _, err := b.js.Publish(ctx, DefaultOutSubject, []byte("forwarded")); err != nil {
		t.Fatal(err)
	}
	s := connectAnonymous(t, nc, nats.UserInfo(EmbeddedSender, testSenderPassword))
	js, err := jetstream.NewWithAPIPrefix(s.nc, SenderAPIPrefix)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, StreamOut, SenderConsumer)
	if err != nil {
		t.Fatalf("the senders' consumer: %v", err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		n++
		if string(m.Data()) != "forwarded" {
			t.Errorf("sender read %q", m.Data())
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Errorf("ack: %v", err)
		}
	}
	if n != 1 {
		t.Fatalf("sender read %d messages, want 1 (err %v)", n, batch.Error())
	}
	ack, err := js.Publish(ctx, DefaultRefundSubject, []byte(`{"id":"m1"}`))
	if err != nil || ack.Stream != StreamRefund {
		t.Fatalf("sender's refund: ack %+v, err %v", ack, err)
	}
	// What a sender may not: produce, forge forwards, make consumers of
	// its own (one pushing GATE_OUT onto gate.in), or read the others'.
	for _, subject := range []string{DefaultInSubject, DefaultCheckSubject, DefaultOutSubject,
		"$JS.API.CONSUMER.CREATE." + StreamOut + ".mine", SenderAPIPrefix + ".CONSUMER.CREATE." + StreamOut + ".mine"} {
		if err := s.nc.Publish(subject, []byte(`{"deliver_subject":"gate.in"}`)); err != nil {
			t.Fatal(err)
		}
		s.refused(t, "a sender's publish to "+subject, subject)
	}
	for _, subject := range []string{DefaultOutSubject, DefaultRefundSubject, DefaultInSubject, DefaultCheckSubject, ">"} {
		sub, err := s.nc.SubscribeSync(subject)
		if err == nil {
			_, err = sub.NextMsg(10 * time.Second)
		}
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("a sender's subscription to %s: err = %v, want a permissions violation", subject, err)
		}
	}
	p := connectAnonymous(t, nc)
	if err := p.nc.Publish(DefaultRefundSubject, []byte(`{"id":"m1"}`)); err != nil {
		t.Fatal(err)
	}
	p.refused(t, "a producer's refund", DefaultRefundSubject)
}
