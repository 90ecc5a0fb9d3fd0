package gate

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseMessage(t *testing.T) {
	long := strings.Repeat("x", MaxIDBytes+1)
	tests := []struct {
		name     string
		data     string
		headerID string
		wantErr  string // substring; "" means valid
		want     Message
	}{
		{name: "full", data: `{"id":"m1","scene":"s","receive_id_type":"email","receive_id":"a@b.c","msg_type":"text","content":"{\"text\":\"hi\"}","priority":"urgent"}`,
			want: Message{ID: "m1", Scene: "s", ReceiveIDType: "email", ReceiveID: "a@b.c", MsgType: "text", Priority: PriorityUrgent}},
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
		{name: "no id", data: `{"scene":"s","receive_id":"ou_1"}`, wantErr: "id is missing"},
		{name: "blank scene", data: `{"id":"m","scene":"  ","receive_id":"ou_1"}`, wantErr: "scene is missing"},
		{name: "no recipient", data: `{"id":"m","scene":"s"}`, wantErr: "receive_id is missing"},
		{name: "wrong type", data: `{"id":5,"scene":"s","receive_id":"ou_1"}`, wantErr: `field "id" must be a string`},
		{name: "id too long", data: `{"id":"` + long + `","scene":"s","receive_id":"ou_1"}`, wantErr: "over the limit"},
		{name: "control char", data: `{"id":"a\nb","scene":"s","receive_id":"ou_1"}`, wantErr: "control character"},
		{name: "bad id type", data: `{"id":"m","scene":"s","receive_id_type":"phone","receive_id":"1"}`, wantErr: "receive_id_type"},
		{name: "bad priority", data: `{"id":"m","scene":"s","receive_id":"1","priority":"p0"}`, wantErr: "priority"},
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
		if err != nil {
			if !IsInvalid(err) {
				t.Fatalf("error %v is not an InvalidError", err)
			}
			return
		}
		if m.ID == "" || m.Scene == "" || m.ReceiveID == "" || !ValidPriority(m.Priority) {
			t.Fatalf("accepted an incomplete message: %+v", m)
		}
	})
}

func TestParseDelivery(t *testing.T) {
	body := `{"id":"b1","scene":"body.scene","receive_id_type":"email","receive_id":"a@b.c","msg_type":"text","priority":"high"}`
	hdr := func(id, scene, recipient, priority string) Delivery {
		return Delivery{Data: []byte(body), HeaderID: id, HeaderScene: scene, HeaderRecipient: recipient, HeaderPriority: priority}
	}
	withBody := func(d Delivery, data string) Delivery { d.Data = []byte(data); return d }
	fromBody := Message{ID: "b1", Scene: "body.scene", ReceiveIDType: "email", ReceiveID: "a@b.c", MsgType: "text", Priority: PriorityHigh}
	long := strings.Repeat("x", MaxReceiveIDBytes+1)
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
	if n := testing.AllocsPerRun(100, func() {
		if _, err := ParseDelivery(d, 0); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("the header path allocates %v times per message, want 0", n)
	}
}

func FuzzParseDelivery(f *testing.F) {
	f.Add([]byte(`{"id":"m1","scene":"s","receive_id":"ou_1"}`), "", "", "", "")
	f.Add([]byte(`{"id":"m1"}`), "h1", "alert.x", "open_id:ou_1", "urgent")
	f.Add([]byte(`not json`), "h1", "s", "email:a:b", "")
	f.Add([]byte("{\x00}"), "h1", "s", "chat_id:oc_1", "low")
	f.Add([]byte(`{}`), "h1", "s", "phone:1", "p0")
	f.Fuzz(func(t *testing.T, data []byte, id, scene, recipient, priority string) {
		d := Delivery{Data: data, HeaderID: id, HeaderScene: scene, HeaderRecipient: recipient, HeaderPriority: priority}
		m, err := ParseDelivery(d, 4096)
		if id == "" || scene == "" || recipient == "" {
			want, werr := ParseMessage(data, id, 4096)
			if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) || !reflect.DeepEqual(m, want) {
				t.Fatalf("without all three headers: got %+v, %v; ParseMessage gives %+v, %v", m, err, want, werr)
			}
		}
		if err != nil {
			if !IsInvalid(err) {
				t.Fatalf("error %v is not an InvalidError", err)
			}
			return
		}
		if m.ID == "" || m.Scene == "" || m.ReceiveID == "" || !receiveIDTypes[m.ReceiveIDType] || !ValidPriority(m.Priority) {
			t.Fatalf("accepted an incomplete message: %+v", m)
		}
		if len(m.Raw) > 4096 || !utf8.Valid(m.Raw) || bytes.IndexByte(m.Raw, 0) >= 0 || !bytes.Equal(m.Raw, data) {
			t.Fatalf("accepted a body the audit store cannot hold, or changed it: %q", m.Raw)
		}
		if id != "" && scene != "" && recipient != "" {
			if m.ID != id || m.Scene != scene || m.Recipient() != recipient || m.MsgType != "" {
				t.Fatalf("header path: got %+v from headers %q %q %q", m, id, scene, recipient)
			}
		}
	})
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
	for _, tc := range []struct {
		name, v, want string
	}{
		{"plain", "alert.disk_full", ""},
		{"inner space", "a b", ""},
		{"han", "告警.磁盘", ""},
		{"empty", "", "missing or empty"},
		{"blank", " \t", "missing or empty"},
		{"too long", strings.Repeat("x", 9), "over the limit of 8"},
		{"invalid UTF-8", "sc\xffene", "not valid UTF-8"},
		{"NUL", "a\x00b", "a control character (U+0000 at byte 1)"},
		{"DEL", "a\x7f", "a control character (U+007F"},
		{"C1", "a\u0085b", "a control character (U+0085"},
		{"RLO", "user\u202egnp.exe", "a bidirectional control character (U+202E at byte 4)"},
		{"isolate", "\u2066x", "a bidirectional control character (U+2066"},
		{"RLM", "x\u200f", "a bidirectional control character (U+200F"},
		{"ALM", "x\u061c", "a bidirectional control character (U+061C"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckName("scene", tc.v, 8*utf8.UTFMax)
			if tc.name == "too long" {
				err = CheckName("scene", tc.v, 8)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckName(%q) = %v, want nil", tc.v, err)
			case tc.want != "" && (err == nil || !IsInvalid(err) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("CheckName(%q) = %v, want an invalid-message error containing %q", tc.v, err, tc.want)
			}
		})
	}
}
