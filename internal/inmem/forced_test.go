package inmem

import (
	"testing"

	"github.com/antifatigue/gate/internal/testing/storetest"
)

// TestForgetForced holds Forget after forced admissions to what they took
// (see storetest.RunForcedForget), as the Redis store is held.
func TestForgetForced(t *testing.T) { storetest.RunForcedForget(t, harness()) }
