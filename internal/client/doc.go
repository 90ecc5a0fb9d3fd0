// Package client is the gate's HTTP API seen from outside: what the
// command line's report, rules preview and rules push ask a running gate,
// and what tests ask it the same way. It sends the bearer token, decodes
// the JSON answers into the domain's and the API's types, and turns any
// other answer into an error that says which command failed and why.
//
// It may import the standard library, internal/gate and internal/httpapi
// (for the wire types it decodes); never an adapter.
package client
