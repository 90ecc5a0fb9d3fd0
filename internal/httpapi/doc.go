// Package httpapi serves the gate's HTTP interface: health and readiness,
// Prometheus metrics, the rules in force and the suppression reports. One
// place maps domain errors to status codes, and one middleware checks the
// bearer token on /v1/*.
//
// It may import the standard library, the Prometheus client, internal/gate
// and internal/metrics; never an adapter.
package httpapi
