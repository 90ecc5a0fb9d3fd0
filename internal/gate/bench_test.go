package gate

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// benchEnvelope is a producer's 1 KB envelope, as the throughput benchmark
// (bench/gatebench) sends them.
func benchEnvelope() []byte {
	head := `{"id":"7f1c4d8e-2b3a-4c5d-9e8f-0a1b2c3d4e5f","scene":"alert.disk_full","receive_id_type":"open_id",` +
		`"receive_id":"ou_84aad35d084aa403a838cf73ee18467a","msg_type":"text","priority":"normal","content":"{\"text\":\"`
	tail := `\"}"}`
	return []byte(head + strings.Repeat("x", 1024-len(head)-len(tail)) + tail)
}

// BenchmarkParseMessage parses a 1 KB envelope: on the gate's hot path once
// per message. scan is ParseMessage; json is the json.Unmarshal-based parse
// it replaced (parseMessageJSON), for comparison in the same run.
func BenchmarkParseMessage(b *testing.B) {
	data := benchEnvelope()
	for _, bc := range []struct {
		name  string
		parse func([]byte, string, string, int) (Message, error)
	}{{"scan", parseMessage}, {"json", parseMessageJSON}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.parse(data, "", "", 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParseDelivery parses the same 1 KB envelope as a delivery: with
// the producer's Nats-Msg-Id, Gate-Scene, Gate-Recipient and Gate-Priority
// headers (the header fast path, which does not decode the body), and
// without them (the body path, ParseMessage; body-json is that path as it
// was, on json.Unmarshal).
func BenchmarkParseDelivery(b *testing.B) {
	data := benchEnvelope()
	for _, bc := range []struct {
		name string
		d    Delivery
		json bool
	}{
		{"headers", Delivery{Data: data, HeaderID: "7f1c4d8e-2b3a-4c5d-9e8f-0a1b2c3d4e5f", HeaderScene: "alert.disk_full",
			HeaderRecipient: "open_id:ou_84aad35d084aa403a838cf73ee18467a", HeaderPriority: "normal"}, false},
		{"body", Delivery{Data: data}, false},
		{"body-json", Delivery{Data: data}, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if bc.json {
					_, err = parseMessageJSON(bc.d.Data, bc.d.HeaderID, bc.d.HeaderTZ, 0)
				} else {
					_, err = ParseDelivery(bc.d, 0)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParseCheck parses the body of a check with every field: scan is
// ParseCheck, json the json.Decoder-based parse it replaced.
func BenchmarkParseCheck(b *testing.B) {
	data := []byte(`{"id":"7f1c4d8e-2b3a-4c5d-9e8f-0a1b2c3d4e5f","scene":"alert.disk_full","receive_id_type":"open_id",` +
		`"receive_id":"ou_84aad35d084aa403a838cf73ee18467a","priority":"normal","tz":"Asia/Shanghai","dry_run":true}`)
	for _, bc := range []struct {
		name  string
		parse func([]byte) (CheckRequest, error)
	}{{"scan", ParseCheck}, {"json", parseCheckJSON}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.parse(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPlanMessage plans a message of a scene with two windows under
// two recipient caps, in a rule set of 20 scenes.
func BenchmarkPlanMessage(b *testing.B) {
	rs := &RuleSet{UnknownScene: ActionForward, Scenes: map[string]SceneRule{},
		RecipientCaps: []Limit{{Window: time.Hour, Max: 4}, {Window: 24 * time.Hour, Max: 20}}}
	for i := range 20 {
		rs.Scenes[fmt.Sprintf("scene.%02d", i)] = SceneRule{OnExceed: ActionSuppress,
			Limits: []Limit{{Window: time.Hour, Max: 1}, {Window: 24 * time.Hour, Max: 3}}}
	}
	m, err := ParseMessage(benchEnvelope(), "", 0)
	if err != nil {
		b.Fatal(err)
	}
	m.Scene = "scene.07"
	b.ReportAllocs()
	for b.Loop() {
		if p := PlanMessage(rs, m, time.Time{}); p.Request == nil {
			b.Fatal("no window request")
		}
	}
}
