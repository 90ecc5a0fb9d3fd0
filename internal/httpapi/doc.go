// Package httpapi serves the gate's HTTP interface: health and readiness,
// Prometheus metrics, the report page (package webui) at /, and under /v1/
// the rules in force, the suppression reports (list, CSV export, summary,
// hourly timeseries, top recipients) and the OpenAPI 3 document that
// describes them all (openapi.json, embedded; a test keeps its schemas in
// step with the Go types). One function (Status, errors.go) maps the class
// of a domain error (gate.Classify) to a status code, and one middleware checks the bearer token on /v1/*
// (the writing token anywhere, the reading token where a route only reads); before both, one
// checks the Host against an allow-list, so that a web page cannot reach
// the gate through DNS rebinding, and one (browser.go) refuses a request
// that may change state when a browser sent it from another site's page.
// The endpoints that change state from a JSON body take only a body
// declared application/json, which such a page cannot send unasked.
//
// It may import the standard library, the Prometheus client, internal/gate,
// internal/metrics and internal/webui; never an adapter.
package httpapi
