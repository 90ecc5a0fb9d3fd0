package main

import (
	"context"
	"errors"
	"sync/atomic"
)

// servedRequests says whether gate.check and gate.cancel are subscribed
// to. Readiness waits for both, so a gate that says it is ready answers
// them: a request sent at once would otherwise find no responder. A service
// that could not subscribe (logged: answered on HTTP only) counts as done,
// so it does not hold readiness back forever.
type servedRequests struct{ checks, cancels atomic.Bool }

func (r *servedRequests) ready(context.Context) error {
	if !r.checks.Load() || !r.cancels.Load() {
		return errors.New("gate.check and gate.cancel not subscribed to yet")
	}
	return nil
}
