package gormstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// TestRefundLog runs the refund log's behaviour on both dialects.
func TestRefundLog(t *testing.T) {
	for name, fresh := range map[string]freshFunc{"postgres": postgresOptions, "sqlite": sqliteOptions} {
		t.Run(name, func(t *testing.T) {
			t.Run("RecordedOnce", func(t *testing.T) { testRefundRecordedOnce(t, fresh) })
			t.Run("ConcurrentRefunds", func(t *testing.T) { testConcurrentRefunds(t, fresh) })
			t.Run("ReleasedAt", func(t *testing.T) { testReleasedAt(t, fresh) })
			t.Run("List", func(t *testing.T) { testRefundList(t, fresh) })
		})
	}
}

func refundOf(id, scene, recipient string, forwarded, refunded time.Time, src gate.RefundSource) gate.Refund {
	return gate.Refund{MessageID: id, Scene: scene, Recipient: recipient, ForwardedAt: forwarded, RefundedAt: refunded, Source: src}
}

// testRefundRecordedOnce: the first refund of an id writes its row and one
// refunded count in the hour of the refund; a second changes nothing and
// gives back the first row.
func testRefundRecordedOnce(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	first := refundOf("m1", "alerts", "open_id:ou_1", t0.Add(10*time.Minute), t0.Add(2*time.Hour+time.Second), gate.RefundSourceNATS)
	row, recorded, err := s.RecordRefund(ctx, first)
	if err != nil || !recorded || row != first {
		t.Fatalf("first RecordRefund = %+v, %v, %v; want the row, recorded", row, recorded, err)
	}
	again := refundOf("m1", "alerts", "open_id:ou_1", t0.Add(10*time.Minute), t0.Add(3*time.Hour), gate.RefundSourceAPI)
	row, recorded, err = s.RecordRefund(ctx, again)
	if err != nil || recorded || row != first {
		t.Fatalf("second RecordRefund = %+v, %v, %v; want the first row %+v, not recorded", row, recorded, err, first)
	}
	got, ok, err := s.Refunded(ctx, "m1")
	if err != nil || !ok || got != first {
		t.Errorf("Refunded(m1) = %+v, %v, %v; want %+v", got, ok, err, first)
	}
	if _, ok, err := s.Refunded(ctx, "m2"); err != nil || ok {
		t.Errorf("Refunded(m2) = %v, %v; want not found", ok, err)
	}
	sum := summaryOf(t, s, "alerts")
	if sum.Refunded != 1 || sum.Received != 0 {
		t.Errorf("summary of alerts = %+v; want refunded 1, received 0 (a refund is no new message)", sum)
	}
	// Counted in the hour of the refund, not of the forward.
	hour, err := s.Summary(ctx, t0.Add(2*time.Hour), t0.Add(3*time.Hour))
	if err != nil || len(hour) != 1 || hour[0].Refunded != 1 {
		t.Errorf("summary of the refund's hour = %+v, %v; want refunded 1", hour, err)
	}
	if before, _ := s.Summary(ctx, t0, t0.Add(2*time.Hour)); len(before) != 0 {
		t.Errorf("summary of the hours before the refund = %+v; want nothing", before)
	}
	if n := countRows(t, s, "refunds"); n != 1 {
		t.Errorf("refunds holds %d rows, want 1", n)
	}
	for _, bad := range []gate.Refund{
		refundOf("", "alerts", "r", t0, t0, gate.RefundSourceAPI),
		refundOf("m3", "", "r", t0, t0, gate.RefundSourceAPI),
		refundOf("m3", "alerts", "", t0, t0, gate.RefundSourceAPI),
		refundOf("m3", "alerts", "r", time.Time{}, t0, gate.RefundSourceAPI),
		refundOf("m3", "alerts", "r", t0, t0, "email"),
	} {
		if _, _, err := s.RecordRefund(ctx, bad); !errors.Is(err, gate.ErrBadRequest) {
			t.Errorf("RecordRefund(%+v) = %v; want ErrBadRequest", bad, err)
		}
	}
}

// testConcurrentRefunds: of refunds of one id racing, exactly one records
// and counts.
func testConcurrentRefunds(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	var wg sync.WaitGroup
	var recorded atomic.Int32
	for i := range 8 {
		wg.Go(func() {
			r := refundOf("m1", "alerts", "open_id:ou_1", t0, t0.Add(time.Duration(i)*time.Second), gate.RefundSourceAPI)
			_, ok, err := s.RecordRefund(context.Background(), r)
			if err != nil {
				t.Errorf("RecordRefund: %v", err)
			}
			if ok {
				recorded.Add(1)
			}
		})
	}
	wg.Wait()
	if n := recorded.Load(); n != 1 {
		t.Errorf("%d refunds recorded, want 1", n)
	}
	if got := summaryOf(t, s, "alerts").Refunded; got != 1 {
		t.Errorf("refunded counter %d, want 1", got)
	}
}

