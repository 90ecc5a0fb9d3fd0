package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/antifatigue/gate/internal/gate"
)

// RefundLister lists refund rows (the audit store's gate.RefundLog).
type RefundLister interface {
	Refunds(ctx context.Context, f gate.RefundFilter) (gate.RefundPage, error)
}

// refund serves POST /v1/refund: 200 with the refund row, and
// already_refunded true when the id was refunded before (nothing changed);
// 400 for a body that is not {"id": "…"}; 404 for an id the gate never
// decided; 409 for one it decided and did not forward; 503 when a store did
// not answer (ask again: a refund is idempotent).
func (s *server) refund(w http.ResponseWriter, r *http.Request) {
	body, tooBig, err := readBody(w, r, gate.MaxRefundBytes)
	if tooBig {
		writeError(w, http.StatusBadRequest, "refund body over 1 MiB: send {\"id\": \"…\"}")
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	res, err := s.o.Refunder.Refund(r.Context(), body, gate.RefundSourceAPI)
	if err != nil {
		s.fail(w, r, err, message(err, "a store did not answer; ask again (a refund is idempotent)"))
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// refundParams are the query parameters GET /v1/refunds takes. A refund
// row has no reason, so the reason filter of /v1/suppressions is refused
// with any other parameter rather than ignored: a list that ignores a
// filter answers a question nobody asked.
var refundParams = []string{"scene", "recipient", "since", "until", "limit", "cursor"}

// refunds serves GET /v1/refunds: refund rows newest first, filtered and
// paged like /v1/suppressions (by refunded_at).
func (s *server) refunds(w http.ResponseWriter, r *http.Request, q url.Values) error {
	if err := onlyParams(q, "GET /v1/refunds", refundParams); err != nil {
		return err
	}
	return listPage(w, q, func(f gate.SuppressionFilter) (any, error) {
		page, err := s.o.RefundLog.Refunds(r.Context(), gate.RefundFilter(f))
		page.Items = nonNil(page.Items)
		return page, err
	})
}

// onlyParams refuses a query that names a parameter outside known, which
// endpoint takes.
func onlyParams(q url.Values, endpoint string, known []string) error {
	var unknown []string
	for name := range q {
		if !slices.Contains(known, name) {
			unknown = append(unknown, strconv.Quote(name))
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	noun := "parameter"
	if len(unknown) > 1 {
		noun = "parameters"
	}
	return badRequest("unknown query %s %s: %s takes %s", noun, strings.Join(unknown, ", "), endpoint, strings.Join(known, ", "))
}
