package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/inmem"
	"github.com/antifatigue/gate/internal/rules"
	"github.com/nats-io/nats.go"
)

// scene is one scene of the benchmark's rule set, and its share of traffic.
type scene struct {
	name   string
	weight int
	rule   string // the YAML body of the scene
}

// The rule set: several scenes, two windows each, a recipient cap, one
// scene that drops and one that lets urgent messages through. Windows are
// ten minutes or more, so a run sees no window slide.
var benchScenes = []scene{
	{"alert.disk_full", 30, "limits: [{window: 1h, max: 1}, {window: 24h, max: 3}]"},
	{"alert.cpu_high", 25, "limits: [{window: 10m, max: 1}, {window: 24h, max: 6}]"},
	{"reminder.approval", 20, "limits: [{window: 1h, max: 2}, {window: 24h, max: 5}]"},
	{"marketing.promo", 15, "limits: [{window: 24h, max: 1}, {window: 7d, max: 3}]\n    bypass_priorities: [urgent]"},
	{"digest.weekly", 10, "limits: [{window: 24h, max: 1}, {window: 7d, max: 2}]\n    on_exceed: drop"},
}

// rulesDoc is the rule document the gate runs with. With deferred, every
// scene defers what it would suppress or drop: the ~30 % held back are held
// in the audit store, to be released when their windows reopen (after the
// run: the windows are ten minutes or more).
func rulesDoc(deferred bool) string {
	var b strings.Builder
	b.WriteString("unknown_scene: forward\nrecipient_caps:\n  - {window: 1h, max: 4}\n  - {window: 24h, max: 20}\nscenes:\n")
	for _, s := range benchScenes {
		rule := s.rule
		if deferred {
			rule = strings.Replace(rule, "on_exceed: drop", "on_exceed: defer", 1)
			if !strings.Contains(rule, "on_exceed") {
				rule += "\n    on_exceed: defer"
			}
		}
		fmt.Fprintf(&b, "  %s:\n    %s\n", s.name, rule)
	}
	return b.String()
}

func benchRules() (*gate.RuleSet, error) {
	rs, err := rules.Parse("gatebench", []byte(rulesDoc(false)))
	if err != nil {
		return nil, fmt.Errorf("benchmark rules: %w", err)
	}
	return rs, nil
}

// repeatShare is the share of messages that repeat a recent (recipient,
// scene): an alert firing again. With the rules above, and two messages per
// recipient at full speed (three in a whole run), about 30 % of a run's
// messages are held back.
const repeatShare = 0.12

// msgSize is the size of every envelope, in bytes.
const msgSize = 1024

// workload generates a deterministic stream of envelopes. Recipients carry
// the run's tag, so keys of two runs (or of other users of the shared
// Redis) never meet.
type workload struct {
	rnd        *rand.Rand
	tag        string
	recipients int
	recent     []pair // ring of recent (recipient, scene) pairs
	next       int
	total      int
}

type pair struct{ recipient, scene int }

// envelope is one generated message.
type envelope struct {
	id, scene, receiveID string
	priority             gate.Priority
}

func newWorkload(seed uint64, tag string, recipients int) *workload {
	return &workload{rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), tag: tag, recipients: recipients, recent: make([]pair, 0, 512)}
}

func (w *workload) envelope() envelope {
	var p pair
	if len(w.recent) > 0 && w.rnd.Float64() < repeatShare {
		p = w.recent[w.rnd.IntN(len(w.recent))]
	} else {
		p = pair{recipient: w.rnd.IntN(w.recipients), scene: w.pickScene()}
	}
	if len(w.recent) < cap(w.recent) {
		w.recent = append(w.recent, p)
	} else {
		w.recent[w.next] = p
		w.next = (w.next + 1) % len(w.recent)
	}
	w.total++
	prio := gate.PriorityNormal
	switch x := w.rnd.IntN(100); {
	case x < 2:
		prio = gate.PriorityUrgent
	case x < 12:
		prio = gate.PriorityHigh
	}
	var raw [16]byte
	for i := range 2 {
		v := w.rnd.Uint64()
		for j := range 8 {
			raw[8*i+j] = byte(v >> (8 * j))
		}
	}
	h := hex.EncodeToString(raw[:])
	return envelope{
		id:        h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32],
		scene:     benchScenes[p.scene].name,
		receiveID: fmt.Sprintf("ou_%s%024x", w.tag, p.recipient),
		priority:  prio,
	}
}

