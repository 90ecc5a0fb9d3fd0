package gate

import (
	"reflect"
	"strings"
	"testing"
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
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !IsInvalid(err) {
					t.Fatalf("err = %v, want an invalid-message error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
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
