package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// party is a client of the gate's embedded NATS server in one role, with
// the permission errors the server sends it.
type party struct {
	nc   *nats.Conn
	errs chan error
}

func (e *env) party(opts ...nats.Option) *party {
	e.t.Helper()
	p := &party{errs: make(chan error, 64)}
	opts = append([]nats.Option{nats.PermissionErrOnSubscribe(true),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case p.errs <- err:
			default:
			}
		})}, opts...)
	nc, err := nats.Connect(e.natsURL, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	p.nc = nc
	return p
}

// refused waits for the server's permissions violation naming subject.
func (p *party) refused(t *testing.T, what, subject string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case err := <-p.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return
			}
		case <-deadline:
			t.Errorf("%s: no permissions violation for %s", what, subject)
			return
		}
	}
}

// The three parties of the embedded server through the gate binary:
//   - a producer's JetStream publish acks, whatever reply subject it picks
//     (gate.out, gate.dead, gate.in), stay in its own account: GATE_OUT
//     holds the gate's forwards only and GATE_DEAD nothing (on one account
//     the ack became a forward, a dead letter, or a second message);
//   - a producer may not refund (send-then-refund undid every limit);
//   - a check answered on a reply subject that a sender listens on reaches
//     the producers' account only;
//   - the sender reads the forwards through the senders' consumer and
//     refunds.
func TestEmbeddedRoles(t *testing.T) {
	e := newEnv(t, stackEmbedded, contractRules)
	e.start(nil)
	gateSide := e.client()
	producer := e.party()
	sender := e.party(nats.UserInfo(natsbus.EmbeddedSender, harnessSenderPassword))

	to := testenv.Unique("roles")
	var ids []string
	for i, reply := range []string{natsbus.DefaultOutSubject, natsbus.DefaultDeadSubject, natsbus.DefaultInSubject} {
		m := msg{ID: to + "-" + string(rune('a'+i)), Scene: "t.unknown_" + to, To: to}
		ids = append(ids, m.ID)
		nm := nats.NewMsg(natsbus.DefaultInSubject)
		nm.Reply, nm.Data = reply, m.json()
		nm.Header.Set(nats.MsgIdHdr, m.ID)
		if err := producer.nc.PublishMsg(nm); err != nil {
			t.Fatal(err)
		}
	}
	if err := producer.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	gateSide.waitIdle()
	if got, _ := gateSide.forwarded(to); !slices.Equal(got, ids) {
		t.Errorf("forwarded %v, want %v", got, ids)
	}
	if n := len(gateSide.stored(natsbus.StreamDead)); n != 0 {
		t.Errorf("GATE_DEAD holds %d messages, want none: a publish ack was stored as a message", n)
	}

	// A producer's refund is refused by the server.
	if err := producer.nc.Publish(natsbus.DefaultRefundSubject, []byte(`{"id":"`+ids[0]+`"}`)); err != nil {
		t.Fatal(err)
	}
	producer.refused(t, "a producer's refund", natsbus.DefaultRefundSubject)

	// A check answered on an inbox a sender listens on reaches producers
	// only.
	victim := nats.InboxPrefix + "victim." + to
	senderSees, err := sender.nc.SubscribeSync(victim)
	if err != nil {
		t.Fatal(err)
	}
	producerSees, err := producer.nc.SubscribeSync(victim)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(sender.nc.Flush(), producer.nc.Flush()); err != nil {
		t.Fatal(err)
	}
	check := msg{ID: to + "-check", Scene: "t.unknown_" + to, To: to}
	if err := producer.nc.PublishRequest(natsbus.DefaultCheckSubject, victim, check.json()); err != nil {
		t.Fatal(err)
	}
	if _, err := producerSees.NextMsg(20 * time.Second); err != nil {
		t.Fatalf("the check's answer never came to the producers' %s: %v", victim, err)
	}
	if m, err := senderSees.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("a producer's check was answered into a sender's inbox: %s", m.Data)
	}

	// The sender reads the forwards and refunds one.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	js, err := jetstream.NewWithAPIPrefix(sender.nc, natsbus.SenderAPIPrefix)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, natsbus.StreamOut, natsbus.SenderConsumer)
	if err != nil {
		t.Fatalf("the senders' consumer: %v", err)
	}
	batch, err := cons.Fetch(len(ids), jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var read []string
	for m := range batch.Messages() {
		read = append(read, string(m.Data()))
		if err := m.Ack(); err != nil {
			t.Error(err)
		}
	}
	if len(read) != len(ids) {
		t.Fatalf("the sender read %d forwards, want %d (%v)", len(read), len(ids), batch.Error())
	}
	ack, err := js.Publish(ctx, natsbus.DefaultRefundSubject, []byte(`{"id":"`+ids[0]+`"}`))
	if err != nil || ack.Stream != natsbus.StreamRefund {
		t.Errorf("the sender's refund: ack %+v, err %v", ack, err)
	}
}
