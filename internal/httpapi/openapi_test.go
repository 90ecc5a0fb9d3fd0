package httpapi

import (
	"encoding/json"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

type openapiSchema struct {
	Properties           map[string]json.RawMessage `json:"properties"`
	Required             []string                   `json:"required"`
	AdditionalProperties *bool                      `json:"additionalProperties"`
}

type openapiDocument struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]openapiSchema `json:"schemas"`
	} `json:"components"`
}

func loadOpenAPI(t *testing.T) openapiDocument {
	t.Helper()
	var doc openapiDocument
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	return doc
}

// jsonFields lists the JSON names of what encoding/json writes for v's
// type, and which of them it may leave out (omitempty, omitzero).
func jsonFields(typ reflect.Type) (all, optional []string) {
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			a, o := jsonFields(f.Type)
			all, optional = append(all, a...), append(optional, o...)
			continue
		}
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		all = append(all, name)
		if strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero") {
			optional = append(optional, name)
		}
	}
	return all, optional
}

// TestOpenAPISchemasMatchTypes keeps the hand-written document honest: each
// schema names exactly the fields its Go type encodes, requires exactly
// those never left out, and allows no others.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	doc := loadOpenAPI(t)
	types := map[string]any{
		"Suppression":        gate.Suppression{},
		"SuppressionPage":    gate.SuppressionPage{},
		"SceneSummary":       gate.SceneSummary{},
		"Summary":            Summary{},
		"HourSummary":        gate.HourSummary{},
		"Timeseries":         Timeseries{},
		"RecipientCount":     gate.RecipientCount{},
		"TopRecipients":      TopRecipients{},
		"Refund":             gate.Refund{},
		"RefundResult":       gate.RefundResult{},
		"RefundPage":         gate.RefundPage{},
		"Preferences":        gate.Preferences{},
		"RuleStatus":         gate.RuleStatus{},
		"RuleSet":            gate.RuleSet{},
		"RulePreview":        gate.RulePreview{},
		"ScenePreview":       gate.ScenePreview{},
		"PreviewCounts":      gate.PreviewCounts{},
		"Explanation":        gate.Explanation{},
		"ExplainDecision":    gate.ExplainDecision{},
		"ExceededLimit":      gate.ExceededLimit{},
		"LimitState":         gate.LimitState{},
		"HeldQueueSummary":   gate.HeldQueueSummary{},
		"ExplainPreferences": gate.ExplainPreferences{},
		"ExplainQuietHours":  gate.ExplainQuietHours{},
		// SceneRule, QuietHours and Limit write fields their tags do not
		// name (durations as text): TestOpenAPIRuleSchemasMatchEncoding.
	}
	for name, v := range types {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s is missing", name)
			continue
		}
		all, optional := jsonFields(reflect.TypeOf(v))
		var props []string
		for p := range s.Properties {
			props = append(props, p)
		}
		sort.Strings(all)
		sort.Strings(props)
		if !slices.Equal(all, props) {
			t.Errorf("schema %s has properties %v; %T encodes %v", name, props, v, all)
		}
		var required []string
		for _, f := range all {
			if !slices.Contains(optional, f) {
				required = append(required, f)
			}
		}
		got := slices.Sorted(slices.Values(s.Required))
		if !slices.Equal(got, required) {
			t.Errorf("schema %s requires %v; %T always writes %v", name, got, v, required)
		}
		if s.AdditionalProperties == nil || *s.AdditionalProperties {
			t.Errorf("schema %s allows additional properties; want additionalProperties: false so drift shows", name)
		}
	}
}

// TestOpenAPIPathsAreServed checks that the document lists every route
// and nothing more: every path it names answers something other than 404,
// and every API path the server routes is in it.
func TestOpenAPIPathsAreServed(t *testing.T) {
	doc := loadOpenAPI(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi version %q, want 3.x", doc.OpenAPI)
	}
	srv := newTestServer(t, &fakeStore{})
	for path, ops := range doc.Paths {
		for method := range ops {
			if !slices.Contains([]string{"get", "post", "put", "delete"}, method) {
				t.Errorf("%s %s: the gate serves only GET, POST, PUT and DELETE", method, path)
			}
		}
		if path == "/metrics" {
			continue // served when the server has metrics; the test server has none
		}
		if code, _, body := get(t, srv, http.MethodGet, path, true); code == http.StatusNotFound {
			t.Errorf("GET %s is in the document but answers 404: %s", path, body)
		}
	}
	for _, path := range []string{"/", "/healthz", "/readyz", "/metrics", "/v1/openapi.json", "/v1/rules",
		"/v1/suppressions", "/v1/suppressions.csv", "/v1/reports/summary", "/v1/reports/timeseries",
		"/v1/reports/top-recipients", "/v1/refund", "/v1/refunds", "/v1/cancel", "/v1/explain"} {
		if _, ok := doc.Paths[path]; !ok {
			t.Errorf("%s is served but not in the document", path)
		}
	}
}

