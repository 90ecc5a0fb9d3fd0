package preview_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/gormstore"
	"github.com/antifatigue/gate/internal/preview"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// TestReplayRealLedger commits decisions through the audit store, as the
// pipeline does, and previews them from its ledger on PostgreSQL and
// SQLite: more rows than one ledger page, the period's bounds, rows that
// cannot be replayed, and exact counts.
func TestReplayRealLedger(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) gormstore.Options
	}{
		{"postgres", func(t *testing.T) gormstore.Options {
			return gormstore.Options{DatabaseURL: testenv.PostgresSchemaURL(t)}
		}},
		{"sqlite", func(t *testing.T) gormstore.Options {
			return gormstore.Options{SQLitePath: filepath.Join(t.TempDir(), "gate.db")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st, err := gormstore.Open(ctx, tc.open(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })

			start := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
			// 1200 forwards of one scene to 12 recipients, 100 each, a
			// second apart per recipient; then one invalid, one parked and
			// one row without a scene (written before the ledger kept it);
			// and one forward outside the period.
			var recs []gate.Record
			for r := range 12 {
				for i := range 100 {
					recs = append(recs, gate.Record{Key: fmt.Sprintf("m-%d-%d", r, i), Scene: "alert",
						Recipient: fmt.Sprintf("open_id:u%d", r), Priority: gate.PriorityNormal,
						Outcome: gate.OutcomeForward, At: start.Add(time.Duration(i) * time.Second)})
				}
			}
			recs = append(recs,
				gate.Record{Key: "invalid:x", Scene: "alert", Outcome: gate.OutcomeInvalid, At: start.Add(time.Minute)},
				gate.Record{Key: "parked", Scene: "alert", Recipient: "open_id:u0", Outcome: gate.OutcomeParked, At: start.Add(time.Minute)},
				gate.Record{Key: "old", Outcome: gate.OutcomeForward, At: start.Add(time.Minute)},
				gate.Record{Key: "later", Scene: "alert", Recipient: "open_id:u0", Outcome: gate.OutcomeForward, At: start.Add(2 * time.Hour)},
			)
			for i := 0; i < len(recs); i += 500 {
				if _, err := st.Commit(ctx, recs[i:min(i+500, len(recs))]); err != nil {
					t.Fatal(err)
				}
			}
			// 10 an hour per recipient: 10 of each recipient's 100 pass.
			r := preview.New(st, preview.Options{})
			p, err := r.Preview(ctx, []byte("scenes:\n  alert:\n    limits: [{window: 1h, max: 10}]\n"), start, start.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if p.Decisions != 1203 || p.Replayed != 1200 || p.NotReplayable != 1 || p.Truncated {
				t.Errorf("decisions %d replayed %d not replayable %d truncated %v, want 1203 1200 1 false",
					p.Decisions, p.Replayed, p.NotReplayable, p.Truncated)
			}
			if len(p.Scenes) != 1 {
				t.Fatalf("scenes %+v, want alert only", p.Scenes)
			}
			s := p.Scenes[0]
			if want := (gate.PreviewCounts{Forwarded: 1200, Invalid: 1, Parked: 1}); s.Then != want {
				t.Errorf("then %+v, want %+v", s.Then, want)
			}
			if want := (gate.PreviewCounts{Forwarded: 120, Suppressed: 1080, Invalid: 1, Parked: 1}); s.Now != want {
				t.Errorf("now %+v, want %+v", s.Now, want)
			}

			// The bound stops the read in the middle of a page.
			r = preview.New(st, preview.Options{MaxDecisions: 700})
			if p, err = r.Preview(ctx, []byte("scenes: {alert: {limits: [{window: 1h, max: 10}]}}"), start, start.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if !p.Truncated || p.Decisions != 700 || p.Total.Then.Forwarded != 700 {
				t.Errorf("bounded: truncated %v decisions %d forwarded then %d, want true 700 700", p.Truncated, p.Decisions, p.Total.Then.Forwarded)
			}
		})
	}
}
