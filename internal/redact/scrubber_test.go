package redact

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestScrubber: the addresses' secrets and the secret values are masked
// in text, errors (which still wrap the original) and log records; a
// secret too short to scrub safely stays, and nothing to hide is a nil
// Scrubber that passes everything through.
func TestScrubber(t *testing.T) {
	s := New([]string{"postgres://gate:pgpass4@db/gate", "", "nats://h:4222"}, []string{"t0ken-value", "abc", ""})
	got := s.String("dial postgres://gate:pgpass4@db/gate and pgpass4 with t0ken-value, abc")
	if want := "dial postgres://gate:xxxxx@db/gate and xxxxx with xxxxx, abc"; got != want {
		t.Errorf("String:\n got %q\nwant %q", got, want)
	}

	base := errors.New("refused")
	err := s.Error(fmt.Errorf("connect with t0ken-value: %w", base))
	if err.Error() != "connect with xxxxx: refused" || !errors.Is(err, base) {
		t.Errorf("Error = %q (wraps the original: %v), want the token masked and the original wrapped", err, errors.Is(err, base))
	}
	if clean := errors.New("clean"); s.Error(clean) != clean {
		t.Error("Error replaced an error with nothing to mask")
	}

	var buf bytes.Buffer
	slog.New(s.Handler(slog.NewTextHandler(&buf, nil))).With("w", "pgpass4").Info("t0ken-value", "err", base, "g", slog.GroupValue(slog.String("k", "pgpass4")))
	if strings.Contains(buf.String(), "pgpass4") || strings.Contains(buf.String(), "t0ken-value") || !strings.Contains(buf.String(), "refused") {
		t.Errorf("log record not scrubbed, or lost its error: %s", buf.String())
	}

	var none *Scrubber = New([]string{"nats://h:4222"}, []string{""})
	if none != nil {
		t.Fatal("New with nothing to hide is not nil")
	}
	if none.String("x") != "x" || none.Error(base) != base {
		t.Error("a nil Scrubber changed its input")
	}
}
