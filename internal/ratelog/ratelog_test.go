package ratelog

import (
	"testing"
	"time"
)

// The first failure of a run is logged, then one per Every, and a success
// ends the run, so the next failure is logged at once.
func TestRun(t *testing.T) {
	var r Run
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		after time.Duration
		want  bool
	}{{0, true}, {time.Second, false}, {Every - time.Second, false}, {Every, true}, {Every + time.Second, false}} {
		if got, since := r.Failed(t0.Add(c.after)); got != c.want || !since.Equal(t0) {
			t.Errorf("Failed(+%v) = %v, %v; want %v, %v", c.after, got, since, c.want, t0)
		}
	}
	if since := r.Ended(); !since.Equal(t0) {
		t.Errorf("Ended() = %v, want %v", since, t0)
	}
	if since := r.Ended(); !since.IsZero() {
		t.Errorf("Ended() with no run = %v, want zero", since)
	}
	if got, _ := r.Failed(t0.Add(Every + 2*time.Second)); !got {
		t.Error("the first failure of a new run is not logged")
	}
}
