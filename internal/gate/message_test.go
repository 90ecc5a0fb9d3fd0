package gate

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParseMessage(t *testing.T) {
	long := strings.Repeat("x", MaxIDBytes+1)
	shanghai := mustZone(t, "Asia/Shanghai")
	tests := []struct {
		name     string
		data     string
		headerID string
		wantErr  string // substring; "" means valid
		want     Message
	}{
		{name: "full", data: `{"id":"m1","scene":"s","receive_id_type":"email","receive_id":"a@b.c","msg_type":"text","content":"{\"text\":\"hi\"}","priority":"urgent"}`,
			want: Message{ID: "m1", Scene: "s", ReceiveIDType: "email", ReceiveID: "a@b.c", Priority: PriorityUrgent}},
		{name: "feishu uuid as id", data: `{"uuid":"u1","scene":"s","receive_id":"ou_1"}`,
			want: Message{ID: "u1", Scene: "s", ReceiveIDType: "open_id", ReceiveID: "ou_1", Priority: PriorityNormal}},
		{name: "id from header", data: `{"scene":"s","receive_id":"ou_1","content":{"text":"object content"}}`, headerID: "h1",
			want: Message{ID: "h1", Scene: "s", ReceiveIDType: "open_id", ReceiveID: "ou_1", Priority: PriorityNormal}},
		{name: "unicode recipient", data: `{"id":"m","scene":"s","receive_id":"用户✓"}`,
			want: Message{ID: "m", Scene: "s", ReceiveIDType: "open_id", ReceiveID: "用户✓", Priority: PriorityNormal}},
		{name: "not json", data: `hello`, wantErr: "not a JSON object"},
		{name: "array", data: `[1,2]`, wantErr: "not a JSON object"},
		{name: "empty", data: `  `, wantErr: "empty"},
		{name: "binary", data: "\xff\xfe\x00", wantErr: "UTF-8"},
		{name: "NUL byte", data: "{\"id\":\"m\",\"scene\":\"s\",\"receive_id\":\"1\"}\x00", wantErr: "message contains a NUL byte (at byte 39)"},
		{name: "no id", data: `{"scene":"s","receive_id":"ou_1"}`, wantErr: "id is missing"},
		{name: "blank scene", data: `{"id":"m","scene":"  ","receive_id":"ou_1"}`, wantErr: "scene is missing"},
		{name: "no recipient", data: `{"id":"m","scene":"s"}`, wantErr: "receive_id is missing"},
		{name: "wrong type", data: `{"id":5,"scene":"s","receive_id":"ou_1"}`, wantErr: `field "id" must be a string`},
		{name: "id too long", data: `{"id":"` + long + `","scene":"s","receive_id":"ou_1"}`, wantErr: "over the limit"},
		{name: "control char", data: `{"id":"a\nb","scene":"s","receive_id":"ou_1"}`, wantErr: "control character"},
		{name: "bad id type", data: `{"id":"m","scene":"s","receive_id_type":"phone","receive_id":"1"}`, wantErr: "receive_id_type"},
		{name: "bad priority", data: `{"id":"m","scene":"s","receive_id":"1","priority":"p0"}`, wantErr: "priority"},
		{name: "tz", data: `{"id":"m","scene":"s","receive_id":"1","tz":"Asia/Shanghai"}`,
			want: Message{ID: "m", Scene: "s", ReceiveIDType: "open_id", ReceiveID: "1", Priority: PriorityNormal, TZ: "Asia/Shanghai", Zone: shanghai}},
		{name: "empty tz means none", data: `{"id":"m","scene":"s","receive_id":"1","tz":""}`,
			want: Message{ID: "m", Scene: "s", ReceiveIDType: "open_id", ReceiveID: "1", Priority: PriorityNormal}},
		{name: "null tz means none", data: `{"id":"m","scene":"s","receive_id":"1","tz":null}`,
			want: Message{ID: "m", Scene: "s", ReceiveIDType: "open_id", ReceiveID: "1", Priority: PriorityNormal}},
		{name: "unknown tz", data: `{"id":"m","scene":"s","receive_id":"1","tz":"Mars/Base"}`,
			wantErr: `tz "Mars/Base" is an unknown time zone: want an IANA name such as Asia/Shanghai`},
		{name: "host's zone", data: `{"id":"m","scene":"s","receive_id":"1","tz":"Local"}`, wantErr: `tz "Local" is an unknown time zone`},
		{name: "path as tz", data: `{"id":"m","scene":"s","receive_id":"1","tz":"../../etc/passwd"}`, wantErr: `tz "../../etc/passwd" is an unknown time zone`},
		{name: "blank tz", data: `{"id":"m","scene":"s","receive_id":"1","tz":" "}`, wantErr: `tz " " is an unknown time zone`},
		{name: "tz as a number", data: `{"id":"m","scene":"s","receive_id":"1","tz":8}`, wantErr: `field "tz" must be a string`},
		// A lone surrogate escape is read as U+FFFD by JSON readers: "r\ud800"
		// would be the recipient "r\ufffd". Refused where the gate reads
		// text; a pair is one character; content is forwarded as sent.
		{name: "lone high surrogate in the recipient", data: `{"id":"m","scene":"s","receive_id":"r\ud800"}`,
			wantErr: `message is not valid UTF-8 JSON: \ud800 at byte 37 is a lone surrogate escape`},
		{name: "lone low surrogate in the id", data: `{"id":"m\uDFFF","scene":"s","receive_id":"r"}`, wantErr: `\uDFFF at byte 8 is a lone surrogate escape`},
		{name: "reversed pair in the scene", data: `{"id":"m","scene":"s\udc00\ud800","receive_id":"r"}`, wantErr: `\udc00 at byte 20 is a lone surrogate escape`},
		{name: "lone surrogate in a key", data: `{"id":"m","scene":"s","receive_id":"r","\ud800":1}`, wantErr: `\ud800 at byte 40 is a lone surrogate escape`},
		{name: "email recipient, trimmed and in lower case", data: `{"id":"m","scene":"s","receive_id_type":"email","receive_id":" Alice.O'Neil@Example.COM  "}`,
			want: Message{ID: "m", Scene: "s", ReceiveIDType: "email", ReceiveID: "alice.o'neil@example.com", Priority: PriorityNormal}},
		{name: "email recipient, other letters as sent", data: `{"id":"m","scene":"s","receive_id_type":"email","receive_id":"Ünal@Example.com"}`,
			want: Message{ID: "m", Scene: "s", ReceiveIDType: "email", ReceiveID: "Ünal@example.com", Priority: PriorityNormal}},
		{name: "Feishu ids byte-exact", data: `{"id":"m","scene":"s","receive_id_type":"user_id","receive_id":" Ou_AB "}`,
			want: Message{ID: "m", Scene: "s", ReceiveIDType: "user_id", ReceiveID: " Ou_AB ", Priority: PriorityNormal}},
		{name: "surrogate pair", data: `{"id":"m","scene":"s","receive_id":"r\ud83d\ude00"}`,
			want: Message{ID: "m", Scene: "s", ReceiveIDType: "open_id", ReceiveID: "r\U0001F600", Priority: PriorityNormal}},
		{name: "lone surrogate in content", data: `{"id":"m","scene":"s","receive_id":"r","content":"\ud800"}`,
			want: Message{ID: "m", Scene: "s", ReceiveIDType: "open_id", ReceiveID: "r", Priority: PriorityNormal}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMessage([]byte(tt.data), tt.headerID, 0)
			if !parsed(t, err, tt.wantErr) {
				return
			}
			got.Raw = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseMessageSizeLimit(t *testing.T) {
	data := []byte(`{"id":"m","scene":"s","receive_id":"1","content":"` + strings.Repeat("a", 2000) + `"}`)
	if _, err := ParseMessage(data, "", 1024); err == nil || !strings.Contains(err.Error(), "over the limit of 1024") {
		t.Fatalf("err = %v, want a size error", err)
	}
}

func TestParseMessageKeepsSceneOfInvalid(t *testing.T) {
	m, err := ParseMessage([]byte(`{"id":"m","scene":"alert.x"}`), "", 0)
	if err == nil || m.Scene != "alert.x" {
		t.Fatalf("got scene %q, err %v; want the scene kept on an invalid message", m.Scene, err)
	}
}

func FuzzParseMessage(f *testing.F) {
	f.Add([]byte(`{"id":"m1","scene":"s","receive_id":"ou_1"}`), "")
	f.Add([]byte(`{"uuid":"u","scene":"s","receive_id_type":"chat_id","receive_id":"oc_1","content":{"a":[1,2,{"b":null}]}}`), "hdr")
	f.Add([]byte(`[[[[[[[[[[]]]]]]]]]]`), "")
	f.Fuzz(func(t *testing.T, data []byte, hdr string) {
		m, err := ParseMessage(data, hdr, 4096)
		checkParsed(t, m, err)
	})
}

func TestParseDelivery(t *testing.T) {
	body := `{"id":"b1","scene":"body.scene","receive_id_type":"email","receive_id":"a@b.c","msg_type":"text","priority":"high"}`
	hdr := func(id, scene, recipient, priority string) Delivery {
		return Delivery{Data: []byte(body), HeaderID: id, HeaderScene: scene, HeaderRecipient: recipient, HeaderPriority: priority}
	}
	withBody := func(d Delivery, data string) Delivery { d.Data = []byte(data); return d }
	fromBody := Message{ID: "b1", Scene: "body.scene", ReceiveIDType: "email", ReceiveID: "a@b.c", Priority: PriorityHigh}
	long := strings.Repeat("x", MaxReceiveIDBytes+1)
	shanghai, berlin := mustZone(t, "Asia/Shanghai"), mustZone(t, "Europe/Berlin")
	withTZ := func(d Delivery, tz string) Delivery { d.HeaderTZ = tz; return d }
	tzBody := func(tz string) string {
		return `{"id":"b1","scene":"body.scene","receive_id_type":"email","receive_id":"a@b.c","priority":"high","tz":"` + tz + `"}`
	}
	inZone := func(m Message, tz string, loc *time.Location) Message { m.TZ, m.Zone = tz, loc; return m }
	tests := []struct {
		name    string
		d       Delivery
		wantErr string // substring; "" means valid
		want    Message
	}{
		// The header fast path: the headers win, the body is not read.
		{name: "headers", d: hdr("h1", "alert.disk_full", "open_id:ou_1", "urgent"),
			want: Message{ID: "h1", Scene: "alert.disk_full", ReceiveIDType: "open_id", ReceiveID: "ou_1", Priority: PriorityUrgent}},
		{name: "no priority header means normal", d: hdr("h1", "s", "chat_id:oc_1", ""),
			want: Message{ID: "h1", Scene: "s", ReceiveIDType: "chat_id", ReceiveID: "oc_1", Priority: PriorityNormal}},
		{name: "recipient cut at the first colon", d: hdr("h1", "s", "email:a:b@c", ""),
			want: Message{ID: "h1", Scene: "s", ReceiveIDType: "email", ReceiveID: "a:b@c", Priority: PriorityNormal}},
		{name: "email recipient header, trimmed and in lower case", d: hdr("h1", "s", "email: A@B.c ", ""),
			want: Message{ID: "h1", Scene: "s", ReceiveIDType: "email", ReceiveID: "a@b.c", Priority: PriorityNormal}},
		{name: "open_id recipient header byte-exact", d: hdr("h1", "s", "open_id: OU_1 ", ""),
			want: Message{ID: "h1", Scene: "s", ReceiveIDType: "open_id", ReceiveID: " OU_1 ", Priority: PriorityNormal}},
		{name: "unicode recipient", d: hdr("h1", "s", "user_id:用户✓", "low"),
			want: Message{ID: "h1", Scene: "s", ReceiveIDType: "user_id", ReceiveID: "用户✓", Priority: PriorityLow}},
		{name: "body is not decoded", d: withBody(hdr("h1", "s", "open_id:ou_1", ""), `not json at all`),
			want: Message{ID: "h1", Scene: "s", ReceiveIDType: "open_id", ReceiveID: "ou_1", Priority: PriorityNormal}},
		{name: "body of an invalid envelope", d: withBody(hdr("h1", "s", "open_id:ou_1", ""), `{"priority":"p0"}`),
			want: Message{ID: "h1", Scene: "s", ReceiveIDType: "open_id", ReceiveID: "ou_1", Priority: PriorityNormal}},

		// Without all three headers: the body path, as ParseMessage.
		{name: "no headers", d: hdr("", "", "", ""), want: fromBody},
		{name: "id header only", d: withBody(hdr("h1", "", "", ""), `{"scene":"s","receive_id":"ou_1"}`),
			want: Message{ID: "h1", Scene: "s", ReceiveIDType: "open_id", ReceiveID: "ou_1", Priority: PriorityNormal}},
		{name: "no id header", d: hdr("", "s", "open_id:ou_1", "urgent"), want: fromBody},
		{name: "no scene header", d: hdr("h1", "", "open_id:ou_1", "urgent"), want: fromBody},
		{name: "no recipient header", d: hdr("h1", "s", "", "urgent"), want: fromBody},
		{name: "body path still decodes", d: withBody(hdr("h1", "s", "", ""), `not json`), wantErr: "not a JSON object"},

		// Invalid headers are invalid messages, named.
		{name: "recipient without colon", d: hdr("h1", "s", "ou_1", ""), wantErr: "Gate-Recipient header"},
		{name: "recipient without type", d: hdr("h1", "s", ":ou_1", ""), wantErr: "Gate-Recipient header"},
		{name: "recipient without id", d: hdr("h1", "s", "open_id:", ""), wantErr: "Gate-Recipient header"},
		{name: "blank receive id", d: hdr("h1", "s", "open_id:  ", ""), wantErr: "receive_id of the Gate-Recipient header is missing"},
		{name: "unknown id type", d: hdr("h1", "s", "phone:123", ""), wantErr: `Gate-Recipient header: receive_id_type "phone"`},
		{name: "receive id too long", d: hdr("h1", "s", "open_id:"+long, ""), wantErr: "over the limit of 512"},
		{name: "bad priority", d: hdr("h1", "s", "open_id:ou_1", "p0"), wantErr: `Gate-Priority header "p0"`},
		{name: "blank id", d: hdr(" ", "s", "open_id:ou_1", ""), wantErr: "Nats-Msg-Id header is missing"},
		{name: "id too long", d: hdr(strings.Repeat("i", MaxIDBytes+1), "s", "open_id:ou_1", ""), wantErr: "Nats-Msg-Id header is 257 bytes"},
		{name: "blank scene", d: hdr("h1", "\t", "open_id:ou_1", ""), wantErr: "Gate-Scene header is missing"},
		{name: "scene too long", d: hdr("h1", strings.Repeat("s", MaxSceneBytes+1), "open_id:ou_1", ""), wantErr: "Gate-Scene header is 257 bytes"},
		{name: "control char in scene", d: hdr("h1", "a\x01b", "open_id:ou_1", ""), wantErr: "Gate-Scene header contains a control character"},
		{name: "control char in receive id", d: hdr("h1", "s", "open_id:a\x7fb", ""), wantErr: "control character"},

		// The body is still checked as bytes.
		{name: "empty body", d: withBody(hdr("h1", "s", "open_id:ou_1", ""), " \n"), wantErr: "message is empty"},
		{name: "binary body", d: withBody(hdr("h1", "s", "open_id:ou_1", ""), "{\xff}"), wantErr: "UTF-8"},
		{name: "NUL in body", d: withBody(hdr("h1", "s", "open_id:ou_1", ""), "{\x00}"), wantErr: "NUL"},

		// A zone: Gate-TZ on either path, the tz field on the body path only;
		// the header wins.
		{name: "Gate-TZ on the header path", d: withTZ(hdr("h1", "s", "open_id:ou_1", ""), "Asia/Shanghai"),
			want: Message{ID: "h1", Scene: "s", ReceiveIDType: "open_id", ReceiveID: "ou_1", Priority: PriorityNormal, TZ: "Asia/Shanghai", Zone: shanghai}},
		{name: "tz field not read on the header path", d: withBody(hdr("h1", "s", "open_id:ou_1", ""), tzBody("Mars/Base")),
			want: Message{ID: "h1", Scene: "s", ReceiveIDType: "open_id", ReceiveID: "ou_1", Priority: PriorityNormal}},
		{name: "unknown Gate-TZ on the header path", d: withTZ(hdr("h1", "s", "open_id:ou_1", ""), "Mars/Base"),
			wantErr: `Gate-TZ header "Mars/Base" is an unknown time zone`},
		{name: "tz field on the body path", d: withBody(hdr("", "", "", ""), tzBody("Europe/Berlin")), want: inZone(fromBody, "Europe/Berlin", berlin)},
		{name: "Gate-TZ on the body path", d: withTZ(hdr("", "", "", ""), "Asia/Shanghai"), want: inZone(fromBody, "Asia/Shanghai", shanghai)},
		{name: "Gate-TZ wins over the tz field", d: withTZ(withBody(hdr("", "", "", ""), tzBody("Europe/Berlin")), "Asia/Shanghai"),
			want: inZone(fromBody, "Asia/Shanghai", shanghai)},
		{name: "Gate-TZ wins over an unknown tz field", d: withTZ(withBody(hdr("", "", "", ""), tzBody("Mars/Base")), "Asia/Shanghai"),
			want: inZone(fromBody, "Asia/Shanghai", shanghai)},
		{name: "unknown Gate-TZ on the body path", d: withTZ(withBody(hdr("", "", "", ""), tzBody("Europe/Berlin")), "Mars/Base"),
			wantErr: `Gate-TZ header "Mars/Base" is an unknown time zone`},
		{name: "unknown tz field on the body path", d: withBody(hdr("", "", "", ""), tzBody("Mars/Base")), wantErr: `tz "Mars/Base" is an unknown time zone`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseDelivery(tt.d, 0)
			if !parsed(t, err, tt.wantErr) {
				return
			}
			if len(got.Raw) != len(tt.d.Data) || &got.Raw[0] != &tt.d.Data[0] {
				t.Errorf("Raw is not the delivery's bytes")
			}
			got.Raw = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseDeliverySizeLimit(t *testing.T) {
	data := []byte(`{"content":"` + strings.Repeat("a", 2000) + `"}`)
	d := Delivery{Data: data, HeaderID: "h1", HeaderScene: "s", HeaderRecipient: "open_id:ou_1"}
	if _, err := ParseDelivery(d, 1024); err == nil || !IsInvalid(err) || !strings.Contains(err.Error(), "2014 bytes, over the limit of 1024") {
		t.Fatalf("err = %v, want a size error", err)
	}
	if _, err := ParseDelivery(d, len(data)); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	// 0 means the default, as for ParseMessage.
	d.Data = make([]byte, DefaultMaxMessageBytes+1)
	for i := range d.Data {
		d.Data[i] = 'a'
	}
	if _, err := ParseDelivery(d, 0); err == nil || !strings.Contains(err.Error(), "over the limit of 262144") {
		t.Fatalf("err = %v, want a size error at the default limit", err)
	}
}

func TestParseDeliveryKeepsSceneOfInvalid(t *testing.T) {
	d := Delivery{Data: []byte(`{}`), HeaderID: "h1", HeaderScene: "alert.x", HeaderRecipient: "phone:1"}
	m, err := ParseDelivery(d, 0)
	if err == nil || m.Scene != "alert.x" {
		t.Fatalf("got scene %q, err %v; want the scene kept on an invalid message", m.Scene, err)
	}
}

func TestParseDeliveryHeaderPathDoesNotAllocate(t *testing.T) {
	d := Delivery{Data: benchEnvelope(), HeaderID: "h1", HeaderScene: "alert.disk_full", HeaderRecipient: "open_id:ou_1", HeaderPriority: "high"}
	for _, tz := range []string{"", "Asia/Shanghai"} {
		d.HeaderTZ = tz // a zone is loaded once, then cached
		if n := testing.AllocsPerRun(100, func() {
			if _, err := ParseDelivery(d, 0); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("the header path with Gate-TZ %q allocates %v times per message, want 0", tz, n)
		}
	}
}

func FuzzParseDelivery(f *testing.F) {
	f.Add([]byte(`{"id":"m1","scene":"s","receive_id":"ou_1"}`), "", "", "", "", "")
	f.Add([]byte(`{"id":"m1"}`), "h1", "alert.x", "open_id:ou_1", "urgent", "")
	f.Add([]byte(`not json`), "h1", "s", "email:a:b", "", "")
	f.Add([]byte("{\x00}"), "h1", "s", "chat_id:oc_1", "low", "")
	f.Add([]byte(`{}`), "h1", "s", "phone:1", "p0", "")
	// What crashed or stalled the gate: header values that are not UTF-8,
	// control and bidirectional characters.
	f.Add([]byte(`{}`), "h1", "sc\xffene", "open_id:ou_1", "", "")
	f.Add([]byte(`{}`), "h\xff", "s", "open_id:ou_1", "", "")
	f.Add([]byte(`{}`), "h1", "s", "open_id:ou\xff", "", "")
	f.Add([]byte(`{}`), "h1", "s\u0085", "open_id:ou_1", "", "")
	f.Add([]byte(`{}`), "h1", "s\u202e", "open_id:ou_1", "high\xff", "")
	// Zones: a header on either path, a tz field, hostile names.
	f.Add([]byte(`{"id":"m1","scene":"s","receive_id":"ou_1","tz":"Europe/Berlin"}`), "", "", "", "", "Asia/Shanghai")
	f.Add([]byte(`{"id":"m1","scene":"s","receive_id":"ou_1","tz":"Mars/Base"}`), "", "", "", "", "")
	f.Add([]byte(`{}`), "h1", "s", "open_id:ou_1", "", "Etc/GMT+5")
	f.Add([]byte(`{}`), "h1", "s", "open_id:ou_1", "", "../../etc/passwd")
	f.Add([]byte(`{}`), "h1", "s", "open_id:ou_1", "", "Local")
	f.Add([]byte(`{}`), "h1", "s", "open_id:ou_1", "", "Asia/Shang\xffhai\u202e")
	f.Fuzz(func(t *testing.T, data []byte, id, scene, recipient, priority, tz string) {
		d := Delivery{Data: data, HeaderID: id, HeaderScene: scene, HeaderRecipient: recipient, HeaderPriority: priority, HeaderTZ: tz}
		m, err := ParseDelivery(d, 4096)
		if id == "" || scene == "" || recipient == "" {
			// ParseMessage when there is no Gate-TZ.
			want, werr := parseMessage(data, id, tz, 4096)
			if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) || !reflect.DeepEqual(m, want) {
				t.Fatalf("without all three headers: got %+v, %v; the body path gives %+v, %v", m, err, want, werr)
			}
		}
		if !checkParsed(t, m, err) {
			return
		}
		if len(m.Raw) > 4096 || !utf8.Valid(m.Raw) || bytes.IndexByte(m.Raw, 0) >= 0 || !bytes.Equal(m.Raw, data) {
			t.Fatalf("accepted a body the audit store cannot hold, or changed it: %q", m.Raw)
		}
		if tz != "" && m.TZ != tz {
			t.Fatalf("Gate-TZ %q lost: got %+v", tz, m)
		}
		if id != "" && scene != "" && recipient != "" {
			typ, rid, _ := strings.Cut(recipient, ":")
			if m.ID != id || m.Scene != scene || m.Recipient() != typ+":"+RecipientID(typ, rid) || m.TZ != tz {
				t.Fatalf("header path: got %+v from headers %q %q %q", m, id, scene, recipient)
			}
		}
	})
}

// hostileValues are what a producer may put in a field the gate keys,
// stores or labels, each with the reason CheckName gives.
var hostileValues = []struct{ name, v, reason string }{
	{"invalid UTF-8", "sc\xffene", "is not valid UTF-8"},
	{"truncated rune", "user\xe2\x80", "is not valid UTF-8"},
	{"NUL", "a\x00b", "contains a control character (U+0000 at byte 1)"},
	{"C0", "a\x1bb", "contains a control character (U+001B at byte 1)"},
	{"DEL", "a\x7fb", "contains a control character (U+007F at byte 1)"},
	{"C1", "a\u0085b", "contains a control character (U+0085 at byte 1)"},
	{"right-to-left override", "user\u202egnp.exe", "contains a bidirectional control character (U+202E at byte 4)"},
	{"isolate", "x\u2067y", "contains a bidirectional control character (U+2067 at byte 1)"},
	{"right-to-left mark", "x\u200f", "contains a bidirectional control character (U+200F at byte 1)"},
	{"Arabic letter mark", "x\u061c", "contains a bidirectional control character (U+061C at byte 1)"},
	{"first isolate", "\u2066x", "contains a bidirectional control character (U+2066 at byte 0)"},
	{"blank", " \t ", "is missing or empty"},
	{"too long", strings.Repeat("z", MaxReceiveIDBytes+1), "is 513 bytes, over the limit of"},
}

// TestHostileFields holds every field the gate keeps to the same checks on
// both paths: a hostile id, scene or receive_id is invalid whether it came
// in the body (raw or as a JSON \u escape) or in a header, and the reason
// names where it came from.
func TestHostileFields(t *testing.T) {
	const body = `{"id":"b1","scene":"s","receive_id":"ou_1"}`
	type path struct {
		name   string
		d      Delivery
		inBody bool   // the value is in the body, which must be UTF-8 as a whole
		field  string // how the reason names the field
	}
	for _, hv := range hostileValues {
		paths := []path{}
		for _, esc := range []bool{false, true} {
			enc := "raw"
			if esc {
				enc = "escaped"
			}
			for _, f := range []string{"id", "uuid", "scene", "receive_id"} {
				env := map[string]string{"id": "b1", "scene": "s", "receive_id": "ou_1"}
				if f == "uuid" {
					delete(env, "id")
				}
				env[f] = hv.v
				paths = append(paths, path{name: "body " + f + " " + enc, d: Delivery{Data: jsonObject(env, esc)}, inBody: true, field: f})
			}
		}
		hdr := Delivery{Data: []byte(body), HeaderID: "h1", HeaderScene: "s", HeaderRecipient: "open_id:ou_1"}
		id, scene, to := hdr, hdr, hdr
		id.HeaderID, scene.HeaderScene, to.HeaderRecipient = hv.v, hv.v, "open_id:"+hv.v
		paths = append(paths,
			path{name: "body without id, Nats-Msg-Id", d: Delivery{Data: []byte(`{"scene":"s","receive_id":"ou_1"}`), HeaderID: hv.v},
				field: "id (the Nats-Msg-Id header)"},
			path{name: "Nats-Msg-Id", d: id, field: "Nats-Msg-Id header"},
			path{name: "Gate-Scene", d: scene, field: "Gate-Scene header"},
			path{name: "Gate-Recipient", d: to, field: "receive_id of the Gate-Recipient header"})
		for _, p := range paths {
			t.Run(hv.name+"/"+p.name, func(t *testing.T) {
				want := p.field + " " + hv.reason
				if !utf8.ValidString(hv.v) && p.inBody {
					// The whole body is refused before it is decoded.
					want = "message is not valid UTF-8 JSON"
				}
				_, err := ParseDelivery(p.d, 0)
				if !parsed(t, err, want) {
					cleanReason(t, err)
				}
			})
		}
	}
}

// TestHostileEnumFields sends hostile values where only known values pass
// (receive_id_type, priority, tz) by both paths: each is refused, named, and
// quoted so that the reason is safe in a Gate-Error header and a log line.
func TestHostileEnumFields(t *testing.T) {
	for _, hv := range hostileValues {
		if hv.name == "blank" {
			continue // blank means the default on the body path
		}
		valid := Delivery{Data: []byte(`{"id":"b1","scene":"s","receive_id":"ou_1"}`), HeaderID: "h1", HeaderScene: "s", HeaderRecipient: "open_id:ou_1"}
		typ, prio, tz := valid, valid, valid
		typ.HeaderRecipient, prio.HeaderPriority, tz.HeaderTZ = hv.v+":ou_1", hv.v, hv.v
		for _, tc := range []struct {
			name, want string
			d          Delivery
		}{
			{"body receive_id_type", "receive_id_type ", Delivery{Data: jsonObject(map[string]string{"id": "b1", "scene": "s", "receive_id": "ou_1", "receive_id_type": hv.v}, true)}},
			{"body priority", "priority ", Delivery{Data: jsonObject(map[string]string{"id": "b1", "scene": "s", "receive_id": "ou_1", "priority": hv.v}, true)}},
			{"Gate-Recipient type", "Gate-Recipient header: receive_id_type ", typ},
			{"Gate-Priority", "Gate-Priority header ", prio},
			{"body tz", "tz ", Delivery{Data: jsonObject(map[string]string{"id": "b1", "scene": "s", "receive_id": "ou_1", "tz": hv.v}, true)}},
			{"Gate-TZ", "Gate-TZ header ", tz},
		} {
			t.Run(hv.name+"/"+tc.name, func(t *testing.T) {
				want := tc.want
				if !utf8.ValidString(hv.v) && tc.d.HeaderID == "" {
					want = "message is not valid UTF-8 JSON"
				}
				_, err := ParseDelivery(tc.d, 0)
				if !parsed(t, err, want) {
					cleanReason(t, err)
				}
			})
		}
	}
}

// TestMsgTypeNotKept: msg_type is passed through, never interpreted, so
// any JSON value passes and both paths give the same Message.
func TestMsgTypeNotKept(t *testing.T) {
	for _, mt := range []string{`"text"`, `"a\u0000\u202e"`, `5`, `{"x":[]}`, `null`} {
		data := []byte(`{"id":"m","scene":"s","receive_id":"ou_1","msg_type":` + mt + `}`)
		fromBody, err := ParseMessage(data, "", 0)
		if err != nil {
			t.Fatalf("msg_type %s: %v", mt, err)
		}
		fromHeaders, err := ParseDelivery(Delivery{Data: data, HeaderID: "m", HeaderScene: "s", HeaderRecipient: "open_id:ou_1"}, 0)
		if err != nil {
			t.Fatalf("msg_type %s with headers: %v", mt, err)
		}
		if !reflect.DeepEqual(fromBody, fromHeaders) {
			t.Errorf("msg_type %s: from the body %+v, from headers %+v", mt, fromBody, fromHeaders)
		}
	}
}

// jsonObject encodes fields as a JSON object with their bytes as they are
// (even invalid UTF-8, which json.Marshal would replace), or, escaped, with
// every byte outside printable ASCII as a \u escape, as a producer's JSON
// encoder may write them.
func jsonObject(fields map[string]string, escaped bool) []byte {
	var b strings.Builder
	b.WriteByte('{')
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:\"", k)
		v := fields[k]
		for i, r := range v {
			switch {
			case r == utf8.RuneError && !strings.HasPrefix(v[i:], "\uFFFD"):
				b.WriteByte(v[i]) // invalid UTF-8 as it is: no JSON escape means it
			case r == '"' || r == '\\':
				b.WriteString(`\` + string(r))
			case escaped && (r < 0x20 || r > 0x7e) && r <= 0xffff:
				fmt.Fprintf(&b, `\u%04x`, r)
			case !escaped && r < 0x20:
				fmt.Fprintf(&b, `\u%04x`, r) // JSON has no raw control characters
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return []byte(b.String())
}

// cleanReason fails when an invalid message's reason could not go as it is
// into a Gate-Error header or a log line: it must be valid UTF-8 without
// control or bidirectional characters, whatever the producer sent.
func cleanReason(t *testing.T, err error) {
	t.Helper()
	r := InvalidReason(err)
	if !utf8.ValidString(r) || strings.IndexFunc(r, forbiddenInName) >= 0 {
		t.Errorf("reason %q is not clean text", r)
	}
}

// checkParsed checks what either parse gives, whatever the input: an
// *InvalidError whose reason is clean text, or a message whose every kept
// field passes the edge's checks. It reports whether the parse succeeded.
func checkParsed(t *testing.T, m Message, err error) bool {
	t.Helper()
	if err != nil {
		if !IsInvalid(err) {
			t.Fatalf("error %v is not an InvalidError", err)
		}
		cleanReason(t, err)
		return false
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"id", m.ID, MaxIDBytes}, {"scene", m.Scene, MaxSceneBytes}, {"receive_id", m.ReceiveID, MaxReceiveIDBytes}} {
		if err := CheckName(f.name, f.v, f.max); err != nil {
			t.Fatalf("accepted a message whose %v: %+v", err, m)
		}
	}
	if !receiveIDTypes[m.ReceiveIDType] || !ValidPriority(m.Priority) {
		t.Fatalf("accepted an unknown id type or priority: %+v", m)
	}
	if RecipientID(m.ReceiveIDType, m.ReceiveID) != m.ReceiveID {
		t.Fatalf("accepted a receive_id not as the gate keeps it: %+v", m)
	}
	if (m.TZ == "") != (m.Zone == nil) || (m.Zone != nil && m.Zone.String() != m.TZ) || (m.TZ != "" && !zoneName(m.TZ)) {
		t.Fatalf("accepted a zone that does not match its name: %+v", m)
	}
	return true
}

// parsed checks a parse's error against wantErr: an invalid-message error
// containing it, or no error when it is empty. It reports whether the parse
// succeeded, so that the caller goes on to check the message.
func parsed(t *testing.T, err error, wantErr string) bool {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) || !IsInvalid(err) {
			t.Fatalf("err = %v, want an invalid-message error containing %q", err, wantErr)
		}
		return false
	}
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	return true
}

func TestCheckName(t *testing.T) {
	for _, v := range []string{"alert.disk_full", "a b", "告警.磁盘", "👩\u200d💻", "مستخدم", strings.Repeat("x", MaxReceiveIDBytes)} {
		if err := CheckName("scene", v, MaxReceiveIDBytes); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", v, err)
		}
	}
	for _, hv := range append(hostileValues, struct{ name, v, reason string }{"empty", "", "is missing or empty"}) {
		t.Run(hv.name, func(t *testing.T) {
			parsed(t, CheckName("scene", hv.v, MaxReceiveIDBytes), "scene "+hv.reason)
		})
	}
}
