package gormstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/porttest"
)

func TestPostgresOutbox(t *testing.T) { runOutbox(t, postgresOptions) }

func TestSQLiteOutbox(t *testing.T) { runOutbox(t, sqliteOptions) }

// runOutbox is the outbox every dialect keeps: the forwards of settled
// messages are written in the settle transaction (none when it rolls
// back), read back in the order settled with every field, keep their queue
// waiting until Sent, and a digest's forward is written once.
func runOutbox(t *testing.T, fresh freshFunc) {
	ctx := context.Background()
	s := MustOpen(t, fresh(t))
	t0 := porttest.T0
	MustCommit(t, s,
		heldRec("m1", "disk", ou1, "disk", gate.HoldDefer, 1, t0, t0),
		heldRec("m2", "disk", ou1, "disk", gate.HoldDefer, 2, t0, t0),
		heldRec("c1", "ci", ou1, "digest:ci", gate.HoldDigest, 3, t0, t0),
		heldRec("c2", "ci", ou1, "digest:ci", gate.HoldDigest, 4, t0, t0))
	now := t0.Add(time.Hour)
	digest := gate.DigestID(qDigest, "c1", "c2")
	want := []gate.Forward{
		{MessageID: "m1", Scene: "disk", RulesVersion: "v1", ShadowOf: gate.ActionDefer, DeferredFrom: t0, Data: []byte(`{"id":"m1"}`)},
		{MessageID: "m2", Scene: "disk", RulesVersion: "v1", Bypass: true, DeferredFrom: t0, Data: []byte(`{"id":"m2"}`)},
		{MessageID: digest, Scene: "digest:ci", RulesVersion: "v1", DigestCount: 2, Data: []byte(`{"digest":2}`)},
	}
	var order []gate.Forward // the forwards as settled, once each
	decide := func(due [][]gate.Held) []gate.Settlement {
		var out []gate.Settlement
		order = nil
		for _, q := range due {
			for _, h := range q {
				st := gate.Settlement{MessageID: h.MessageID, Scene: h.Scene, Kind: gate.SettleReleased, At: now}
				switch h.MessageID {
				case "m1":
					st.Out = &want[0]
				case "m2":
					st.Out = &want[1]
				default:
					st.Kind, st.DigestID, st.Out = gate.SettleDigested, digest, &want[2]
				}
				out = append(out, st)
				if !slices.ContainsFunc(order, func(f gate.Forward) bool { return f.MessageID == st.Out.MessageID }) {
					order = append(order, *st.Out)
				}
			}
		}
		return out
	}

	// A round that fails writes nothing to the outbox.
	_, err := s.Settle(ctx, now, 10, 10, func(_ context.Context, due [][]gate.Held) ([]gate.Settlement, error) {
		decide(due)
		return nil, fmt.Errorf("fake: %w", gate.ErrUnavailable)
	})
	if err == nil {
		t.Fatal("Settle succeeded with a failing settle")
	}
	if fs, err := s.Outbox(ctx, 10); err != nil || len(fs) != 0 {
		t.Fatalf("outbox after a rolled back round: %d forwards, %v; want none", len(fs), err)
	}

	if _, n := settleAll(t, s, now, decide); n != 4 {
		t.Fatalf("settled %d, want 4", n)
	}
	got, err := s.Outbox(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(order) {
		t.Fatalf("outbox holds %d forwards, want %d (a digest once)", len(got), len(order))
	}
	for i := range order {
		g, w := got[i], order[i]
		if g.MessageID != w.MessageID || g.Scene != w.Scene || g.RulesVersion != w.RulesVersion || g.ShadowOf != w.ShadowOf ||
			g.Bypass != w.Bypass || !g.DeferredFrom.Equal(w.DeferredFrom) || g.DigestCount != w.DigestCount || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("outbox[%d] = %+v, want %+v", i, g, w)
		}
	}
	if first, _ := s.Outbox(ctx, 1); len(first) != 1 || first[0].MessageID != order[0].MessageID {
		t.Errorf("Outbox(1) = %v, want %s alone, the first settled", first, order[0].MessageID)
	}
	// Both queues are empty of held messages, and wait while their
	// forwards are out.
	if w := waiting(t, s, qDisk, qDigest); !w[qDisk] || !w[qDigest] {
		t.Errorf("waiting %v while the outbox holds their forwards, want both", w)
	}
	if err := s.Sent(ctx, []string{"m1", "m2", "not-there"}); err != nil {
		t.Fatal(err)
	}
	if w := waiting(t, s, qDisk, qDigest); w[qDisk] || !w[qDigest] {
		t.Errorf("waiting %v after disk's forwards were sent, want digest:ci alone", w)
	}
	if err := s.Sent(ctx, []string{digest}); err != nil {
		t.Fatal(err)
	}
	if fs, _ := s.Outbox(ctx, 10); len(fs) != 0 {
		t.Errorf("outbox holds %v after every forward was sent", fs)
	}
	if _, err := s.Outbox(ctx, 0); !errors.Is(err, gate.ErrBadRequest) {
		t.Errorf("Outbox(0) = %v, want a bad request", err)
	}
}

// A settlement must carry its forward exactly when it lets a message out.
func TestSQLiteOutboxRefusesSettlementsWithoutTheirForward(t *testing.T) {
	s := MustOpen(t, sqliteOptions(t))
	t0 := porttest.T0
	MustCommit(t, s, heldRec("m1", "disk", ou1, "disk", gate.HoldDefer, 1, t0, t0))
	for _, st := range []gate.Settlement{
		{MessageID: "m1", Kind: gate.SettleReleased},
		{MessageID: "m1", Kind: gate.SettleReschedule, DueAt: t0.Add(time.Hour), Out: &gate.Forward{MessageID: "m1"}},
	} {
		_, err := s.Settle(context.Background(), t0, 10, 10, func(context.Context, [][]gate.Held) ([]gate.Settlement, error) {
			return []gate.Settlement{st}, nil
		})
		if !errors.Is(err, gate.ErrBadRequest) {
			t.Errorf("settling %s with forward %v: %v, want a bad request", st.Kind, st.Out != nil, err)
		}
	}
	if n := countRows(t, s, "held"); n != 1 {
		t.Errorf("%d held after refused rounds, want m1 still held", n)
	}
}
