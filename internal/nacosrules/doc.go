// Package nacosrules is the rule source over Nacos: it reads the rule
// document with nacos-sdk-go (GetConfig, apply, then ListenConfig), hands
// every change to rules.Live, publishes documents for `gate rules push`, and
// falls back to the SDK's local snapshot when the server is down at start.
//
// The SDK takes no context and calls back on a new goroutine per change, so
// changes can overlap or arrive out of order: this package never trusts a
// callback's copy, it re-reads the current document through rules.Live's
// serialised Reload, so the newest published document always wins.
//
// It may import the standard library, nacos-sdk-go, internal/gate and
// internal/rules; never another adapter.
package nacosrules
