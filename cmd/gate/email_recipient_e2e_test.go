package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// emailRules: one message an hour per recipient.
const emailRules = `
scenes:
  e.one:
    limits: [{window: 1h, max: 1}]
    on_exceed: suppress
`

// TestEmailRecipientCaseInsensitive proves issue 28's recipient identity
// through NATS: Feishu matches an email recipient case-insensitively and
// trimmed, so "Alice@Example.com " and "alice@example.com" are one person
// and share one window: the second message is suppressed, and its audit
// row, a check and the preferences API name the address as the gate keeps
// it, "email:alice@example.com". An open_id in other case is another
// recipient (Feishu's ids are byte-exact). Before, each spelling had a
// window of its own, and both messages were forwarded.
func TestEmailRecipientCaseInsensitive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stackReal, emailRules)
	g := e.start(map[string]string{"GATE_API_TOKEN": prefToken})
	c := e.client()
	user := testenv.Unique("alice")
	kept := user + "@example.com"
	body := func(id, typ, to string) []byte {
		b, _ := json.Marshal(map[string]string{"id": id, "scene": "e.one", "receive_id_type": typ, "receive_id": to,
			"msg_type": "text", "content": `{"text":"hi"}`})
		return b
	}
	a, b := user+"-A", user+"-B"
	c.publish(body(a, "email", strings.ToUpper(user[:1])+user[1:]+"@Example.COM "), body(b, "email", kept))
	// Open ids in two cases: two recipients, one message each.
	o1, o2 := user+"-O1", user+"-O2"
	c.publish(body(o1, "open_id", "ou_"+user), body(o2, "open_id", "OU_"+user))

	var sent []string
	for _, m := range c.stored(natsbus.StreamOut) {
		if id := m.Header.Get(gate.MsgIDHeader); strings.HasPrefix(id, user) {
			sent = append(sent, id)
		}
	}
	if want := []string{a, o1, o2}; !slices.Equal(sent, want) {
		t.Errorf("forwarded %v, want %v: the two spellings of one email address share one window of 1 an hour", sent, want)
	}
	rows := g.suppressions(url.Values{"recipient": {"email:" + kept}})
	if len(rows) != 1 || rows[0].MessageID != b || rows[0].Recipient != "email:"+kept {
		t.Errorf("audit rows for email:%s: %+v, want B's alone, under the address as kept", kept, rows)
	}
	code, out := g.checkHTTP(t, []byte(`{"id":"`+user+`-C","scene":"e.one","receive_id_type":"email","receive_id":" `+strings.ToUpper(kept)+`","dry_run":true}`), prefToken)
	var ans gate.CheckAnswer
	if err := json.Unmarshal(out, &ans); code != http.StatusOK || err != nil || ans.Decision != gate.OutcomeSuppress {
		t.Errorf("check for %s in upper case: %d %s, want suppress: the window A filled", kept, code, out)
	}
	if code, got := g.preferencesOf("email:"+strings.ToUpper(kept), `{"muted_scenes":["e.one"]}`); code != http.StatusBadRequest || !strings.Contains(got, `write \"email:`+kept+`\"`) {
		t.Errorf("PUT preferences of email:%s: %d %s, want 400 naming the key as kept", strings.ToUpper(kept), code, got)
	}
}

// preferencesOf PUTs body as the preferences of the recipient key, of any
// id type, and returns the status and body.
func (g *gateProc) preferencesOf(key, body string) (int, string) {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodPut, g.base+"/v1/recipients/"+url.PathEscape(key)+"/preferences", strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+prefToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatalf("PUT preferences of %s: %v", key, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
