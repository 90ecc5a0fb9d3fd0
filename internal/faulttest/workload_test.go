package faulttest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// limit is one {window, max} of a rule. The ledger check is exact only
// because every window is far longer than a scenario runs: all the
// messages of a run fall in one window, so "at most max in any window"
// becomes "at most max in the run".
type limit struct {
	Window string
	Max    int
}

// sceneSpec is one scene of a test rule document.
type sceneSpec struct {
	Name     string
	Limits   []limit
	Drop     bool // on_exceed: drop (else suppress)
	FailOpen bool // on_store_error: forward (else retry)
}

// model is a rule document and what the ledger check expects of it.
// unknown_scene is always forward.
type model struct {
	Scenes []sceneSpec
	Caps   []limit
}

// standardModel has a scene per outcome and a recipient cap that binds: a
// recipient of standardMix may be admitted 3+2+1 = 6 in the scenes but 5
// in all.
var standardModel = model{
	Scenes: []sceneSpec{
		{Name: "f.suppress", Limits: []limit{{"1h", 3}}},
		{Name: "f.drop", Limits: []limit{{"1h", 2}}, Drop: true},
		{Name: "f.two", Limits: []limit{{"1h", 1}, {"24h", 2}}},
	},
	Caps: []limit{{"24h", 5}},
}

// standardMix is the scenes one recipient gets, ten messages in all; the
// last has no rule.
var standardMix = []string{
	"f.suppress", "f.suppress", "f.suppress", "f.suppress",
	"f.drop", "f.drop", "f.drop",
	"f.two", "f.two",
	"f.unknown",
}

func (m model) yaml() string {
	var b strings.Builder
	lims := func(ls []limit) string {
		parts := make([]string, len(ls))
		for i, l := range ls {
			parts[i] = fmt.Sprintf("{window: %s, max: %d}", l.Window, l.Max)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	b.WriteString("unknown_scene: forward\n")
	if len(m.Caps) > 0 {
		fmt.Fprintf(&b, "recipient_caps: %s\n", lims(m.Caps))
	}
	b.WriteString("scenes:\n")
	for _, s := range m.Scenes {
		fmt.Fprintf(&b, "  %s:\n    limits: %s\n", s.Name, lims(s.Limits))
		if s.Drop {
			b.WriteString("    on_exceed: drop\n")
		} else {
			b.WriteString("    on_exceed: suppress\n")
		}
		if s.FailOpen {
			b.WriteString("    on_store_error: forward\n")
		}
	}
	return b.String()
}

func (m model) scene(name string) (sceneSpec, bool) {
	for _, s := range m.Scenes {
		if s.Name == name {
			return s, true
		}
	}
	return sceneSpec{}, false
}

// tightest is the max of the limit that binds when every message falls in
// every window; 0 means no limit.
func tightest(t testing.TB, ls []limit) int {
	t.Helper()
	n := 0
	for _, l := range ls {
		w, err := gate.ParseDuration(l.Window)
		if err != nil || w < time.Hour {
			t.Fatalf("window %q: the ledger check needs windows of an hour or more", l.Window)
		}
		if n == 0 || l.Max < n {
			n = l.Max
		}
	}
	return n
}

// message is one envelope a scenario publishes. An Invalid one lacks its
// scene and must end on GATE_DEAD. Raw, when set, is sent as is.
type message struct {
	ID, Scene, To string
	Invalid       bool
	Raw           []byte
}

func (m message) body() []byte {
	if m.Raw != nil {
		return m.Raw
	}
	// id first: the ledger finds it in a clipped dead letter.
	b, _ := json.Marshal(struct {
		ID            string `json:"id"`
		Scene         string `json:"scene,omitempty"`
		ReceiveIDType string `json:"receive_id_type"`
		ReceiveID     string `json:"receive_id"`
		MsgType       string `json:"msg_type"`
		Content       string `json:"content"`
	}{m.ID, m.Scene, "open_id", m.To, "text", `{"text":"fault suite"}`})
	return b
}

// recipient is the recipient key the gate derives from To.
func (m message) recipient() string { return "open_id:" + m.To }

// workload builds n messages for the given number of recipients: recipient
// i gets mix[0], mix[1], … in turn, and the whole is shuffled so that every
// recipient's messages spread over the run. Every invalidEvery-th message
// (0: none) lacks its scene.
func workload(rng *rand.Rand, n, recipients int, mix []string, invalidEvery int) []message {
	run := testenv.Unique("f")
	msgs := make([]message, n)
	for k := range msgs {
		r := k % recipients
		msgs[k] = message{
			ID:    fmt.Sprintf("%s-m%d", run, k),
			Scene: mix[(k/recipients)%len(mix)],
			To:    fmt.Sprintf("ou_%s_%d", run, r),
		}
		if invalidEvery > 0 && k%invalidEvery == invalidEvery-1 {
			msgs[k].Scene, msgs[k].Invalid = "", true
		}
	}
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	return msgs
}

// scale is how big a scenario is: the numbers unless the
// environment bounds them (GATE_FAULT_MESSAGES, GATE_FAULT_RECIPIENTS,
// GATE_FAULT_KILLS), and the seed of its random choices (GATE_FAULT_SEED).
type scale struct {
	Messages, Recipients, Kills int
	Seed                        uint64
}

func scaleFor(t testing.TB, messages, recipients, kills int) scale {
	t.Helper()
	s := scale{Messages: messages, Recipients: recipients, Kills: kills, Seed: uint64(time.Now().UnixNano())}
	env := func(name string, p *int, least int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < least {
				t.Fatalf("%s=%q: want a whole number of at least %d", name, v, least)
			}
			*p = min(*p, n)
		}
	}
	env("GATE_FAULT_MESSAGES", &s.Messages, 100)
	env("GATE_FAULT_RECIPIENTS", &s.Recipients, 10)
	env("GATE_FAULT_KILLS", &s.Kills, 1)
	if v := os.Getenv("GATE_FAULT_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("GATE_FAULT_SEED=%q: %v", v, err)
		}
		s.Seed = seed
	}
	// Every recipient gets a whole mix, or the expected counts are off.
	s.Recipients = min(s.Recipients, s.Messages/len(standardMix))
	s.Messages = s.Messages / (s.Recipients * len(standardMix)) * s.Recipients * len(standardMix)
	t.Logf("scale: %d messages, %d recipients, %d kills, GATE_FAULT_SEED=%d", s.Messages, s.Recipients, s.Kills, s.Seed)
	return s
}

func (s scale) rng() *rand.Rand { return rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15)) }

// standardRun sets up what most scenarios share: their scale, a stack with
// standardModel on a redis-server of its own (unless o names a Redis), and
// the standard workload, one message in 97 invalid.
func standardRun(t *testing.T, messages, recipients, kills int, o stackOptions) (*stack, []message, scale, *rand.Rand) {
	t.Helper()
	sc := scaleFor(t, messages, recipients, kills)
	rng := sc.rng()
	if o.RedisURL == "" {
		o.RedisURL = startRedis(t).url()
	}
	o.Rules = standardModel
	s := newStack(t, o)
	return s, workload(rng, sc.Messages, sc.Recipients, standardMix, 97), sc, rng
}
