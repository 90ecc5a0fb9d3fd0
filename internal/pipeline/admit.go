package pipeline

import (
	"context"
	"errors"

	"github.com/antifatigue/gate/internal/gate"
)

// admit asks the window store about every item to decide whose plan needs
// it, in one call; a check's request is a dry run when the check is one,
// and asks for the tightest limit (only the check API reads it). Should the
// store refuse the call for a request it can never decide
// (gate.ErrInvalidRequest, which records nothing), halves of it are asked
// in turn, and the items of the requests refused on their own take the
// refusal (policy.refused): retried, a message would hold back its batch
// forever. Should the store fail, the items it did not answer fail open or
// fail (failOpen). An item that needs no window (an unknown scene) is
// decided all the same: it must not wait for a store it never uses.
func (c *core) admit(ctx context.Context, pol *policy, items []item) {
	var asks []admission
	for i := range items {
		if it := &items[i]; it.state == toDecide && it.plan.Request != nil {
			r := *it.plan.Request
			r.DryRun, r.WantTightest = it.dryRun, pol.tightest
			asks = append(asks, admission{r, i})
		}
	}
	if len(asks) == 0 {
		return
	}
	answered := make([]bool, len(items))
	err := isolate(gate.ErrInvalidRequest, asks, func(part []admission) error {
		reqs := make([]gate.AdmitRequest, len(part))
		for j, a := range part {
			reqs[j] = a.req
		}
		res, err := c.store.Admit(ctx, reqs)
		if err != nil {
			return err
		}
		for j, a := range part {
			it := &items[a.i]
			it.res, it.slot = res[j], slotOf(res[j], it.dryRun)
			answered[a.i] = true
		}
		return nil
	}, func(a admission, why error) {
		pol.refused(&items[a.i], "window", why)
	})
	if err != nil {
		c.failOpen(pol, items, answered, err)
	}
}

// admission is a request to the window store, with the index of the item
// it is for.
type admission struct {
	req gate.AdmitRequest
	i   int
}

// slotOf is what the window store recorded for res.
func slotOf(res gate.AdmitResult, dryRun bool) slot {
	switch {
	case !res.Admitted || dryRun:
		return noSlot
	case res.Duplicate:
		return duplicate
	}
	return counted
}

// failOpen handles a window store that could not answer: the items it did
// not answer whose scene fails open are forwarded unchecked (gate.FailOpen,
// the one place the fail-open rule is decided), where the policy lets
// them (a held message never fails open: it stays held); every other one
// fails, to be retried.
func (c *core) failOpen(pol *policy, items []item, answered []bool, err error) {
	err = pol.unavailable("window", "admit", err)
	now := c.now()
	for i := range items {
		it := &items[i]
		if it.state != toDecide || it.plan.Request == nil || answered[i] {
			continue
		}
		if d, ok := gate.FailOpen(it.plan, now); ok && pol.failsOpen {
			it.decide(d)
			continue
		}
		it.fail(err)
	}
}

// isolate calls call on s, in halves while it fails with an error wrapping
// refusal (see bisect), and hands the elements refused on their own to
// refused. It stops at the first other error and returns it: the store is
// down, and the calls left would fail the same way.
func isolate[T any](refusal error, s []T, call func([]T) error, refused func(T, error)) error {
	var failed error
	bisect(s, func(part []T) error {
		if failed != nil {
			return nil
		}
		switch err := call(part); {
		case err == nil:
		case errors.Is(err, refusal):
			return err
		default:
			failed = err
		}
		return nil
	}, refused)
	return failed
}

// bisect calls try on s and, while try refuses a part of s for good (a
// non-nil error), on each half of that part in turn, down to single
// elements, which it hands to refused with try's error; try handles every
// other outcome itself and returns nil. With k elements refused among n,
// that is at most 2k·log2(n)+1 calls; one when none is.
func bisect[T any](s []T, try func([]T) error, refused func(T, error)) {
	if len(s) == 0 {
		return
	}
	err := try(s)
	switch {
	case err == nil:
	case len(s) == 1:
		refused(s[0], err)
	default:
		bisect(s[:len(s)/2], try, refused)
		bisect(s[len(s)/2:], try, refused)
	}
}