func (w *workload) pickScene() int {
	total := 0
	for _, s := range benchScenes {
		total += s.weight
	}
	x := w.rnd.IntN(total)
	for i, s := range benchScenes {
		if x < s.weight {
			return i
		}
		x -= s.weight
	}
	return len(benchScenes) - 1
}

// json renders the envelope as a producer would, padded to msgSize bytes.
func (e envelope) json() []byte {
	head := fmt.Sprintf(`{"id":%q,"scene":%q,"receive_id_type":"open_id","receive_id":%q,"msg_type":"text","priority":%q,"content":"{\"text\":\"`,
		e.id, e.scene, e.receiveID, e.priority)
	const tail = `\"}"}`
	text := "disk /data on host db-17 is 95% full; free space before the nightly backup. "
	pad := msgSize - len(head) - len(tail)
	b := make([]byte, 0, msgSize)
	b = append(b, head...)
	for len(b) < len(head)+pad {
		n := min(len(text), len(head)+pad-len(b))
		b = append(b, text[:n]...)
	}
	return append(b, tail...)
}

// header is the envelope's producer headers for the gate's header fast
// path: its id, scene, recipient and priority, which the gate then takes
// without decoding the body. A producer builds them per message, as the
// publisher does.
func (e envelope) header() nats.Header {
	return nats.Header{
		gate.MsgIDHeader:     {e.id},
		gate.SceneHeader:     {e.scene},
		gate.RecipientHeader: {"open_id:" + e.receiveID},
		gate.PriorityHeader:  {string(e.priority)},
	}
}

// messages are envelopes in the order they are published: data[i] is the
// body of envs[i]. envs is nil for bodies alone, published without headers.
type messages struct {
	data [][]byte
	envs []envelope
}

// batchOf generates n envelopes.
func (w *workload) batchOf(n int) messages {
	m := messages{data: make([][]byte, n), envs: make([]envelope, n)}
	for i := range m.data {
		m.envs[i] = w.envelope()
		m.data[i] = m.envs[i].json()
	}
	return m
}

// outcomes counts decisions by outcome.
type outcomes struct{ forward, suppress, drop int }

// add counts one outcome; an invalid or parked one counts nowhere.
func (o *outcomes) add(out gate.Outcome) {
	switch out {
	case gate.OutcomeForward:
		o.forward++
	case gate.OutcomeSuppress:
		o.suppress++
	case gate.OutcomeDrop:
		o.drop++
	}
}

func (o outcomes) total() int { return o.forward + o.suppress + o.drop }

// heldShare is the share of messages held back (suppressed or dropped).
func (o outcomes) heldShare() float64 {
	if o.total() == 0 {
		return 0
	}
	return float64(o.suppress+o.drop) / float64(o.total())
}

// simulator decides messages as the gate must, with the in-process window
// store, which has the Redis store's semantics: what the gate's counters
// must say after a run, given that per-recipient order holds.
type simulator struct {
	rs    *gate.RuleSet
	store *inmem.Store
	got   outcomes
}

func newSimulator(rs *gate.RuleSet) *simulator {
	return &simulator{rs: rs, store: inmem.New(inmem.Options{})}
}

// decide decides data in order and, when keep is set, returns the records
// the gate would commit for them.
func (s *simulator) decide(data [][]byte, keep bool) ([]gate.Record, error) {
	var recs []gate.Record
	for _, d := range data {
		m, err := gate.ParseMessage(d, "", 0)
		if err != nil {
			return nil, fmt.Errorf("generated message does not parse: %w", err)
		}
		p := gate.PlanMessage(s.rs, m, time.Now())
		var res gate.AdmitResult
		if p.Request != nil {
			r, err := s.store.Admit(context.Background(), []gate.AdmitRequest{*p.Request})
			if err != nil {
				return nil, fmt.Errorf("simulate: %w", err)
			}
			res = r[0]
		}
		dec := gate.Resolve(s.rs, p, res, time.Now())
		s.got.add(dec.Outcome)
		if keep {
			recs = append(recs, gate.RecordOf(m.ID, m, dec, 0, s.rs.Version))
		}
	}
	return recs, nil
}
