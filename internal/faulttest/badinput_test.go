package faulttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// badModel holds one scene: the second message to a recipient is
// suppressed, which shows that odd recipients get windows of their own.
var badModel = model{Scenes: []sceneSpec{{Name: "b.one", Limits: []limit{{"1h", 1}}}}}

// hostile is one message a producer might send by mistake or malice.
type hostile struct {
	name   string
	body   []byte
	header nats.Header // Nats-Msg-Id, and the header fast path's Gate-*, if any
	// id is the message id the gate decides it under; "" when the message
	// must go to the dead letter. reason is a piece of the Gate-Error the
	// dead letter must carry.
	id, reason string
}

func envelope(id, to string, extra string) []byte {
	b, _ := json.Marshal(id)
	r, _ := json.Marshal(to)
	return []byte(`{"id":` + string(b) + `,"scene":"b.one","receive_id_type":"open_id","receive_id":` + string(r) + extra + `}`)
}

// headers are the message headers of key, value pairs.
func headers(kv ...string) nats.Header {
	h := nats.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// fastPath are the headers of the header fast path (gate.ParseDelivery):
// the gate decides by them without reading the body.
func fastPath(id, scene, recipient string) nats.Header {
	return headers(gate.MsgIDHeader, id, gate.SceneHeader, scene, gate.RecipientHeader, recipient)
}

// maxPayload is nats-server's default max_payload, 1 MiB.
const maxPayload = 1 << 20

func hostileMessages(rng *rand.Rand, run string) []hostile {
	id := func(s string) string { return run + "-" + s }
	to := func(s string) string { return "ou_" + run + "_" + s }
	binary := make([]byte, 4096)
	for i := range binary {
		binary[i] = byte(rng.UintN(256))
	}
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	nested := strings.Repeat(`{"a":`, 400) + "1" + strings.Repeat("}", 400)
	long := strings.Repeat("x", 257)
	exact := run + "-" + strings.Repeat("y", 256-len(run)-1)
	return []hostile{
		{name: "over the size limit", body: envelope(id("huge"), to("huge"), `,"content":"`+strings.Repeat("a", 300<<10)+`"`), reason: "over the limit"},
		{name: "at NATS's max payload", body: envelope(id("max"), to("max"), `,"content":"`+strings.Repeat("m", maxPayload-200)+`"`), reason: "over the limit"},
		{name: "binary", body: binary, reason: "UTF-8"},
		{name: "NUL bytes", body: make([]byte, 64), reason: "NUL byte"},
		{name: "invalid UTF-8 inside a string", body: []byte(`{"id":"` + id("utf8") + `","scene":"b.one","receive_id":"` + to("utf8") + "\xff" + `"}`), reason: "UTF-8"},
		{name: "nested 100,000 deep", body: envelope(id("deep"), to("deep"), `,"content":`+deep), reason: "JSON"},
		{name: "nested 400 deep content is passed through", body: envelope(id("nested"), to("nested"), `,"content":`+nested), id: id("nested")},
		{name: "empty body", body: []byte{}, reason: "empty"},
		{name: "blank body", body: []byte(" \n\t "), reason: "empty"},
		{name: "null", body: []byte("null"), reason: "missing"},
		{name: "array", body: []byte(`[{"id":"x"}]`), reason: "JSON object"},
		{name: "string", body: []byte(`"hello"`), reason: "JSON object"},
		{name: "number id", body: []byte(`{"id":5,"scene":"b.one","receive_id":"ou_1"}`), reason: `"id"`},
		{name: "array scene", body: []byte(`{"id":"` + id("arr") + `","scene":["b.one"],"receive_id":"ou_1"}`), reason: `"scene"`},
		{name: "object recipient", body: []byte(`{"id":"` + id("obj") + `","scene":"b.one","receive_id":{"id":1}}`), reason: `"receive_id"`},
		{name: "bool id type", body: []byte(`{"id":"` + id("bool") + `","scene":"b.one","receive_id":"ou","receive_id_type":true}`), reason: `"receive_id_type"`},
		{name: "number priority", body: []byte(`{"id":"` + id("prio") + `","scene":"b.one","receive_id":"ou","priority":1}`), reason: `"priority"`},
		{name: "empty id", body: envelope("", to("empty"), ""), reason: "id is missing"},
		{name: "empty id, id in the header", body: envelope("", to("hdr"), ""), header: headers(gate.MsgIDHeader, id("hdr")), id: id("hdr")},
		{name: "empty id, id in a header not UTF-8", body: envelope("", to("hdr8"), ""), header: headers(gate.MsgIDHeader, id("hdr8")+"\xff"),
			reason: "id (the Nats-Msg-Id header) is not valid UTF-8"},
		{name: "blank id", body: envelope("   ", to("blank"), ""), reason: "id is missing"},
		{name: "id over 256 bytes", body: envelope(run+long, to("long"), ""), reason: "over the limit of 256"},
		{name: "id of exactly 256 bytes", body: envelope(exact, to("exact"), ""), id: exact},
		{name: "control character in id", body: envelope(id("ctl")+"\u0007", to("ctl"), ""), reason: "control character"},
		{name: "recipient over 512 bytes", body: envelope(id("longto"), strings.Repeat("r", 513), ""), reason: "receive_id is 513 bytes"},
		{name: "unicode recipient", body: envelope(id("cjk-1"), "用户✓"+run, ""), id: id("cjk-1")},
		{name: "unicode recipient, again", body: envelope(id("cjk-2"), "用户✓"+run, ""), id: id("cjk-2")},
		{name: "emoji recipient", body: envelope(id("emoji"), "👩\u200d💻"+run, ""), id: id("emoji")},
		{name: "right-to-left recipient", body: envelope(id("rtl"), "مستخدم"+run, ""), id: id("rtl")},
		{name: "braces in the recipient", body: envelope(id("brace"), "}{"+run+"}", ""), id: id("brace")},
		{name: "lone surrogate escape", body: []byte(`{"id":"` + id("surr") + `","scene":"b.one","receive_id":"\ud800` + run + `"}`), reason: "is a lone surrogate escape"},
		{name: "duplicate keys are refused", body: []byte(`{"id":"ignored","id":"` + id("dupkey") + `","scene":"b.one","receive_id":"` + to("dupkey") + `"}`),
			reason: `key "id" is given twice`},
		{name: "a field in other case is refused", body: []byte(`{"id":"` + id("case") + `","scene":"b.one","receive_id":"` + to("case") + `","Receive_Id":"` + to("decoy") + `"}`),
			reason: `key "Receive_Id" is "receive_id" in other letter case`},
		{name: "content of another type", body: envelope(id("num"), to("num"), `,"content":12.5e300`), id: id("num")},
		{name: "msg_type of another type", body: envelope(id("mtype"), to("mtype"), `,"msg_type":{"a":"\u0000"}`), id: id("mtype")},
		{name: "NUL escape in the id", body: envelope(id("nul")+"\x00", to("nul"), ""), reason: "id contains a control character (U+0000"},
		{name: "C1 escape in the scene", body: []byte(`{"id":"` + id("c1") + `","scene":"b.\u0085one","receive_id":"` + to("c1") + `"}`),
			reason: "scene contains a control character (U+0085"},
		{name: "right-to-left override escape in the scene", body: []byte(`{"id":"` + id("rlo") + `","scene":"b.one\u202e","receive_id":"` + to("rlo") + `"}`),
			reason: "scene contains a bidirectional control character (U+202E"},
		{name: "NUL escape in the content is passed through", body: envelope(id("nulc"), to("nulc"), `,"content":"a\u0000b"`), id: id("nulc")},

		// The header fast path: the headers are any bytes a producer sent.
		// Each of these crashed the gate (a scene as a Prometheus label) or
		// stalled it (an id or recipient PostgreSQL cannot store).
		{name: "headers: Gate-Scene not UTF-8", body: []byte(`{}`), header: fastPath(id("h-scene"), "b.one\xff", "open_id:"+to("h-scene")),
			reason: "Gate-Scene header is not valid UTF-8"},
		{name: "headers: Nats-Msg-Id not UTF-8", body: []byte(`{}`), header: fastPath(id("h-id")+"\xff", "b.one", "open_id:"+to("h-id")),
			reason: "Nats-Msg-Id header is not valid UTF-8"},
		{name: "headers: Gate-Recipient not UTF-8", body: []byte(`{}`), header: fastPath(id("h-to"), "b.one", "open_id:"+to("h-to")+"\xff"),
			reason: "receive_id of the Gate-Recipient header is not valid UTF-8"},
		{name: "headers: receive_id_type not UTF-8", body: []byte(`{}`), header: fastPath(id("h-type"), "b.one", "open\xff:"+to("h-type")),
			reason: "Gate-Recipient header: receive_id_type"},
		{name: "headers: Gate-Priority not UTF-8", body: []byte(`{}`),
			header: headers(gate.MsgIDHeader, id("h-prio"), gate.SceneHeader, "b.one", gate.RecipientHeader, "open_id:"+to("h-prio"), gate.PriorityHeader, "urgent\xff"),
			reason: "Gate-Priority header"},
		{name: "headers: C1 control in Gate-Scene", body: []byte(`{}`), header: fastPath(id("h-c1"), "b.\u0085one", "open_id:"+to("h-c1")),
			reason: "Gate-Scene header contains a control character (U+0085"},
		{name: "headers: C1 control in Gate-Recipient", body: []byte(`{}`), header: fastPath(id("h-c1to"), "b.one", "open_id:"+to("h-c1to")+"\u009b"),
			reason: "receive_id of the Gate-Recipient header contains a control character (U+009B"},
		{name: "headers: right-to-left override in Gate-Scene", body: []byte(`{}`), header: fastPath(id("h-rlo"), "b.one\u202egnp", "open_id:"+to("h-rlo")),
			reason: "Gate-Scene header contains a bidirectional control character (U+202E"},
		{name: "headers: NUL in the body", body: []byte("{\x00}"), header: fastPath(id("h-nul"), "b.one", "open_id:"+to("h-nul")),
			reason: "NUL byte"},
		// After all of them, in the same batches: still decided, by either
		// path. The header path's recipient gets a window of its own.
		{name: "headers: valid after the hostile ones", body: []byte(`not JSON, not read`), header: fastPath(id("h-ok"), "b.one", "user_id:"+to("h-ok")),
			id: id("h-ok")},
		{name: "valid after the hostile ones", body: envelope(id("ok"), to("ok"), ""), id: id("ok")},
	}
}

// TestHostileInput sends what a careless or hostile producer might through
// NATS to a real gate: every message goes to gate.dead with a reason or is
// decided, once; the gate keeps running.
func TestHostileInput(t *testing.T) {
	rs := startRedis(t)
	s := newStack(t, stackOptions{RedisURL: rs.url(), Rules: badModel})
	g := s.startGate(nil)
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	hs := hostileMessages(rand.New(rand.NewPCG(1, 2)), run)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seqs := make([]uint64, len(hs))
	for i, h := range hs {
		m := nats.NewMsg("gate.in")
		m.Data = h.body
		for k, vs := range h.header {
			m.Header[k] = vs
		}
		ack, err := s.bus.js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("%s: publish: %v", h.name, err)
		}
		seqs[i] = ack.Sequence
	}
	// Over NATS's own max payload the producer is told at once: nothing
	// reaches the gate, and nothing is lost silently.
	_, err := s.bus.js.Publish(ctx, "gate.in", envelope(run+"-toolarge", "ou", `,"content":"`+strings.Repeat("z", 2<<20)+`"`))
	if !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("publishing 2 MiB: err = %v, want %v", err, nats.ErrMaxPayload)
	}
	s.awaitDrained(time.Minute)

	dead := map[string]storedMsg{}
	for _, d := range s.bus.read(natsbus.StreamDead) {
		dead[d.Header.Get(natsbus.HeaderStreamSeq)] = d
	}
	outs := map[string]int{}
	for _, o := range s.bus.read(natsbus.StreamOut) {
		outs[o.Header.Get(jetstream.MsgIDHeader)]++
	}
	rows := map[string]string{}
	for _, r := range s.suppressions(g, len(hs)) {
		rows[r.MessageID] = r.Recipient
	}
	for i, h := range hs {
		d, parked := dead[strconv.FormatUint(seqs[i], 10)]
		outcomes := outs[h.id]
		if rows[h.id] != "" {
			outcomes++
		}
		switch {
		case h.id == "" && !parked:
			t.Errorf("%s: not on gate.dead", h.name)
		case h.id == "":
			if got := d.Header.Get(natsbus.HeaderError); !strings.Contains(got, h.reason) {
				t.Errorf("%s: Gate-Error %q, want it to say %q", h.name, got, h.reason)
			}
			// The original bytes, or a prefix that says it was cut.
			if cut := d.Header.Get(natsbus.HeaderTruncated); d.Size != len(h.body) && cut != strconv.Itoa(len(h.body)) {
				t.Errorf("%s: dead letter of %d bytes with Gate-Truncated %q, want the original %d bytes", h.name, d.Size, cut, len(h.body))
			}
		case parked:
			t.Errorf("%s: parked on gate.dead (%s), want it decided", h.name, d.Header.Get(natsbus.HeaderError))
		case outcomes != 1:
			t.Errorf("%s: forwarded %d times, suppression row %q: want exactly one outcome", h.name, outs[h.id], rows[h.id])
		}
	}
	// The second message to the CJK recipient was held by that recipient's
	// own window, under the recipient as sent.
	if got, want := rows[run+"-cjk-2"], "open_id:用户✓"+run; got != want {
		t.Errorf("second message to a unicode recipient: suppression row recipient %q, want %q", got, want)
	}
	if !g.alive() || g.Runs() != 1 || g.LogContains("panic") {
		t.Fatalf("the gate did not survive hostile input (runs %d):\n%s", g.Runs(), g.Tail(30))
	}
	// Still ready, and the scenes it was sent did not break the metrics.
	for _, path := range []string{"/readyz", "/metrics"} {
		if code, body, err := g.get(path); err != nil || code != http.StatusOK {
			t.Errorf("GET %s after hostile input: %d %v %.200s", path, code, err, body)
		}
	}
	t.Logf("FAULT hostile input: in %d (+1 refused by NATS) | out: dead %d, forwarded %d, suppressed %d", len(hs), len(dead), len(outs), len(rows))
}

