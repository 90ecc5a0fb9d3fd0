package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/gormstore"
	"github.com/antifatigue/gate/internal/inmem"
	"github.com/antifatigue/gate/internal/pipeline"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// sink is a Forwarder that keeps the ids it was handed, in order.
type sink struct {
	mu  sync.Mutex
	ids []string
}

func (s *sink) Forward(_ context.Context, fs []gate.Forward) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range fs {
		s.ids = append(s.ids, f.MessageID)
	}
	return make([]error, len(fs))
}

func (s *sink) forwarded() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids)
}

// TestRefundAfterRelease: a deferred message is refundable once the
// releaser has forwarded it, as forwarded at its release (the audit
// store's ReleasedAt), not when it was deferred; before its release it is
// refused as not forwarded. The refund gives its slot back. Both audit
// stores, one window store on the test's clock, the real Pipeline,
// Releaser and Refunder.
func TestRefundAfterRelease(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) *gormstore.Store{
		"sqlite": func(t *testing.T) *gormstore.Store {
			return openAudit(t, gormstore.Options{SQLitePath: filepath.Join(t.TempDir(), "gate.db")})
		},
		"postgres": func(t *testing.T) *gormstore.Store {
			return openAudit(t, gormstore.Options{DatabaseURL: testenv.PostgresSchemaURL(t)})
		},
	} {
		t.Run(name, func(t *testing.T) {
			audit := open(t)
			now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
			clock := func() time.Time { return now }
			store := inmem.New(inmem.Options{Now: clock})
			rules := fixedRules{&gate.RuleSet{UnknownScene: gate.ActionForward, Version: "v1", Scenes: map[string]gate.SceneRule{
				"d": {Limits: []gate.Limit{{Window: time.Hour, Max: 1}}, OnExceed: gate.ActionDefer, MaxDefer: 6 * time.Hour},
			}}}
			out := &sink{}
			p, err := pipeline.New(pipeline.Options{Rules: rules, Store: store, Audit: audit, Holds: audit, Forwarder: out, Now: clock})
			if err != nil {
				t.Fatal(err)
			}
			rel, err := pipeline.NewReleaser(pipeline.ReleaserOptions{Rules: rules, Store: store, Holds: audit, Forwarder: out, Now: clock})
			if err != nil {
				t.Fatal(err)
			}
			ref, err := pipeline.NewRefunder(pipeline.RefunderOptions{Rules: rules, Store: store, Ledger: audit, Log: audit, Now: clock})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			seq := uint64(0)
			deliver := func(ids ...string) {
				t.Helper()
				var batch []gate.Delivery
				for _, id := range ids {
					seq++
					batch = append(batch, gate.Delivery{Data: fmt.Appendf(nil, `{"id":%q,"scene":"d","receive_id":"ou_1","content":{"text":"disk"}}`, id),
						Seq: seq, NumDelivered: 1, ReceivedAt: now})
				}
				for i, err := range p.Start(ctx, batch)() {
					if err != nil {
						t.Fatalf("deliver %s: %v", ids[i], err)
					}
				}
			}

			deliver("A", "B") // A forwarded, B deferred under 1 an hour
			if got := out.forwarded(); !slices.Equal(got, []string{"A"}) {
				t.Fatalf("forwarded %v, want [A] and B deferred", got)
			}
			if _, err := ref.Refund(ctx, body("B"), gate.RefundSourceAPI); !errors.Is(err, gate.ErrNotForwarded) {
				t.Fatalf("refund of B, deferred and not yet released = %v; want ErrNotForwarded", err)
			}

			deferredAt := now
			now = now.Add(time.Hour)
			if _, err := rel.Round(ctx); err != nil {
				t.Fatalf("release round: %v", err)
			}
			if got := out.forwarded(); !slices.Equal(got, []string{"A", "B"}) {
				t.Fatalf("forwarded %v after the window reopened, want [A B]", got)
			}
			releasedAt := now
			now = now.Add(10 * time.Minute)
			res, err := ref.Refund(ctx, body("B"), gate.RefundSourceAPI)
			if err != nil || res.AlreadyRefunded || res.MessageID != "B" || res.Scene != "d" || res.Recipient != "open_id:ou_1" ||
				!res.ForwardedAt.Equal(releasedAt) || !res.RefundedAt.Equal(now) {
				t.Fatalf("refund of B after its release = %+v, %v; want refunded now, forwarded at its release %v (deferred at %v)",
					res, err, releasedAt, deferredAt)
			}
			// B's slot is free again: the next message passes at once.
			deliver("C")
			if got := out.forwarded(); !slices.Equal(got, []string{"A", "B", "C"}) {
				t.Errorf("forwarded %v, want C forwarded in the slot B's refund gave back", got)
			}
		})
	}
}
