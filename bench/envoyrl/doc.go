// Package envoyrl is the module that builds envoyproxy/ratelimit, the peer
// that make bench-check measures the gate's check API against. It is a
// module of its own so that the gate's go.mod does not take the peer's
// dependencies; it holds no code of the peer's, only the version it builds
// (go.mod's tool line): cd bench/envoyrl && go build -o ../../bin/envoy-ratelimit
// github.com/envoyproxy/ratelimit/src/service_cmd.
package envoyrl
