package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// TestReusedIDE2E proves on both stacks, through the real transports, that
// an id used again for another recipient is a conflict, not a duplicate:
// checks for A (on HTTP and on gate.check) take two ids; messages for B
// under those ids go to the dead letter with a Gate-Error naming A's use,
// leave B a reused_id row in "why didn't I get it?", count as invalid in
// the summary and in gate_reused_ids_total, and forward nothing. A check
// under a message's id for another recipient answers 409 on both
// transports and takes no slot. The same id, scene and recipient again is
// still a duplicate.
func TestReusedIDE2E(t *testing.T) {
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, checkRules)
		g := e.start(map[string]string{"GATE_API_TOKEN": checkToken})
		c := e.client()
		a, b := testenv.Unique("reuseA"), testenv.Unique("reuseB")
		idHTTP, idNATS, idMsg := a+"-order-42", a+"-order-43", a+"-order-44"

		if first := g.mustCheck(t, checkOf(idHTTP, "c.three", a, false)); !first.Admitted {
			t.Fatalf("check for A on HTTP: %+v, want admitted", first)
		}
		if first, err := c.checkNATS(checkOf(idNATS, "c.three", a, false)); err != nil || !first.Admitted {
			t.Fatalf("check for A on gate.check: %+v, %v; want admitted", first, err)
		}

		before := len(c.stored("GATE_DEAD"))
		c.send(msg{ID: idHTTP, Scene: "c.three", To: b}, msg{ID: idNATS, Scene: "c.three", To: b})
		dead := c.stored("GATE_DEAD")[before:]
		if len(dead) != 2 {
			t.Fatalf("got %d dead letters, want 2 (both messages for B)", len(dead))
		}
		for _, d := range dead {
			reason := d.Header.Get(natsbus.HeaderError)
			if !strings.Contains(reason, "reused id") || !strings.Contains(reason, `"c.three"`) || !strings.Contains(reason, `"open_id:`+a+`"`) {
				t.Errorf("Gate-Error %q, want it to name A's use (scene c.three, recipient open_id:%s)", reason, a)
			}
		}
		if got := fwd(c, b); len(got) != 0 {
			t.Errorf("forwarded to B: %v, want nothing", got)
		}
		rows := g.suppressions(url.Values{"recipient": {"open_id:" + b}, "reason": {gate.ReasonReusedID}})
		if len(rows) != 2 || !slices.ContainsFunc(rows, func(s gate.Suppression) bool { return strings.HasSuffix(s.MessageID, ":"+idHTTP) }) {
			t.Errorf("B's reused_id rows: %+v, want two, one naming %s", rows, idHTTP)
		}
		if sum := g.summary()["c.three"]; sum.Invalid != 2 {
			t.Errorf("summary of c.three %+v, want the two messages for B counted invalid", sum)
		}
		if got := g.metric("gate_reused_ids_total"); got != 2 {
			t.Errorf("gate_reused_ids_total = %v, want 2", got)
		}

		// A message's id, checked for B: 409 on both transports, no slot.
		c.send(msg{ID: idMsg, Scene: "c.three", To: a})
		code, body := g.checkHTTP(t, checkOf(idMsg, "c.three", b, false), checkToken)
		var e409 struct {
			Error string `json:"error"`
		}
		if code != http.StatusConflict || json.Unmarshal(body, &e409) != nil || !strings.Contains(e409.Error, "open_id:"+a) {
			t.Errorf("check of a message's id for B on HTTP: %d %s, want 409 naming A's use", code, body)
		}
		if _, err := c.checkNATS(checkOf(idMsg, "c.three", b, false)); err == nil || !strings.Contains(err.Error(), "409") {
			t.Errorf("check of a message's id for B on gate.check: %v, want an error reply with status 409", err)
		}
		if free := g.mustCheck(t, checkOf(b+"-fresh", "c.three", b, false)); !free.Admitted || free.Count != 1 {
			t.Errorf("a fresh check for B: %+v, want admitted as the first: no reused id took B's slot", free)
		}
		if got := g.metric("gate_reused_ids_total"); got != 4 {
			t.Errorf("gate_reused_ids_total = %v, want 4", got)
		}

		// The same id, scene and recipient is a duplicate, as before.
		if again := g.mustCheck(t, checkOf(idHTTP, "c.three", a, false)); !again.Duplicate || !again.Admitted {
			t.Errorf("check for A again: %+v, want its first answer as a duplicate", again)
		}
		c.send(msg{ID: idHTTP, Scene: "c.three", To: a})
		if got, want := fwd(c, a), []string{idMsg, idHTTP}; !slices.Equal(got, want) {
			t.Errorf("forwarded to A: %v, want %v (the message under the admitted check's id keeps its decision)", got, want)
		}
	})
}
