package gate

import (
	"testing"
	"time"
)

func TestParkedRecord(t *testing.T) {
	at := time.Date(2026, 11, 26, 9, 30, 0, 0, time.UTC)
	valid := []byte(`{"id":"m-1","scene":"alert.disk_full","receive_id_type":"open_id","receive_id":"ou_1","msg_type":"text","content":"{\"text\":\"hi\"}"}`)
	tests := []struct {
		name string
		d    Delivery
		want Record
	}{
		{"readable: its scene, keyed by sequence and id", Delivery{Data: valid, Seq: 7},
			Record{Key: "parked:7:m-1", Scene: "alert.disk_full", Outcome: OutcomeParked, At: at}},
		{"unreadable: no scene, and no unchecked header id in the key", Delivery{Data: []byte("not json"), HeaderID: "h\x00id", Seq: 8},
			Record{Key: "parked:8:", Outcome: OutcomeParked, At: at}},
		{"too large: read as a decision reads it", Delivery{Data: append(valid, make([]byte, 2048)...), Seq: 9},
			Record{Key: "parked:9:", Outcome: OutcomeParked, At: at}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParkedRecord(tt.d, 1024, at)
			if got.Key != tt.want.Key || got.Scene != tt.want.Scene || got.Outcome != tt.want.Outcome || !got.At.Equal(tt.want.At) {
				t.Errorf("ParkedRecord = %+v, want %+v", got, tt.want)
			}
		})
	}
}
