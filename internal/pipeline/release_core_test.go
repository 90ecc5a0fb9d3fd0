package pipeline

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// refusingStore refuses for good (gate.ErrInvalidRequest) every call that
// asks about the id bad, as a store stricter than AdmitRequest.Validate
// would; it counts its calls.
type refusingStore struct {
	*spyStore
	bad   string
	calls int
}

func (s *refusingStore) Admit(ctx context.Context, reqs []gate.AdmitRequest) ([]gate.AdmitResult, error) {
	s.calls++
	if slices.ContainsFunc(reqs, func(r gate.AdmitRequest) bool { return r.ID == s.bad }) {
		return nil, fmt.Errorf("fake: %w: id %q", gate.ErrInvalidRequest, s.bad)
	}
	return s.spyStore.Admit(ctx, reqs)
}

// A request the window store refuses for good is isolated by halves, as on
// the message path (the core's admit stage): its held message falls back
// (suppressed), as one no store could decide, and the round releases the
// others instead of failing every round after.
func TestReleaseIsolatesARefusedRequest(t *testing.T) {
	e := newReleaseEnv(t)
	st := &refusingStore{spyStore: e.store, bad: "bad"}
	r, err := NewReleaser(ReleaserOptions{Rules: staticRules{e.rules}, Store: st, Holds: e.box, Forwarder: e.out, Now: func() time.Time { return e.now }})
	if err != nil {
		t.Fatal(err)
	}
	e.r = r
	e.hold(gate.HoldDefer, "d", "d", "ok")
	e.hold(gate.HoldDefer, "q", "q", "bad")
	e.round(t)
	if got := e.out.forwarded(); !slices.Equal(got, []string{"ok"}) {
		t.Errorf("forwarded %v, want [ok]", got)
	}
	e.settled(t, map[string]gate.SettleKind{"ok": gate.SettleReleased, "bad": gate.SettleFellBack})
	if _, got := e.box.state(); got["bad"].Fallback != gate.ActionSuppress {
		t.Errorf("bad: %+v, want fallen back to suppress", got["bad"])
	}
	if st.calls != 3 {
		t.Errorf("admit called %d times, want 3 (the round, then each half)", st.calls)
	}
}
