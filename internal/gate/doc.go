// Package gate holds the domain of the notification anti-fatigue gate: the
// message envelope, scene rules, window limits, outcomes, and the interfaces
// that the adapters (Redis, NATS, gorm, Nacos, HTTP) implement.
//
// It imports only the standard library. Adapters import gate; gate imports
// no adapter, and adapters never import each other. Only cmd/gate wires
// concrete types together.
package gate
