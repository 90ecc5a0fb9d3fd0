package main

import (
	"context"
	"io"
	"maps"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/antifatigue/gate/internal/natsbus"
)

func TestStreamMaxBytesSetting(t *testing.T) {
	for _, tt := range []struct {
		v       string
		want    map[string]int64
		wantErr string
	}{
		{v: "", want: map[string]int64{}},
		{v: "GATE_OUT=20GiB,GATE_IN=2GiB", want: map[string]int64{natsbus.StreamOut: 20 << 30, natsbus.StreamIn: 2 << 30}},
		{v: "8GiB", want: map[string]int64{natsbus.StreamIn: 8 << 30, natsbus.StreamOut: 8 << 30, natsbus.StreamDead: 8 << 30, natsbus.StreamRefund: 8 << 30}},
		{v: "GATE_OUTS=1GiB", wantErr: "GATE_STREAM_MAX_BYTES: want NAME=SIZE"},
		{v: "GATE_OUT=1KiB", wantErr: "GATE_STREAM_MAX_BYTES: GATE_OUT: a stream's byte limit must be at least"},
		{v: "lots", wantErr: "GATE_STREAM_MAX_BYTES: want a size such as 4GiB"},
	} {
		env := map[string]string{"GATE_STREAM_MAX_BYTES": tt.v}
		c, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: err = %v, want one containing %q", tt.v, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%q: %v", tt.v, err)
		case !maps.Equal(c.StreamMaxBytes, tt.want):
			t.Errorf("%q: StreamMaxBytes = %v, want %v", tt.v, c.StreamMaxBytes, tt.want)
		}
	}
}

// gate serve gives its streams the limits GATE_STREAM_MAX_BYTES names and
// the defaults to the others, each with discard policy new.
func TestServeSetsStreamMaxBytes(t *testing.T) {
	e := newEnv(t, stackEmbedded, checkRules)
	e.start(map[string]string{"GATE_STREAM_MAX_BYTES": "GATE_OUT=3MiB"})
	c := e.client()
	want := map[string]int64{natsbus.StreamIn: natsbus.DefaultInMaxBytes, natsbus.StreamOut: 3 << 20,
		natsbus.StreamDead: natsbus.DefaultDeadMaxBytes, natsbus.StreamRefund: natsbus.DefaultRefundMaxBytes}
	for name, limit := range want {
		s, err := c.js.Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if cfg := s.CachedInfo().Config; cfg.MaxBytes != limit || cfg.Discard != jetstream.DiscardNew {
			t.Errorf("%s: max bytes %d, discard %s; want %d, new", name, cfg.MaxBytes, cfg.Discard, limit)
		}
	}
}
