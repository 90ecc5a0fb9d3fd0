package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/nats-io/nats.go"
)

// gate publish --headers sends the header fast path's headers, which name
// the same message as the body.
func TestPublishHeaders(t *testing.T) {
	ns := startNATS(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := natsbus.New(t.Context(), nc, natsbus.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	getenv := func(string) string { return "" }
	common := []string{"publish", "--nats-url", ns.ClientURL(), "--scene", "alert.x", "--to", "email:a@b.c", "--priority", "high"}
	for _, args := range [][]string{{"--id", "m1", "--headers"}, {"--id", "m2"}} {
		if err := run(t.Context(), append(common, args...), getenv, nil, io.Discard, io.Discard); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	in, err := b.JetStream().Stream(t.Context(), natsbus.StreamIn)
	if err != nil {
		t.Fatal(err)
	}
	for seq, want := range map[uint64]map[string]string{
		1: {gate.MsgIDHeader: "m1", gate.SceneHeader: "alert.x", gate.RecipientHeader: "email:a@b.c", gate.PriorityHeader: "high"},
		2: {gate.MsgIDHeader: "m2"},
	} {
		m, err := in.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Header) != len(want) {
			t.Errorf("message %d: headers %v, want %v", seq, m.Header, want)
		}
		for k, v := range want {
			if got := m.Header.Get(k); got != v {
				t.Errorf("message %d: %s = %q, want %q", seq, k, got, v)
			}
		}
		d := gate.Delivery{Data: m.Data, HeaderID: m.Header.Get(gate.MsgIDHeader), HeaderScene: m.Header.Get(gate.SceneHeader),
			HeaderRecipient: m.Header.Get(gate.RecipientHeader), HeaderPriority: m.Header.Get(gate.PriorityHeader)}
		fromHeaders, err := gate.ParseDelivery(d, 0)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		fromBody, err := gate.ParseMessage(m.Data, "", 0)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		if fromHeaders.Recipient() != fromBody.Recipient() || fromHeaders.Scene != fromBody.Scene || fromHeaders.Priority != fromBody.Priority || fromHeaders.ID != fromBody.ID {
			t.Errorf("message %d: headers say %+v, the body %+v", seq, fromHeaders, fromBody)
		}
	}

	var stderr bytes.Buffer
	err = run(t.Context(), []string{"publish", "--nats-url", ns.ClientURL(), "--stdin", "--headers"}, getenv, strings.NewReader("{}"), io.Discard, &stderr)
	var ue *usageError
	if !errors.As(err, &ue) {
		t.Errorf("--stdin --headers: err = %v, want a usage error", err)
	}
}
