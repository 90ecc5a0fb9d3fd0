package gate

import (
	"testing"
	"time"
)

// TestPriorUseOfParkedRow protects Prior.Use for rows that record no use of
// the id: an invalid or parked (undecided, out of deliveries) message's row
// is no first use, so its scene and recipient are not kept, and a later
// message with the id for any scene or recipient is no reused id (Reuses
// nil). A decided row keeps both. Kept for a parked row, its scene and
// recipient would park every corrected message of the id as reused.
func TestPriorUseOfParkedRow(t *testing.T) {
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	m := Message{ID: "order-42-shipped", Scene: "orders", ReceiveIDType: "open_id", ReceiveID: "ou_b"}
	for _, c := range []struct {
		outcome Outcome
		want    Use
	}{
		{OutcomeParked, Use{At: at}},
		{OutcomeInvalid, Use{At: at}},
		{OutcomeForward, Use{Scene: "alerts", Recipient: "open_id:ou_a", At: at}},
	} {
		t.Run(string(c.outcome), func(t *testing.T) {
			p := Prior{Outcome: c.outcome, At: at, Scene: "alerts", Recipient: "open_id:ou_a"}
			got := p.Use()
			if got.Scene != c.want.Scene || got.Recipient != c.want.Recipient || !got.At.Equal(c.want.At) {
				t.Fatalf("Use() = %+v, want %+v", got, c.want)
			}
			if reused := Reuses(got, m) != nil; reused != (c.want.Scene != "") {
				t.Errorf("Reuses(%+v) for another scene and recipient: got reused %v, want %v", got, reused, c.want.Scene != "")
			}
		})
	}
}
