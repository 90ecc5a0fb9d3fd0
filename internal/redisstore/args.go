package redisstore

import (
	"crypto/sha256"
	"fmt"

	"github.com/antifatigue/gate/internal/gate"
)

// call is one EVALSHA of admit.lua: the requests [lo, hi) of a batch, their
// KEYS and ARGV.
type call struct {
	lo, hi int
	keys   []string
	args   []any
}

// buildCalls turns a batch into script calls of up to perCall requests
// each. It is on the hot path: the keys and arguments of the whole batch
// share one allocation each.
func (s *Store) buildCalls(reqs []gate.AdmitRequest, perCall int) ([]call, error) {
	nargs := 0
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return nil, fmt.Errorf("admit: request %d (id %q): %w", i, reqs[i].ID, err)
		}
		nargs += 4 + 2*(len(reqs[i].Limits)+len(reqs[i].Caps))
	}
	perCall = max(perCall, 1)
	calls := make([]call, 0, (len(reqs)+perCall-1)/perCall)
	keys := make([]string, 2*len(reqs))
	args := make([]any, 0, nargs)
	for lo := 0; lo < len(reqs); lo += perCall {
		hi := min(lo+perCall, len(reqs))
		start := len(args)
		for i := lo; i < hi; i++ {
			r := &reqs[i]
			escaped := escape(r.Recipient)
			keys[2*i], keys[2*i+1] = s.sceneKey(escaped, r.Scene), s.capKey(escaped)
			args = appendArgs(args, r)
		}
		calls = append(calls, call{lo: lo, hi: hi, keys: keys[2*lo : 2*hi : 2*hi], args: args[start:len(args):len(args)]})
	}
	return calls, nil
}

// appendArgs appends the ARGV of admit.lua: member, force, #limits, #caps,
// then (window_ms, max) pairs, limits first.
func appendArgs(args []any, r *gate.AdmitRequest) []any {
	force := 0
	if r.Force {
		force = 1
	}
	args = append(args, member(r.ID), force, len(r.Limits), len(r.Caps))
	for _, l := range r.Limits {
		args = append(args, l.WindowMillis(), l.Max)
	}
	for _, l := range r.Caps {
		args = append(args, l.WindowMillis(), l.Max)
	}
	return args
}

// memberBytes is the length of a window member: the first bytes of the
// SHA-256 of the message id. Seven keep a window of three members and
// their millisecond scores in one 64-byte listpack allocation; 36-byte
// UUIDs took 160. The duplicate check stays sound: two ids of one window
// are taken for each other only if 56 bits of their hashes agree, about
// once in 10^16 decisions for a window of a few members.
const memberBytes = 7

// member is the window member, and idempotency record, of message id.
func member(id string) string {
	sum := sha256.Sum256([]byte(id))
	return string(sum[:memberBytes])
}
