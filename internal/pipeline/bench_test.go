package pipeline

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// holdEveryOther admits every other request and holds back the rest, as a
// busy window store would.
type holdEveryOther struct{ admitAll }

func (holdEveryOther) Admit(_ context.Context, reqs []gate.AdmitRequest) ([]gate.AdmitResult, error) {
	res := make([]gate.AdmitResult, len(reqs))
	now := time.Now()
	for i := range res {
		res[i] = gate.AdmitResult{Admitted: i%2 == 0, Now: now}
		if i%2 == 1 {
			res[i].Exceeded = &gate.Exceeded{Scope: gate.ScopeScene, Limit: reqs[i].Limits[0], Count: 1}
			res[i].NextAllowedAt = now.Add(time.Hour)
		}
	}
	return res, nil
}

// BenchmarkHandle runs batches of 256 1 KB envelopes through the pipeline
// with stores that cost nothing: the gate's own CPU and allocations per
// message, from parsing to the records it commits.
func BenchmarkHandle(b *testing.B) {
	rs := &gate.RuleSet{UnknownScene: gate.ActionForward, Scenes: map[string]gate.SceneRule{},
		RecipientCaps: []gate.Limit{{Window: time.Hour, Max: 4}, {Window: 24 * time.Hour, Max: 20}}}
	for i := range 5 {
		rs.Scenes[fmt.Sprintf("scene.%d", i)] = gate.SceneRule{OnExceed: gate.ActionSuppress,
			Limits: []gate.Limit{{Window: time.Hour, Max: 1}, {Window: 24 * time.Hour, Max: 3}}}
	}
	p, err := New(Options{Rules: staticRules{rs}, Store: holdEveryOther{}, Audit: newLedger(b), Forwarder: newOutbox(b)})
	if err != nil {
		b.Fatal(err)
	}
	const batch = 256
	run := 0
	next := func() []gate.Delivery {
		ds := make([]gate.Delivery, batch)
		for i := range ds {
			head := fmt.Sprintf(`{"id":"7f1c4d8e-2b3a-4c5d-%04x-%012x","scene":"scene.%d","receive_id_type":"open_id","receive_id":"ou_%032x","msg_type":"text","priority":"normal","content":"{\"text\":\"`,
				run%0x10000, i, i%5, i)
			ds[i] = gate.Delivery{Data: []byte(head + strings.Repeat("x", 1024-len(head)-4) + `\"}"}`), NumDelivered: 1}
		}
		run++
		return ds
	}
	ctx := b.Context()
	msgs := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		ds := next()
		b.StartTimer()
		for i, err := range handle(p, ctx, ds) {
			if err != nil {
				b.Fatalf("message %d: %v", i, err)
			}
		}
		msgs += batch
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(msgs), "ns/msg")
}
