package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestSuppressionReasonFilter: reason= reaches the store on the list and the
// export, empty means every reason, and a value no row can hold is a 400
// that names the ones it could.
func TestSuppressionReasonFilter(t *testing.T) {
	st := &fakeStore{}
	srv := newTestServer(t, st)
	for _, path := range []string{"/v1/suppressions", "/v1/suppressions.csv"} {
		for _, reason := range append([]string{""}, suppressionReasons...) {
			code, _, body := get(t, srv, "GET", path+"?scene=a&reason="+reason, true)
			if code != http.StatusOK || st.gotFilter.Reason != reason || st.gotFilter.Scene != "a" {
				t.Errorf("GET %s?reason=%s: %d %.80s, store asked for %+v; want 200 and reason %q", path, reason, code, body, st.gotFilter, reason)
			}
		}
		code, _, body := get(t, srv, "GET", path+"?reason=muted", true)
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &e)
		if code != http.StatusBadRequest || !strings.Contains(e.Error, "preference") || !strings.Contains(e.Error, `"muted"`) {
			t.Errorf("GET %s?reason=muted: %d %s; want 400 naming the reasons and the value", path, code, body)
		}
	}
}

// TestSuppressionReasonsDocumented keeps the reason filter's values in step
// with the reasons a suppression row documents, and with the parameter.
func TestSuppressionReasonsDocumented(t *testing.T) {
	var doc struct {
		Components struct {
			Parameters map[string]struct {
				Schema struct {
					Enum []string `json:"enum"`
				} `json:"schema"`
			} `json:"parameters"`
			Schemas map[string]struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	row := doc.Components.Schemas["Suppression"].Properties["reason"].Enum
	param := doc.Components.Parameters["reason"].Schema.Enum
	if !slices.Equal(row, suppressionReasons) || !slices.Equal(param, append([]string{""}, suppressionReasons...)) {
		t.Errorf("reasons: filter takes %q, Suppression.reason documents %q, the reason parameter %q; want them the same (the parameter with \"\")",
			suppressionReasons, row, param)
	}
}