// testReleasedAt: a deferred message's release time is read from its
// settled audit row; a message not released has none.
func testReleasedAt(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	MustCommit(t, s, suppressed("held", "alerts", "open_id:ou_1", t0), suppressed("kept", "alerts", "open_id:ou_1", t0))
	released := t0.Add(90 * time.Minute)
	if err := s.db.Exec(`UPDATE suppressions SET settled = 'released', settled_at = ? WHERE message_id = 'held'`,
		s.dbTime(released)).Error; err != nil {
		t.Fatal(err)
	}
	if at, ok, err := s.ReleasedAt(ctx, "held"); err != nil || !ok || !at.Equal(released) {
		t.Errorf("ReleasedAt(held) = %v, %v, %v; want %v", at, ok, err, released)
	}
	for _, id := range []string{"kept", "never"} {
		if at, ok, err := s.ReleasedAt(ctx, id); err != nil || ok {
			t.Errorf("ReleasedAt(%s) = %v, %v, %v; want not released", id, at, ok, err)
		}
	}
}

// testRefundList: rows newest first, filtered, paged by keyset; bad
// filters are bad requests.
func testRefundList(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	rows := []gate.Refund{
		refundOf("a", "alerts", "open_id:1", t0, t0.Add(1*time.Minute), gate.RefundSourceAPI),
		refundOf("b", "alerts", "open_id:2", t0, t0.Add(2*time.Minute), gate.RefundSourceNATS),
		refundOf("c", "billing", "open_id:1", t0, t0.Add(2*time.Minute), gate.RefundSourceNATS), // ties with b
		refundOf("d", "alerts", "open_id:1", t0, t0.Add(3*time.Minute), gate.RefundSourceAPI),
	}
	for _, r := range rows {
		if _, _, err := s.RecordRefund(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	list := func(f gate.RefundFilter) []string {
		t.Helper()
		var out []string
		for pages := 0; ; pages++ {
			p, err := s.Refunds(ctx, f)
			if err != nil {
				t.Fatalf("Refunds(%+v): %v", f, err)
			}
			for _, r := range p.Items {
				out = append(out, r.MessageID)
			}
			if p.NextCursor == "" || pages > 10 {
				return out
			}
			f.Cursor = p.NextCursor
		}
	}
	for _, tt := range []struct {
		f    gate.RefundFilter
		want string
	}{
		{gate.RefundFilter{}, "d c b a"},
		{gate.RefundFilter{Limit: 1}, "d c b a"},
		{gate.RefundFilter{Limit: 3}, "d c b a"},
		{gate.RefundFilter{Scene: "alerts", Limit: 2}, "d b a"},
		{gate.RefundFilter{Recipient: "open_id:1"}, "d c a"},
		{gate.RefundFilter{Since: t0.Add(2 * time.Minute), Until: t0.Add(3 * time.Minute)}, "c b"},
	} {
		if got := joinIDs(list(tt.f)); got != tt.want {
			t.Errorf("Refunds(%+v) = %q, want %q", tt.f, got, tt.want)
		}
	}
	p, err := s.Refunds(ctx, gate.RefundFilter{Limit: 1})
	if err != nil || len(p.Items) != 1 || p.Items[0] != rows[3] {
		t.Errorf("first page = %+v, %v; want row d in full", p, err)
	}
	for _, bad := range []gate.RefundFilter{
		{Limit: -1}, {Limit: MaxPageLimit + 1}, {Cursor: "!"}, {Cursor: "MTIz"}, {Since: t0.Add(time.Hour), Until: t0},
		{Cursor: encodeTextCursor(t0, "a\x00b")}, {Cursor: encodeTextCursor(t0, "\xff")},
	} {
		if _, err := s.Refunds(ctx, bad); !errors.Is(err, gate.ErrBadRequest) {
			t.Errorf("Refunds(%+v) = %v; want ErrBadRequest", bad, err)
		}
	}
}

func joinIDs(ids []string) string {
	out := ""
	for i, id := range ids {
		if i > 0 {
			out += " "
		}
		out += id
	}
	return out
}
