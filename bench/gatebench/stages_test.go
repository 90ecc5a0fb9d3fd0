package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

const exposition = `# TYPE gate_batch_size histogram
gate_batch_size_bucket{le="16"} %d
gate_batch_size_bucket{le="256"} %d
gate_batch_size_bucket{le="+Inf"} %d
gate_batch_size_sum %d
gate_batch_size_count %d
# TYPE gate_store_call_seconds histogram
gate_store_call_seconds_bucket{op="admit",store="window",le="0.001"} %d
gate_store_call_seconds_bucket{op="admit",store="window",le="0.01"} %d
gate_store_call_seconds_bucket{op="admit",store="window",le="+Inf"} %d
gate_store_call_seconds_sum{op="admit",store="window"} %g
gate_store_call_seconds_count{op="admit",store="window"} %d
`

// A phase's figures are the difference of two scrapes: mean batch size,
// and each call's mean and p99 bucket bound in ms.
func TestStagesFromTwoScrapes(t *testing.T) {
	body := fmt.Sprintf(exposition, 1, 2, 2, 20, 2, 2, 2, 2, 0.001, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
	defer srv.Close()
	before, err := scrapeGate(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	// Then 100 batches of 200, and 100 admits: 98 under 1 ms, 2 under 10 ms.
	body = fmt.Sprintf(exposition, 1, 102, 102, 20_020, 102, 100, 102, 102, 0.061, 102)
	after, err := scrapeGate(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	got := after.since(before)
	want := stageStats{"batch": 200, "window admit mean": 0.6, "window admit p99": 10}
	for k, v := range want {
		if g := got[k]; g < v-1e-9 || g > v+1e-9 {
			t.Errorf("%s: got %g, want %g", k, g, v)
		}
	}
}
