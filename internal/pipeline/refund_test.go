package pipeline_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/gormstore"
	"github.com/antifatigue/gate/internal/inmem"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/antifatigue/gate/internal/pipeline"
	"github.com/antifatigue/gate/internal/redisstore"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// refundStack is a window store and an audit store of one kind.
type refundStack struct {
	store gate.WindowStore
	audit *gormstore.Store
}

// stacks opens the two stacks a gate runs on: Redis and PostgreSQL, and
// the in-process store and SQLite.
func stacks(t *testing.T) map[string]func(t *testing.T) refundStack {
	return map[string]func(t *testing.T) refundStack{
		"redis+postgres": func(t *testing.T) refundStack {
			opts, err := redis.ParseURL(testenv.RedisURL(t))
			if err != nil {
				t.Fatal(err)
			}
			opts.ContextTimeoutEnabled = true
			client := redis.NewClient(opts)
			t.Cleanup(func() { client.Close() })
			st, err := redisstore.New(client, redisstore.Options{KeyPrefix: testenv.Unique("refund"), Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return refundStack{st, openAudit(t, gormstore.Options{DatabaseURL: testenv.PostgresSchemaURL(t)})}
		},
		"inmem+sqlite": func(t *testing.T) refundStack {
			return refundStack{inmem.New(inmem.Options{}), openAudit(t, gormstore.Options{SQLitePath: filepath.Join(t.TempDir(), "gate.db")})}
		},
	}
}

func openAudit(t *testing.T, o gormstore.Options) *gormstore.Store {
	t.Helper()
	s, err := gormstore.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fixedRules is a RuleSource that never changes.
type fixedRules struct{ rs *gate.RuleSet }

func (f fixedRules) Current() *gate.RuleSet { return f.rs }
func (f fixedRules) Status() gate.RuleStatus {
	return gate.RuleStatus{Rules: f.rs, Version: f.rs.Version}
}

// refundRules: alerts at most 1 an hour and 1 a calendar day (in the
// message's zone), and a recipient cap of 5 an hour.
func refundRules(t *testing.T) *gate.RuleSet {
	t.Helper()
	return &gate.RuleSet{
		UnknownScene:  gate.ActionForward,
		RecipientCaps: []gate.Limit{{Window: time.Hour, Max: 5}},
		Scenes: map[string]gate.SceneRule{
			"alerts": {Limits: []gate.Limit{{Window: time.Hour, Max: 1}, {Calendar: gate.CalendarDay, Max: 1}}, OnExceed: gate.ActionSuppress},
		},
		Version: "v1",
	}
}

// decide admits a message of alerts for to, in zone tz, and commits its
// outcome as the pipeline would; it returns whether it was admitted.
func decide(t *testing.T, st refundStack, rs *gate.RuleSet, id, to, tz string) bool {
	t.Helper()
	ctx := context.Background()
	zone, err := gate.LoadZone(tz)
	if err != nil {
		t.Fatal(err)
	}
	rule := rs.Scenes["alerts"]
	res, err := st.store.Admit(ctx, []gate.AdmitRequest{{ID: id, Recipient: to, Scene: "alerts",
		Limits: rule.Limits, Caps: rs.RecipientCaps, Zone: zone}})
	if err != nil {
		t.Fatalf("admit %s: %v", id, err)
	}
	o := gate.OutcomeSuppress
	if res[0].Admitted {
		o = gate.OutcomeForward
	}
	if _, err := st.audit.Commit(ctx, []gate.Record{{Key: id, Scene: "alerts", Recipient: to, Priority: gate.PriorityNormal,
		TZ: tz, Outcome: o, At: res[0].Now}}); err != nil {
		t.Fatalf("commit %s: %v", id, err)
	}
	return res[0].Admitted
}

func body(id string) []byte { return []byte(`{"id":"` + id + `"}`) }

// TestRefund: on both stacks, a refunded forward leaves its windows (the
// rolling hour, the calendar day and the recipient cap), so the next
// message passes; the refund is audited and counted once however often it
// is asked; what the gate did not forward is refused with its reason.
func TestRefund(t *testing.T) {
	for name, open := range stacks(t) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			rs := refundRules(t)
			m := metrics.New(prometheus.NewRegistry())
			now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
			r, err := pipeline.NewRefunder(pipeline.RefunderOptions{Rules: fixedRules{rs}, Store: st.store, Ledger: st.audit,
				Log: st.audit, Metrics: m, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			const to, tz = "open_id:ou_refund", "Asia/Shanghai"
			if !decide(t, st, rs, "A", to, tz) || decide(t, st, rs, "B", to, tz) {
				t.Fatal("want A forwarded and B suppressed under 1/h")
			}

			res, err := r.Refund(ctx, body("A"), gate.RefundSourceNATS)
			if err != nil || res.AlreadyRefunded || res.MessageID != "A" || res.Scene != "alerts" || res.Recipient != to ||
				res.Source != gate.RefundSourceNATS || !res.RefundedAt.Equal(now) || res.ForwardedAt.IsZero() {
				t.Fatalf("refund of A = %+v, %v; want refunded now from nats", res, err)
			}
			if !decide(t, st, rs, "C", to, tz) {
				t.Error("C suppressed after A was refunded: A still fills a window")
			}

			again, err := r.Refund(ctx, body("A"), gate.RefundSourceAPI)
			if err != nil || !again.AlreadyRefunded || again.Refund != res.Refund {
				t.Errorf("second refund of A = %+v, %v; want already_refunded and the first row %+v", again, err, res.Refund)
			}
			if decide(t, st, rs, "D", to, tz) {
				t.Error("D forwarded: the second refund of A freed a slot again")
			}

			if _, err := r.Refund(ctx, body("B"), gate.RefundSourceAPI); !errors.Is(err, gate.ErrNotForwarded) {
				t.Errorf("refund of B (suppressed) = %v; want ErrNotForwarded", err)
			}
			if _, err := r.Refund(ctx, body("nope"), gate.RefundSourceAPI); !errors.Is(err, gate.ErrNeverDecided) {
				t.Errorf("refund of an unknown id = %v; want ErrNeverDecided", err)
			}
			if _, err := r.Refund(ctx, []byte(`{"id":`), gate.RefundSourceNATS); !gate.IsInvalid(err) {
				t.Errorf("refund of a malformed body = %v; want an invalid error", err)
			}

			sums, err := st.audit.Summary(ctx, time.Time{}, time.Time{})
			if err != nil || len(sums) != 1 || sums[0].Refunded != 1 || sums[0].Received != 4 {
				t.Errorf("summary = %+v, %v; want alerts with refunded 1 (counted once), received 4", sums, err)
			}
			page, err := st.audit.Refunds(ctx, gate.RefundFilter{})
			if err != nil || len(page.Items) != 1 || page.Items[0] != res.Refund {
				t.Errorf("refunds = %+v, %v; want A's row alone", page, err)
			}
			for result, want := range map[string]float64{"refunded": 1, "already_refunded": 1, "not_forwarded": 1,
				"never_decided": 1, "invalid": 1, "failed": 0} {
				if got := refundCount(t, m, result); got != want {
					t.Errorf("gate_refunds_total{result=%q} = %v, want %v", result, got, want)
				}
			}
		})
	}
}

// downStore is a window store whose Forget fails as an unreachable one's.
type downStore struct{ gate.WindowStore }

func (downStore) Forget(context.Context, []gate.AdmitRequest) error {
	return errors.New("forget: redis unreachable: " + gate.ErrUnavailable.Error())
}

// TestRefundForgetsBeforeRecording: a refund whose Forget fails records
// nothing, so that asking again (as gate.refund's redelivery does) still
// takes the message out of its windows.
func TestRefundForgetsBeforeRecording(t *testing.T) {
	st := stacks(t)["inmem+sqlite"](t)
	rs := refundRules(t)
	if !decide(t, st, rs, "A", "open_id:ou_1", "") {
		t.Fatal("A not forwarded")
	}
	ctx := context.Background()
	down, err := pipeline.NewRefunder(pipeline.RefunderOptions{Rules: fixedRules{rs}, Store: downStore{st.store}, Ledger: st.audit, Log: st.audit})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := down.Refund(ctx, body("A"), gate.RefundSourceNATS); err == nil || gate.RefundRefused(err) || gate.IsInvalid(err) {
		t.Fatalf("refund with the window store down = %v; want a transient error", err)
	}
	if _, ok, err := st.audit.Refunded(ctx, "A"); ok || err != nil {
		t.Fatalf("a refund whose Forget failed was recorded (%v, %v)", ok, err)
	}
	up, err := pipeline.NewRefunder(pipeline.RefunderOptions{Rules: fixedRules{rs}, Store: st.store, Ledger: st.audit, Log: st.audit})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := up.Refund(ctx, body("A"), gate.RefundSourceNATS); err != nil || res.AlreadyRefunded {
		t.Fatalf("refund asked again = %+v, %v; want refunded now", res, err)
	}
	if !decide(t, st, rs, "B", "open_id:ou_1", "") {
		t.Error("B suppressed: the retried refund did not free A's slot")
	}
}

// refundCount reads gate_refunds_total{result}.
func refundCount(t *testing.T, m *metrics.Metrics, result string) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Refunds.WithLabelValues(result).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}
