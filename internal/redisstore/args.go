package redisstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// call is one EVALSHA of admit.lua: its KEYS and ARGV.
type call struct {
	keys []string
	args []any
}

// buildCalls turns a batch into script calls. It is on the hot path: the
// keys and arguments of the whole batch share one allocation each.
func (s *Store) buildCalls(reqs []gate.AdmitRequest) ([]call, error) {
	nargs := 0
	for i := range reqs {
		if err := validate(&reqs[i]); err != nil {
			return nil, fmt.Errorf("admit: request %d (id %q): %w", i, reqs[i].ID, err)
		}
		nargs += 4 + 2*(len(reqs[i].Limits)+len(reqs[i].Caps))
	}
	calls := make([]call, len(reqs))
	keys := make([]string, 2*len(reqs))
	args := make([]any, 0, nargs)
	for i := range reqs {
		r := &reqs[i]
		k := keys[2*i : 2*i+2 : 2*i+2]
		escaped := escape(r.Recipient)
		k[0], k[1] = s.sceneKey(escaped, r.Scene), s.capKey(escaped)
		start := len(args)
		args = appendArgs(args, r)
		calls[i] = call{keys: k, args: args[start:len(args):len(args)]}
	}
	return calls, nil
}

// appendArgs appends the ARGV of admit.lua: id, force, #limits, #caps, then
// (window_ms, max) pairs, limits first.
func appendArgs(args []any, r *gate.AdmitRequest) []any {
	force := 0
	if r.Force {
		force = 1
	}
	args = append(args, r.ID, force, len(r.Limits), len(r.Caps))
	for _, l := range r.Limits {
		args = append(args, windowMillis(l.Window), l.Max)
	}
	for _, l := range r.Caps {
		args = append(args, windowMillis(l.Window), l.Max)
	}
	return args
}

// windowMillis rounds a window up to whole milliseconds, the store's
// resolution, so that a window is never shorter than asked.
func windowMillis(w time.Duration) int64 {
	return int64((w + time.Millisecond - 1) / time.Millisecond)
}

// validate rejects what no valid rule document produces; sending it would
// make the script misbehave (a max of 0 never reopens).
func validate(r *gate.AdmitRequest) error {
	switch {
	case r.ID == "":
		return errors.New("empty id")
	case r.Recipient == "":
		return errors.New("empty recipient")
	case r.Scene == "":
		return errors.New("empty scene")
	}
	for _, set := range [...]struct {
		scope  gate.Scope
		limits []gate.Limit
	}{{gate.ScopeScene, r.Limits}, {gate.ScopeRecipient, r.Caps}} {
		for j, l := range set.limits {
			if l.Window <= 0 || l.Max < 1 {
				return fmt.Errorf("%s limit %d {window %v, max %d}: window must be positive and max at least 1", set.scope, j, l.Window, l.Max)
			}
		}
	}
	return nil
}
