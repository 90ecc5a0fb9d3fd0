package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/antifatigue/gate/internal/gate"
)

// RefundLister lists refund rows (the audit store's gate.RefundLog).
type RefundLister interface {
	Refunds(ctx context.Context, f gate.RefundFilter) (gate.RefundPage, error)
}

// maxRefundBytes bounds a refund's body. {"id": …} needs a few hundred
// bytes; a sender may hand back the whole envelope it got from gate.out,
// which the gate's own message limit bounds far below this.
const maxRefundBytes = 1 << 20

// refund serves POST /v1/refund: 200 with the refund row, and
// already_refunded true when the id was refunded before (nothing changed);
// 400 for a body that is not {"id": "…"}; 404 for an id the gate never
// decided; 409 for one it decided and did not forward; 503 when a store did
// not answer (ask again: a refund is idempotent).
func (s *server) refund(w http.ResponseWriter, r *http.Request) {
	body, tooBig, err := readBody(w, r, maxRefundBytes)
	if tooBig {
		writeError(w, http.StatusBadRequest, "refund body over 1 MiB: send {\"id\": \"…\"}")
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	res, err := s.o.Refunder.Refund(r.Context(), body, gate.RefundSourceAPI)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, res)
	case gate.IsInvalid(err):
		writeError(w, http.StatusBadRequest, gate.InvalidReason(err))
	case errors.Is(err, gate.ErrNeverDecided):
		writeError(w, http.StatusNotFound, err.Error())
	case gate.RefundRefused(err):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, gate.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		s.o.Log.Warn("refund failed", "err", err)
		writeError(w, http.StatusServiceUnavailable, "a store did not answer; ask again (a refund is idempotent)")
	default:
		s.o.Log.Error("refund failed", "err", err)
		writeError(w, http.StatusInternalServerError, "internal error")
	}
}

// refunds serves GET /v1/refunds: refund rows newest first, filtered and
// paged like /v1/suppressions (by refunded_at).
func (s *server) refunds(w http.ResponseWriter, r *http.Request, q url.Values) error {
	sf, err := suppressionFilter(q)
	if err != nil {
		return err
	}
	f := gate.RefundFilter(sf)
	f.Cursor = q.Get("cursor")
	if f.Limit, err = parseLimit(q, maxPage); err != nil {
		return err
	}
	page, err := s.o.RefundLog.Refunds(r.Context(), f)
	if err != nil {
		return err
	}
	page.Items = nonNil(page.Items)
	writeJSON(w, http.StatusOK, page)
	return nil
}
