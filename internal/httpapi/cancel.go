package httpapi

import (
	"net/http"

	"github.com/antifatigue/gate/internal/gate"
)

// cancel serves POST /v1/cancel: 200 with {"count": N}, the held messages
// the cancel took back (0 when none matched: no error); 400 for a body
// that is not {"cancel_key": "…"} with, optionally, receive_id_type and
// receive_id together; 503 when the audit store did not answer (ask
// again: a cancel is idempotent).
func (s *server) cancel(w http.ResponseWriter, r *http.Request) {
	body, tooBig, err := readBody(w, r, gate.MaxCancelBytes)
	if tooBig {
		writeError(w, http.StatusBadRequest, "cancel body over 64 KiB: send {\"cancel_key\": \"…\"}")
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	res, err := s.o.Canceller.Cancel(r.Context(), body, gate.CancelSourceAPI)
	if err != nil {
		s.fail(w, r, err, message(err, "the audit store did not answer; ask again (a cancel is idempotent)"))
		return
	}
	writeJSON(w, http.StatusOK, res)
}
