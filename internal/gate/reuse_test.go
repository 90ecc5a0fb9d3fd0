package gate

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestReuses(t *testing.T) {
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	m := Message{ID: "order-42-shipped", Scene: "orders", ReceiveIDType: "open_id", ReceiveID: "ou_b"}
	for _, c := range []struct {
		name   string
		first  Use
		reused bool
	}{
		{"same scene and recipient: a duplicate", Use{"orders", "open_id:ou_b", at}, false},
		{"another recipient", Use{"orders", "open_id:ou_a", at}, true},
		{"another scene", Use{"alerts", "open_id:ou_b", at}, true},
		{"unknown first use (an old ledger row)", Use{At: at}, false},
		{"an invalid message's prior", Prior{Outcome: OutcomeInvalid, At: at, Scene: "orders"}.Use(), false},
		{"a check's prior for another recipient", Prior{Outcome: OutcomeSuppress, At: at, Scene: "orders", Recipient: "open_id:ou_a"}.Use(), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Reuses(c.first, m)
			if (got != nil) != c.reused {
				t.Fatalf("Reuses(%+v) = %v, want reused %v", c.first, got, c.reused)
			}
			if got == nil {
				return
			}
			if Classify(got) != ClassConflict || !errors.Is(got, ErrReusedID) {
				t.Errorf("class %v, Is(ErrReusedID) %v; want a conflict", Classify(got), errors.Is(got, ErrReusedID))
			}
			v := got.Reused()
			if Classify(v) != ClassPark || !errors.Is(v, ErrReusedID) {
				t.Errorf("verdict class %v, Is(ErrReusedID) %v; want parked and still a reused id", Classify(v), errors.Is(v, ErrReusedID))
			}
			for _, want := range []string{c.first.Scene, c.first.Recipient, "2024-05-01T10:00:00Z"} {
				if !strings.Contains(InvalidReason(v), want) {
					t.Errorf("reason %q does not name %q of the first use", InvalidReason(v), want)
				}
			}
		})
	}
}

func TestReusedRecord(t *testing.T) {
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	m := Message{ID: "order-42-shipped", Scene: "orders", ReceiveIDType: "open_id", ReceiveID: "ou_b", Raw: []byte(`{}`)}
	r := ReusedRecord(m, 57, at, "v1")
	if r.Key != "reused:seq:57:order-42-shipped" || r.Outcome != OutcomeInvalid || r.Scene != "orders" {
		t.Errorf("record %+v, want key reused:seq:57:order-42-shipped, invalid in orders", r)
	}
	if s := r.Suppression; s == nil || s.Recipient != "open_id:ou_b" || s.Reason != ReasonReusedID || s.MessageID != r.Key {
		t.Errorf("audit row %+v, want one for open_id:ou_b, reason reused_id, under the record's key", s)
	}
}
