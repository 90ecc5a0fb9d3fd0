package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/antifatigue/gate/internal/gate"
)

// Refunder takes a forwarded message out of every window it counted in, on
// its sender's word that delivery failed; see gate.Refunder.
type Refunder struct {
	o RefunderOptions
	// core serves its forget stage: the window store's Forget, through its
	// port (a failure counted as the other front ends' are).
	core core
}

var _ gate.Refunder = (*Refunder)(nil)

// Refund refunds the message that body ({"id": "…"}) names, once: see
// gate.Refunder.
//
// The message is forgotten by the window store first, and the refund row
// (with its counter) recorded after. Forget is idempotent, so a refund cut
// short between the two steps (a crash, the audit store down) is simply
// asked again: the retry forgets again, which changes nothing, and records
// the row. The other order would record a refund whose Forget might never
// happen: the retry would find the row and answer "already refunded" while
// the message still filled its window. So a row in refunds proves the
// message was forgotten, and an id with a row is answered from it without
// touching the windows.
//
// The request to forget carries the limits in force now, not those of the
// decision: the windows are found by recipient and scene alone, and a rate
// limit (GCRA) gets back what the admission took of it, one emission
// interval of the rate it has now at most. A bypass message forced past a
// full limit took less, and gives back only that (see gate.WindowStore).
func (r *Refunder) Refund(ctx context.Context, body []byte, source gate.RefundSource) (res gate.RefundResult, err error) {
	defer func() { r.count(err, res.AlreadyRefunded) }()
	id, err := gate.ParseRefund(body)
	if err != nil {
		return gate.RefundResult{}, err
	}
	if first, ok, err := r.o.Log.Refunded(ctx, id); err != nil {
		return gate.RefundResult{}, fmt.Errorf("refund %q: %w", id, err)
	} else if ok {
		return gate.RefundResult{Refund: first, AlreadyRefunded: true}, nil
	}
	entries, err := r.o.Ledger.LedgerEntries(ctx, []string{id})
	if err != nil {
		return gate.RefundResult{}, fmt.Errorf("refund %q: read ledger: %w", id, err)
	}
	e, ok := entries[id]
	forwardedAt, released := e.At, false
	if ok && e.Outcome == gate.OutcomeDefer {
		// A deferred message released later was forwarded then, and
		// admitted into its windows under its id.
		if forwardedAt, released, err = r.o.Log.ReleasedAt(ctx, id); err != nil {
			return gate.RefundResult{}, fmt.Errorf("refund %q: %w", id, err)
		}
	}
	if err := gate.CheckRefundable(id, e, ok, released); err != nil {
		return gate.RefundResult{}, err
	}
	req := gate.RefundRequestOf(r.o.Rules.Current(), e)
	if err := r.core.forget(ctx, []gate.AdmitRequest{req}); err != nil {
		return gate.RefundResult{}, fmt.Errorf("refund %q: %w", id, err)
	}
	row, recorded, err := r.o.Log.RecordRefund(ctx, gate.Refund{
		MessageID: id, Scene: e.Scene, Recipient: e.Recipient,
		ForwardedAt: forwardedAt, RefundedAt: r.o.Now(), Source: source,
	})
	if err != nil {
		return gate.RefundResult{}, fmt.Errorf("refund %q: %w", id, err)
	}
	if recorded {
		r.o.Logger.Info("message refunded: taken out of its windows", "id", id, "scene", e.Scene, "source", source)
	}
	// Not recorded: a concurrent refund of the id recorded first.
	return gate.RefundResult{Refund: row, AlreadyRefunded: !recorded}, nil
}

// count adds a refund's result to gate_refunds_total.
func (r *Refunder) count(err error, already bool) {
	if r.o.Metrics == nil {
		return
	}
	r.o.Metrics.Refunds.WithLabelValues(refundResultLabel(err, already)).Inc()
}

// refundResultLabel is the result label of gate_refunds_total for a
// refund that ended with err.
func refundResultLabel(err error, already bool) string {
	switch {
	case err == nil && already:
		return "already_refunded"
	case err == nil:
		return "refunded"
	case errors.Is(err, gate.ErrNeverDecided):
		return "never_decided"
	case errors.Is(err, gate.ErrNotForwarded):
		return "not_forwarded"
	case errors.Is(err, gate.ErrLedgerIncomplete):
		return "ledger_incomplete"
	case gate.IsInvalid(err):
		return "invalid"
	}
	return "failed"
}
