package redisstore

import (
	"crypto/sha256"
	"fmt"

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
		if err := reqs[i].Validate(); err != nil {
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