// TestHugeMessagesKeepMemoryBounded piles up a backlog of 300 envelopes
// just under NATS's max payload (far over the gate's size limit) while the
// gate is stopped, then starts it with batches of 16: each is parked with
// its reason, and the gate's resident memory follows what it pulls at once
// (a few batches), not the 300 MiB backlog.
func TestHugeMessagesKeepMemoryBounded(t *testing.T) {
	const n, size, batch = 300, 1000 << 10, 16
	rs := startRedis(t)
	s := newStack(t, stackOptions{RedisURL: rs.url(), Rules: badModel, Env: map[string]string{"GATE_BATCH": strconv.Itoa(batch)}})
	s.memoryStreams()
	g := s.startGate(nil)
	g.Stop(10 * time.Second)
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	msgs := make([]message, n)
	filler := strings.Repeat("h", size)
	for i := range msgs {
		msgs[i] = message{ID: fmt.Sprintf("%s-huge-%d", run, i), Invalid: true}
		msgs[i].Raw = envelope(msgs[i].ID, "ou_huge", `,"content":"`+filler+`"`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := s.bus.publish(ctx, msgs, nil); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	g.start()
	_, before := g.rssKiB()
	s.awaitDrained(2 * time.Minute)
	took := time.Since(t0)
	now, peak := g.rssKiB()
	var dead int
	for _, d := range s.bus.readHeaders(natsbus.StreamDead) {
		if !strings.Contains(d.Header.Get(natsbus.HeaderError), "over the limit") {
			t.Errorf("dead letter seq %d: Gate-Error %q, want the size limit", d.Seq, d.Header.Get(natsbus.HeaderError))
		}
		dead++
	}
	if dead != n {
		t.Errorf("%d dead letters, want %d", dead, n)
	}
	// Generous: pulls of 2 batches, a batch or two in hand, their dead
	// letters, and the garbage of each, against a backlog of n.
	bound := before + 16*batch*size>>10
	if peak > bound {
		t.Errorf("gate peak RSS %d MiB after a backlog of %d messages of %d KiB, want under %d MiB (%d MiB at start + 16 batches)",
			peak>>10, n, size>>10, bound>>10, before>>10)
	}
	if !g.alive() {
		t.Fatal("the gate did not survive huge messages")
	}
	t.Logf("FAULT huge messages: in %d × %d KiB, a backlog | out: dead %d | gate RSS %d MiB when ready, %d MiB peak, %d MiB after | start to drained %s",
		n, size>>10, dead, before>>10, peak>>10, now>>10, took.Round(10*time.Millisecond))
}

// memoryStreams creates GATE_IN and GATE_DEAD in memory, as the gate would
// on disk (the gate leaves streams that exist alone): hundreds of MiB of
// huge messages then cost no disk writes, which other tests need.
func (s *stack) memoryStreams() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: natsbus.StreamIn, Subjects: []string{"gate.in"}, Retention: jetstream.WorkQueuePolicy,
			MaxMsgSize: maxPayload, Duplicates: 2 * time.Minute},
		{Name: natsbus.StreamDead, Subjects: []string{"gate.dead"}, Duplicates: 2 * time.Hour},
	} {
		cfg.Storage = jetstream.MemoryStorage
		if _, err := s.bus.js.CreateStream(ctx, cfg); err != nil {
			s.t.Fatalf("create %s: %v", cfg.Name, err)
		}
	}
}
