package ratelog

import (
	"sync"
	"time"
)

// Every is how often a run of failures is logged after its first.
const Every = time.Minute

// Run tracks one run of failures of one thing. Its zero value is ready;
// it is safe for concurrent use.
type Run struct {
	mu sync.Mutex
	// failing is when the run began, zero while there is none; logged is
	// when a failure of it was last logged.
	failing, logged time.Time
}

// Failed records a failure at now and reports whether to log it (the
// first of a run, or the first for Every) and since when the run lasts.
func (r *Run) Failed(now time.Time) (log bool, since time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing.IsZero() {
		r.failing = now
	} else if now.Sub(r.logged) < Every {
		return false, r.failing
	}
	r.logged = now
	return true, r.failing
}

// Ended records a success: it ends the run, and returns when the run
// began, for the caller to log its end; zero when none was under way.
func (r *Run) Ended() (since time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	since, r.failing = r.failing, time.Time{}
	return since
}
