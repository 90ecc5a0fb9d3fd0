package natsbus

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"testing"
)

// A message that arrived within NATS's max payload but no longer fits once
// the gate's headers are added is parked cut to fit, saying its original
// size, instead of failing (and being retried) forever.
func TestDeadLetterFitsTheMaxPayload(t *testing.T) {
	nc := startServer(t)
	b, err := New(t.Context(), nc, Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{100, int(nc.MaxPayload()) - 10} {
		data := bytes.Repeat([]byte("x"), size)
		seq := uint64(size)
		if err := b.DeadLetter(t.Context(), StreamIn, data, nil, seq, "too big"); err != nil {
			t.Fatalf("dead-letter %d bytes: %v", size, err)
		}
		dead, err := b.JetStream().Stream(t.Context(), StreamDead)
		if err != nil {
			t.Fatal(err)
		}
		m, err := dead.GetLastMsgForSubject(t.Context(), "gate.dead")
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(HeaderStreamSeq) != strconv.FormatUint(seq, 10) || m.Header.Get(HeaderError) != "too big" {
			t.Errorf("%d bytes: headers %v", size, m.Header)
		}
		truncated := m.Header.Get(HeaderTruncated)
		switch {
		case size == 100 && (truncated != "" || len(m.Data) != size):
			t.Errorf("a small dead letter was cut: %d bytes, Gate-Truncated %q", len(m.Data), truncated)
		case size > 100 && (truncated != strconv.Itoa(size) || len(m.Data) >= size || !bytes.HasPrefix(data, m.Data)):
			t.Errorf("dead letter of %d bytes: kept %d, Gate-Truncated %q; want a prefix and the original size", size, len(m.Data), truncated)
		}
	}
}

// Gate-Error carries any reason as one header line: a reason holding a line
// break, a control character or bytes that are not UTF-8 (a store's or a
// library's words quoting a message) neither breaks the header block nor
// reaches it as sent, and a long one is cut.
func TestDeadLetterReasonIsOneHeaderLine(t *testing.T) {
	nc := startServer(t)
	b, err := New(t.Context(), nc, Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct{ reason, want string }{
		{"refused: line one\r\nInjected: yes", "refused: line one  Injected: yes"},
		{"bad \xff byte\x00 end", "bad \uFFFD byte  end"},
		{strings.Repeat("é", MaxReasonBytes), strings.Repeat("é", MaxReasonBytes/2) + "…"},
	} {
		seq := uint64(1000 + i)
		if err := b.DeadLetter(t.Context(), StreamIn, []byte("{}"), nil, seq, tc.reason); err != nil {
			t.Fatalf("dead-letter %q: %v", tc.reason, err)
		}
		dead, err := b.JetStream().Stream(t.Context(), StreamDead)
		if err != nil {
			t.Fatal(err)
		}
		m, err := dead.GetLastMsgForSubject(t.Context(), "gate.dead")
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Values(HeaderError); len(got) != 1 || got[0] != tc.want {
			t.Errorf("reason %q: Gate-Error %q, want %q", tc.reason, got, tc.want)
		}
		if m.Header.Get("Injected") != "" || m.Header.Get(HeaderStreamSeq) != strconv.FormatUint(seq, 10) {
			t.Errorf("reason %q: headers %v", tc.reason, m.Header)
		}
	}
}
