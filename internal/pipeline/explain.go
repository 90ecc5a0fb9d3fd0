package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// Explainer answers "why, and when is the next one" (GET /v1/explain):
// the explanation front end of the core. It decides a message of a scene
// to a recipient as the core would now, a dry run through plan, wait,
// admit and resolve, and never commits; then it reads the state of each
// limit of the scene and each recipient cap (one dry-run probe each, in
// one Admit call: gate.LimitProbes) and the recipient's held queues of the
// scene. It records nothing: no window slot, no ledger row, no audit row.
// It is safe for concurrent use.
type Explainer struct {
	o    ExplainOptions
	core core
}

// ExplainOptions are an Explainer's dependencies. Rules and Store are
// required.
type ExplainOptions struct {
	Rules gate.RuleSource
	Store gate.WindowStore
	// Holds, when set, lets the decision see the queues it would wait
	// behind (reason queued), as a check's does.
	Holds gate.HoldStore
	// Held, when set, summarises the recipient's held queues of the
	// scene; without it the answer says they are unknown.
	Held gate.HeldLister
	// Preferences, when set, are the recipients' preferences.
	Preferences gate.PreferenceStore
	// Now is the gate's clock (quiet hours, mutes); time.Now by default.
	Now     func() time.Time
	Metrics *metrics.Metrics // optional
	Log     *slog.Logger     // optional
}

// explainPolicy is the Explainer's: answered (a refusal fails the
// explanation alone, with the store's words), with the tightest limit,
// never failing open (an explanation of a store that did not answer says
// so: 503) and recording nothing.
var explainPolicy = &policy{name: "explain", answered: true, tightest: true}

// NewExplainer checks the options and returns an Explainer.
func NewExplainer(o ExplainOptions) (*Explainer, error) {
	if o.Rules == nil || o.Store == nil {
		return nil, errors.New("explainer: rules and store are required")
	}
	defaults(&o.Log, &o.Now)
	instrument(o.Metrics, &o.Store, nil, &o.Holds, &o.Preferences, nil)
	return &Explainer{o: o, core: newCore(o.Store, nil, o.Holds, o.Preferences, nil, o.Metrics, o.Log, o.Now)}, nil
}

// Explain explains what a message of scene to recipient
// (receive_id_type:receive_id), of priority and in time zone tz (either
// may be empty), would get now. Its errors wrap gate.ErrBadRequest for a
// question that is not valid, or gate.ErrUnavailable (with ErrCheckStore)
// when a store did not answer.
func (x *Explainer) Explain(ctx context.Context, recipient, scene, priority, tz string) (gate.Explanation, error) {
	id := explainID()
	m, err := gate.ParseExplain(id, recipient, scene, priority, tz)
	if err != nil {
		return gate.Explanation{}, err
	}
	rules := x.o.Rules.Current()
	items := []item{{key: id, msg: m, dryRun: true}}
	_ = x.core.decide(ctx, explainPolicy, rules, items, nil) // an unordered policy fails the item, not the call
	it := &items[0]
	if it.state != decided {
		return gate.Explanation{}, it.err
	}
	e := gate.Explanation{Recipient: m.Recipient(), Scene: m.Scene, Priority: m.Priority, TZ: m.TZ, RulesVersion: rules.Version}
	if it.plan.Known {
		if e.Limits, err = x.limits(ctx, rules, it.plan, m, id); err != nil {
			return gate.Explanation{}, err
		}
		if e.HeldQueues, e.HeldQueuesKnown, err = x.held(ctx, it.plan, m); err != nil {
			return gate.Explanation{}, err
		}
	} else {
		e.HeldQueues, e.HeldQueuesKnown = []gate.HeldQueueSummary{}, true
	}
	if e.Limits == nil {
		e.Limits = []gate.LimitState{}
	}
	e.Complete(rules, it.plan, it.dec, m, x.o.Now())
	return e, nil
}

// limits reads the state of every limit of m's scene and every recipient
// cap, in one Admit call of dry-run probes.
func (x *Explainer) limits(ctx context.Context, rules *gate.RuleSet, p gate.Plan, m gate.Message, id string) ([]gate.LimitState, error) {
	n := 0
	probes := gate.LimitProbes(rules, p.Rule, m.Recipient(), m.Scene, p.Zone, func() string {
		n++
		return id + ":" + strconv.Itoa(n)
	})
	if len(probes) == 0 {
		return nil, nil
	}
	reqs := make([]gate.AdmitRequest, len(probes))
	for i, pr := range probes {
		reqs[i] = pr.Request
	}
	res, err := x.core.store.Admit(ctx, reqs)
	if err != nil {
		if refusedForGood(err) {
			return nil, refusedBy("window", err)
		}
		return nil, explainPolicy.unavailable("window", "explain", err)
	}
	states := make([]gate.LimitState, len(probes))
	for i, pr := range probes {
		states[i] = pr.StateOf(res[i])
	}
	return states, nil
}

// held summarises the recipient's two queues of m's scene: its deferred
// messages' and its digest's. known is false without a HeldLister.
func (x *Explainer) held(ctx context.Context, p gate.Plan, m gate.Message) (_ []gate.HeldQueueSummary, known bool, _ error) {
	if x.o.Held == nil {
		return nil, false, nil
	}
	r := m.Recipient()
	qs := []gate.HeldQueueSummary{{Queue: m.Scene, Kind: gate.HoldDefer}, {Queue: p.Rule.DigestQueue(m.Scene), Kind: gate.HoldDigest}}
	found, err := x.o.Held.HeldQueues(ctx, r, []gate.Queue{{Recipient: r, Name: qs[0].Queue}, {Recipient: r, Name: qs[1].Queue}})
	if err != nil {
		return nil, false, explainPolicy.unavailable("audit", "held_queues", err)
	}
	for _, f := range found {
		for i := range qs {
			if qs[i].Queue == f.Queue {
				qs[i].Count, qs[i].OldestHeldAt, qs[i].NextDueAt = f.Count, f.OldestHeldAt.UTC(), f.NextDueAt.UTC()
			}
		}
	}
	return qs, true, nil
}

// explainID is a fresh id for an explanation's dry runs, never a
// duplicate of a message's.
func explainID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "explain:" + hex.EncodeToString(b[:])
}