// TestOpenAPIDocumentsRefusals keeps the document in step with the
// refusals every route can give: 403 for a Host not allowed on all but the
// probes, and on a request that may change state for a cross-site one too;
// 415 on each that takes a JSON body; 400 for a query string that does not
// parse on every /v1/ path; and the length bounds of the scene and
// recipient filters.
func TestOpenAPIDocumentsRefusals(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Responses   map[string]json.RawMessage `json:"responses"`
			RequestBody struct {
				Content map[string]json.RawMessage `json:"content"`
			} `json:"requestBody"`
		} `json:"paths"`
		Components struct {
			Parameters map[string]struct {
				Schema struct {
					MaxLength int `json:"maxLength"`
				} `json:"schema"`
			} `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			resp := op.Responses
			if _, ok := resp["403"]; ok == probePaths[path] {
				t.Errorf("%s %s: 403 documented %v; the Host check applies to it: %v", method, path, ok, !probePaths[path])
			}
			if want := `{"$ref":"#/components/responses/Refused"}`; !safeMethods[strings.ToUpper(method)] && !jsonEqual(resp["403"], want) {
				t.Errorf("%s %s: 403 is %s, want %s: it may change state, so a cross-site request gets 403", method, path, resp["403"], want)
			}
			_, only := op.RequestBody.Content["application/json"]
			only = only && len(op.RequestBody.Content) == 1
			if _, ok := resp["415"]; ok != only {
				t.Errorf("%s %s: 415 documented %v; it takes only JSON: %v", method, path, ok, only)
			}
			if _, ok := resp["400"]; strings.HasPrefix(path, "/v1/") && !ok {
				t.Errorf("%s %s: 400 is not documented; a malformed query string gets it", method, path)
			}
		}
	}
	for name, want := range map[string]int{"scene": gate.MaxSceneBytes, "recipient": maxRecipientBytes} {
		if got := doc.Components.Parameters[name].Schema.MaxLength; got != want {
			t.Errorf("parameter %s: maxLength %d, want %d as the server checks", name, got, want)
		}
	}
}

// TestOpenAPIRuleSchemasMatchEncoding checks the schemas of the rule types
// that encode themselves against what they write: every field set, for the
// properties, and only what must be set, for the required ones.
func TestOpenAPIRuleSchemasMatchEncoding(t *testing.T) {
	doc := loadOpenAPI(t)
	qh := &gate.QuietHours{From: 22 * time.Hour, To: 8 * time.Hour, Action: gate.ActionDefer}
	// full lists values that together set every field (some exclude
	// others); what every one of min writes is what is always written.
	limits := []any{gate.Limit{Window: time.Hour, Max: 1}, gate.Limit{Calendar: gate.CalendarDay, Max: 3}}
	for _, tt := range []struct {
		schema    string
		full, min []any
	}{
		{"Limit", limits, limits},
		{"QuietHours", []any{qh}, []any{qh}},
		{"SceneRule", []any{gate.SceneRule{
			Limits: []gate.Limit{{Window: time.Hour, Max: 1}}, OnExceed: gate.ActionDefer,
			BypassPriorities: []gate.Priority{gate.PriorityUrgent}, Shadow: true, OnStoreError: gate.ActionForward,
			MaxDefer: 6 * time.Hour, DeferFallback: gate.ActionDrop, DigestGroup: "ci", TZ: "Asia/Shanghai", QuietHours: qh,
		}}, []any{gate.SceneRule{Limits: []gate.Limit{{Window: time.Hour, Max: 1}}, OnExceed: gate.ActionSuppress}}},
	} {
		s, ok := doc.Components.Schemas[tt.schema]
		if !ok {
			t.Errorf("schema %s is missing", tt.schema)
			continue
		}
		props := slices.Sorted(maps.Keys(s.Properties))
		var all []string
		for _, v := range tt.full {
			all = append(all, encodedKeys(t, v)...)
		}
		if all = slices.Compact(slices.Sorted(slices.Values(all))); !slices.Equal(all, props) {
			t.Errorf("schema %s has properties %v; %T with every field set encodes %v", tt.schema, props, tt.full[0], all)
		}
		always := encodedKeys(t, tt.min[0])
		for _, v := range tt.min[1:] {
			keys := encodedKeys(t, v)
			always = slices.DeleteFunc(always, func(k string) bool { return !slices.Contains(keys, k) })
		}
		if req := slices.Sorted(slices.Values(s.Required)); !slices.Equal(always, req) {
			t.Errorf("schema %s requires %v; %T with only what it needs encodes %v", tt.schema, req, tt.min[0], always)
		}
		if s.AdditionalProperties == nil || *s.AdditionalProperties {
			t.Errorf("schema %s allows additional properties; want additionalProperties: false so drift shows", tt.schema)
		}
	}
}

// encodedKeys are the names of the object v encodes as, sorted.
func encodedKeys(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode %T: %v", v, err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%T encodes %s, not an object: %v", v, b, err)
	}
	return slices.Sorted(maps.Keys(m))
}

// jsonEqual reports whether raw and want are the same JSON value, spaces
// aside.
func jsonEqual(raw json.RawMessage, want string) bool {
	var a, b any
	return json.Unmarshal(raw, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && reflect.DeepEqual(a, b)
}
