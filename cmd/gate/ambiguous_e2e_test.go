package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// ambiguousRules: one message an hour per recipient, so that a message or
// check passes only when nothing before it took the recipient's slot.
const ambiguousRules = `
unknown_scene: drop
scenes:
  a.one:
    limits: [{window: 1h, max: 1}]
    on_exceed: suppress
`

// TestAmbiguousEnvelopesRefused proves issue 20's items 6 and 7 through the
// real transports, on both stacks: a body that encoding/json and a
// case-sensitive reader would read apart (a key in other case, a key twice)
// is refused (dead-lettered with its reason on gate.in, 400 on POST
// /v1/check, an error reply on gate.check) and counts in nobody's window;
// a refund whose id is not UTF-8 is 400 on POST /v1/refund and
// dead-lettered on gate.refund, not read as another id.
func TestAmbiguousEnvelopesRefused(t *testing.T) {
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, ambiguousRules)
		g := e.start(map[string]string{"GATE_API_TOKEN": checkToken})
		c := e.client()
		to := testenv.Unique("amb")
		victim, decoy := to+"-victim", to+"-decoy"

		// gate.in: encoding/json reads decoy (keys folded, the last wins), a
		// case-sensitive sender victim.
		bodies := []string{
			`{"id":"` + to + `-case","scene":"a.one","receive_id_type":"open_id","receive_id":"` + victim +
				`","Receive_Id":"` + decoy + `","msg_type":"text","content":"{\"text\":\"hi\"}"}`,
			`{"id":"` + to + `-twice","scene":"a.one","receive_id_type":"open_id","receive_id":"` + victim +
				`","receive_id":"` + decoy + `","msg_type":"text","content":"{\"text\":\"hi\"}"}`,
		}
		c.publish([]byte(bodies[0]), []byte(bodies[1]))
		dead := c.stored(natsbus.StreamDead)
		for i, want := range []string{`key "Receive_Id" is "receive_id" in other letter case`, `key "receive_id" is given twice`} {
			if !slices.ContainsFunc(dead, deadWith(bodies[i], want)) {
				t.Errorf("%s: not on the dead letter with a Gate-Error saying %q; dead letters: %s", bodies[i], want, deadSummary(dead))
			}
		}
		// Nobody's window was counted: each recipient's first message of
		// the hour passes.
		c.send(msg{ID: to + "-v", Scene: "a.one", To: victim}, msg{ID: to + "-d", Scene: "a.one", To: decoy})
		for r, own := range map[string]string{victim: to + "-v", decoy: to + "-d"} {
			if got := fwd(c, r); !slices.Equal(got, []string{own}) {
				t.Errorf("forwarded to %s: %v, want only its own message %s: the ambiguous ones take no slot", r, got, own)
			}
		}

		// POST /v1/check and gate.check: dry_run twice, or in other case,
		// is refused and takes no slot.
		checker := to + "-checker"
		for _, bad := range []string{
			`{"id":"` + to + `-c1","scene":"a.one","receive_id":"` + checker + `","dry_run":true,"dry_run":false}`,
			`{"id":"` + to + `-c2","scene":"a.one","receive_id":"` + checker + `","dry_run":false,"dry_run":true}`,
			`{"id":"` + to + `-c3","scene":"a.one","receive_id":"` + checker + `","drY_run":true}`,
		} {
			code, b := g.checkHTTP(t, []byte(bad), checkToken)
			var out struct {
				Error string `json:"error"`
			}
			if code != http.StatusBadRequest || json.Unmarshal(b, &out) != nil || !strings.Contains(out.Error, "ambiguous") {
				t.Errorf("POST /v1/check %s: %d %s, want 400 saying the check is ambiguous", bad, code, b)
			}
			if a, err := c.checkNATS([]byte(bad)); err == nil || !strings.Contains(err.Error(), "ambiguous") {
				t.Errorf("gate.check %s: %+v, %v; want an error reply saying the check is ambiguous", bad, a, err)
			}
		}
		if a := g.mustCheck(t, checkOf(to+"-c4", "a.one", checker, false)); !a.Admitted {
			t.Errorf("a real check after the refused ones: %+v, want admitted: they took no slot", a)
		}

		// A refund id that is not UTF-8 is not read as U+FFFD.
		notUTF8 := "{\"id\":\"\xff\"}"
		if code, out := g.postRefund(notUTF8, checkToken); code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["error"]), "not valid UTF-8") {
			t.Errorf("POST /v1/refund %q: %d %v, want 400 saying it is not UTF-8", notUTF8, code, out)
		}
		c.publishRefund([]byte(notUTF8))
		if dead := c.stored(natsbus.StreamDead); !slices.ContainsFunc(dead, deadWith(notUTF8, "not valid UTF-8")) {
			t.Errorf("gate.refund %q: not on the dead letter with its reason; dead letters: %s", notUTF8, deadSummary(dead))
		}
	})
}

// deadWith matches a dead letter of body data whose Gate-Error says want.
func deadWith(data, want string) func(*jetstream.RawStreamMsg) bool {
	return func(d *jetstream.RawStreamMsg) bool {
		return string(d.Data) == data && strings.Contains(d.Header.Get(natsbus.HeaderError), want)
	}
}

// deadSummary lists dead letters' bodies and reasons, for a failure.
func deadSummary(dead []*jetstream.RawStreamMsg) string {
	var b strings.Builder
	for _, d := range dead {
		fmt.Fprintf(&b, "\n  %q: %s", d.Data, d.Header.Get(natsbus.HeaderError))
	}
	return b.String()
}
