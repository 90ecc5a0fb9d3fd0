package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// repeatedHeaderRules: a scene that forwards what it is given.
const repeatedHeaderRules = `
scenes:
  h.one:
    limits: [{window: 1h, max: 100}]
    on_exceed: suppress
`

// TestRepeatedHeaderRefused proves issue 28's hole 7 closed on both stacks:
// a header the gate reads given twice was accepted, its first value
// winning, where a body key given twice is refused; a reader that takes the
// last value would read another message. Each such message, whichever
// header is repeated and whether or not its values agree, is now parked on
// gate.dead with a Gate-Error naming the header, and nothing of it is
// forwarded; the same headers given once are decided.
func TestRepeatedHeaderRefused(t *testing.T) {
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, repeatedHeaderRules)
		e.start(nil)
		c := e.client()
		to := testenv.Unique("repeated")
		// msg is a header fast-path message for to, its headers given once,
		// then extra added (name, value pairs).
		msg := func(id string, extra ...string) *nats.Msg {
			m := nats.NewMsg("gate.in")
			m.Data = []byte(`{"msg_type":"text","content":{"text":"hi"}}`)
			m.Header.Set(gate.MsgIDHeader, id)
			m.Header.Set(gate.SceneHeader, "h.one")
			m.Header.Set(gate.RecipientHeader, "open_id:"+to)
			m.Header.Set(gate.PriorityHeader, "normal")
			m.Header.Set(gate.TZHeader, "Asia/Shanghai")
			for i := 0; i+1 < len(extra); i += 2 {
				m.Header.Add(extra[i], extra[i+1])
			}
			return m
		}
		cases := []struct{ id, header, again string }{
			{to + "-scene", gate.SceneHeader, "h.other"},
			{to + "-recipient", gate.RecipientHeader, "open_id:" + to + "-decoy"},
			{to + "-priority", gate.PriorityHeader, "urgent"},
			{to + "-tz", gate.TZHeader, "Europe/Berlin"},
			{to + "-same", gate.SceneHeader, "h.one"},
			// The id given twice: JetStream keeps it, under the first id.
			{to + "-id", gate.MsgIDHeader, to + "-id-decoy"},
		}
		for _, tc := range cases {
			c.publishMsg(msg(tc.id, tc.header, tc.again))
		}
		c.publishMsg(msg(to + "-once"))

		if got, _ := c.forwarded(to); len(got) != 0 {
			t.Errorf("forwarded %v to the body's recipient: want nothing (the fast path reads no body)", got)
		}
		var out []string
		for _, m := range c.stored(natsbus.StreamOut) {
			if strings.HasPrefix(m.Header.Get(gate.MsgIDHeader), to) {
				out = append(out, m.Header.Get(gate.MsgIDHeader))
			}
		}
		if want := []string{to + "-once"}; !slices.Equal(out, want) {
			t.Errorf("gate.out holds %v, want %v: every message with a repeated header refused", out, want)
		}
		dead := c.stored(natsbus.StreamDead)
		for _, tc := range cases {
			want := tc.header + " header is given more than once"
			if !slices.ContainsFunc(dead, func(d *jetstream.RawStreamMsg) bool {
				// The dead letter keeps the producer's headers but its own
				// Nats-Msg-Id: the recipient tells this test's apart.
				return slices.Contains(d.Header.Values(gate.RecipientHeader), "open_id:"+to) && strings.Contains(d.Header.Get(natsbus.HeaderError), want)
			}) {
				t.Errorf("%s given twice: no dead letter with a Gate-Error saying %q", tc.header, want)
			}
		}
	})
}
