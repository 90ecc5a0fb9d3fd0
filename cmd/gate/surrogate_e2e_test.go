package main

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// surrogateRules: one message an hour per recipient.
const surrogateRules = `
scenes:
  s.one:
    limits: [{window: 1h, max: 1}]
    on_exceed: suppress
`

// loneSurrogate is what the gate says of a body with a lone surrogate
// escape where it reads text.
const loneSurrogate = "is a lone surrogate escape"

// TestLoneSurrogateRefused proves issue 28's hole 6 closed on both stacks.
// A \u escape of half a surrogate pair ("\ud800") encodes no character, and
// JSON readers turn it into U+FFFD: A's id and recipient ("…\ud800") were
// B's ("…\ufffd"), so A was forwarded and B, a message of its own, was
// dropped as a duplicate without a trace. Now A is parked on gate.dead
// with its reason, and B is decided; /v1/check, /v1/refund and the
// preferences refuse such a body with 400. A surrogate pair (an emoji
// escaped) is one character and passes, and so does a lone surrogate in
// content, which the gate forwards as sent and never reads.
func TestLoneSurrogateRefused(t *testing.T) {
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, surrogateRules)
		g := e.start(map[string]string{"GATE_API_TOKEN": prefToken})
		c := e.client()
		to := testenv.Unique("surrogate")
		body := func(id, recipient, content string) []byte {
			return []byte(`{"id":"` + id + `","scene":"s.one","receive_id_type":"open_id","receive_id":"` + recipient +
				`","msg_type":"text","content":{"text":"` + content + `"}}`)
		}
		a, b := body(to+"-x\\ud800", to+"\\ud800", "a"), body(to+"-x\\ufffd", to+"\\ufffd", "b")
		c.publish(a, b)
		// Read as JSON, A and B look alike: compare the bytes forwarded.
		var sent []string
		for _, m := range c.stored(natsbus.StreamOut) {
			if string(m.Data) == string(a) || string(m.Data) == string(b) {
				sent = append(sent, string(m.Data))
			}
		}
		if !slices.Equal(sent, []string{string(b)}) {
			t.Errorf("gate.out holds %q, want B alone: A is refused, not taken for B", sent)
		}
		if !slices.ContainsFunc(c.stored(natsbus.StreamDead), func(d *jetstream.RawStreamMsg) bool {
			return string(d.Data) == string(a) && strings.Contains(d.Header.Get(natsbus.HeaderError), loneSurrogate)
		}) {
			t.Errorf("A is not on gate.dead with a Gate-Error saying it %s", loneSurrogate)
		}

		// A pair is one character; content is not read.
		pair := to + "-pair"
		c.publish(body(pair+"\\ud83d\\ude00", pair, "\\ud800"))
		if got, _ := c.forwarded(pair); !slices.Equal(got, []string{pair + "\U0001F600"}) {
			t.Errorf("forwarded to %s: %v, want the message whose id ends in an escaped emoji", pair, got)
		}

		code, out := g.checkHTTP(t, []byte(`{"id":"c1","scene":"s.one","receive_id":"`+to+`\ud800"}`), prefToken)
		if code != http.StatusBadRequest || !strings.Contains(string(out), loneSurrogate) {
			t.Errorf("POST /v1/check with a lone surrogate: %d %s, want 400 saying it %s", code, out, loneSurrogate)
		}
		code, ans := g.postRefund(`{"id":"`+to+`-x\udfff"}`, prefToken)
		if code != http.StatusBadRequest || !strings.Contains(ans["error"].(string), loneSurrogate) {
			t.Errorf("POST /v1/refund with a lone surrogate: %d %v, want 400 saying it %s", code, ans, loneSurrogate)
		}
		if code, got := g.preferences(http.MethodPut, to, `{"muted_scenes":["s.one\udbff"]}`); code != http.StatusBadRequest || !strings.Contains(got, loneSurrogate) {
			t.Errorf("PUT preferences with a lone surrogate: %d %s, want 400 saying it %s", code, got, loneSurrogate)
		}
	})
}
