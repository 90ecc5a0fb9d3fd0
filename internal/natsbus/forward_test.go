package natsbus

import (
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/nats-io/nats.go/jetstream"
)

// A released message says when it was first held, in RFC 3339 UTC; a
// digest says it is one and how many messages it carries; a plain forward
// says neither.
func TestForwardHeldAndDigestHeaders(t *testing.T) {
	ctx := t.Context()
	b := newBus(ctx, t)
	heldAt := time.Date(2026, 11, 22, 20, 30, 1, 234567890, time.FixedZone("UTC+8", 8*3600))
	fs := []gate.Forward{
		{MessageID: "released", Scene: "s", DeferredFrom: heldAt, Data: []byte(`{"id":"released"}`)},
		{MessageID: "digest:abc", Scene: "digest:ci", DigestCount: 3, Data: []byte(`{"id":"digest:abc"}`)},
		{MessageID: "plain", Scene: "s", Data: []byte(`{"id":"plain"}`)},
	}
	for i, err := range b.Forward(ctx, fs) {
		if err != nil {
			t.Fatalf("forward %d: %v", i, err)
		}
	}
	s, err := b.JetStream().Stream(ctx, StreamOut)
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]string{
		{jetstream.MsgIDHeader: "released", HeaderDecision: "forward", HeaderDeferredFrom: "2026-11-22T12:30:01.234Z", HeaderDigestCount: ""},
		{jetstream.MsgIDHeader: "digest:abc", HeaderScene: "digest:ci", HeaderDecision: "digest", HeaderDigestCount: "3", HeaderDeferredFrom: ""},
		{jetstream.MsgIDHeader: "plain", HeaderDecision: "forward", HeaderDeferredFrom: "", HeaderDigestCount: ""},
	}
	for i, hs := range want {
		m, err := s.GetMsg(ctx, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hs {
			if got := m.Header.Get(k); got != v {
				t.Errorf("message %d: header %s = %q, want %q", i+1, k, got, v)
			}
		}
		if string(m.Data) != string(fs[i].Data) {
			t.Errorf("message %d: data %s, want %s", i+1, m.Data, fs[i].Data)
		}
	}
	if got, err := time.Parse(time.RFC3339, want[0][HeaderDeferredFrom]); err != nil || !got.Equal(heldAt.Truncate(time.Millisecond)) {
		t.Errorf("Gate-Deferred-From parses as %v, %v; want %v", got, err, heldAt)
	}
}
