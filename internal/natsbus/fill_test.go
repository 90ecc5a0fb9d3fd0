package natsbus

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// fill takes what has arrived, up to the batch size; with a wait it also
// takes what arrives within it, and returns as soon as the batch is full or
// the stream of messages ends, never waiting out the rest of the wait.
func TestFill(t *testing.T) {
	queued := func(n int) chan jetstream.Msg {
		c := make(chan jetstream.Msg, 16)
		for range n {
			c <- nil
		}
		return c
	}
	if got := len(fill(nil, queued(3), 256, 0)); got != 4 {
		t.Errorf("no wait: %d messages, want the first and the 3 queued", got)
	}
	if got := len(fill(nil, queued(9), 4, 0)); got != 4 {
		t.Errorf("over the size: %d messages, want 4", got)
	}
	// A wait of an hour: only a full batch or the end of the messages
	// returns; waiting out the hour would fail the test by its timeout.
	late := make(chan jetstream.Msg, 1)
	go func() {
		time.Sleep(10 * time.Millisecond)
		late <- nil
	}()
	if got := len(fill(nil, late, 2, time.Hour)); got != 2 {
		t.Errorf("a late message that fills the batch: %d, want 2", got)
	}
	ended := queued(1)
	go func() {
		time.Sleep(10 * time.Millisecond)
		ended <- nil
		close(ended)
	}()
	if got := len(fill(nil, ended, 256, time.Hour)); got != 3 {
		t.Errorf("messages that end: %d, want the 3 that came", got)
	}
	if got := len(fill(nil, queued(1), 256, 20*time.Millisecond)); got != 2 {
		t.Errorf("a short wait with nothing more: %d, want 2", got)
	}
}
