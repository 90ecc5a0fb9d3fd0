package httpapi

import (
	"net/http"

	"github.com/antifatigue/gate/internal/gate"
)

// Status is the HTTP status that answers a failure of class c: the one
// place where the API turns an error into a status (wtf's error codes, one
// map). gate.check's replies carry it too (natsbus.CheckOptions.Status), as
// the status POST /v1/check would have had.
func Status(c gate.Class) int {
	switch c {
	case gate.ClassNone:
		return http.StatusOK
	case gate.ClassInvalid, gate.ClassPark:
		return http.StatusBadRequest
	case gate.ClassNotFound:
		return http.StatusNotFound
	case gate.ClassConflict:
		return http.StatusConflict
	case gate.ClassUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// message is the {"error": …} of err on an endpoint whose 503 says
// unavailable: what the caller can act on in the error's own words (of an
// input that can never be decided, its reason), a fixed sentence for the
// rest, since a store's own words may name hosts: they stay in the log.
func message(err error, unavailable string) string {
	switch gate.Classify(err) {
	case gate.ClassPark:
		return gate.InvalidReason(err)
	case gate.ClassInvalid, gate.ClassNotFound, gate.ClassConflict:
		return err.Error()
	case gate.ClassUnavailable:
		return unavailable
	}
	return "internal error"
}

// fail answers a request that failed with err: the status of its class and
// msg in the API's JSON error body. A 5xx is logged with the error, which
// its body does not carry: a warning when a dependency did not answer, an
// error for anything else (a bug).
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error, msg string) {
	code := Status(gate.Classify(err))
	switch {
	case code == http.StatusServiceUnavailable:
		s.o.Log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	case code >= http.StatusInternalServerError:
		s.o.Log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	}
	writeError(w, code, msg)
}
