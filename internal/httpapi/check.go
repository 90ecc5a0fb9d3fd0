package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/antifatigue/gate/internal/gate"
)

// Checker answers a synchronous check from its JSON body (the pipeline's
// Checker). Its errors are an *gate.InvalidError for a body that is not a
// valid check, a *gate.ReusedError for an id first used for another scene
// or recipient, or wrap gate.ErrUnavailable when a store did not answer.
type Checker interface {
	Check(ctx context.Context, body []byte) (gate.CheckAnswer, error)
}

// check serves POST /v1/check: 200 with the answer, 400 for a body that is
// not a valid check (too large included), 409 for a reused id (Status maps
// its class), 503 when a store did not answer
// (ask again with the same id), 404 when the server has no Checker.
func (s *server) check(w http.ResponseWriter, r *http.Request) {
	if s.o.Checker == nil {
		writeError(w, http.StatusNotFound, "no such endpoint: this server answers no checks")
		return
	}
	// One byte over the bound is enough for the check to say it is over.
	body, err := io.ReadAll(io.LimitReader(r.Body, gate.MaxCheckBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	a, err := s.o.Checker.Check(r.Context(), body)
	if err != nil {
		s.fail(w, r, err, gate.CheckFailure(err))
		return
	}
	writeJSON(w, http.StatusOK, a)
}

// notPost answers every method but POST on a POST-only path (check,
// refund, rule preview).
func notPost(w http.ResponseWriter, r *http.Request) {
	notAllowed(w, r, "POST", "POST")
}

// notAllowed answers 405 to a method the path does not serve: allow is the
// Allow header, use the methods in words.
func notAllowed(w http.ResponseWriter, r *http.Request, allow, use string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path+": use "+use)
}

// readBody reads a request's body, up to limit bytes and no further.
// tooBig reports a larger body, which each path answers as its OpenAPI
// document says (400 or 413); any other failure to read is a bad request.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) (data []byte, tooBig bool, err error) {
	data, err = io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var over *http.MaxBytesError
	switch {
	case errors.As(err, &over):
		return nil, true, nil
	case err != nil:
		return nil, false, badRequest("reading the body: %v", err)
	}
	return data, false, nil
}
