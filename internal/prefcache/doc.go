// Package prefcache keeps recipients' preferences (gate.Preferences) in
// the gate's memory, in front of the gate.PreferenceStore every gate
// shares: a bounded LRU that remembers recipients without preferences too
// (most have none), so that a batch asks the store only about the
// recipients it has not seen. A change made through any gate reaches every
// gate's cache within about one poll: each cache polls the store's changes
// every second and drops the recipients changed.
//
// It imports the standard library and internal/gate only.
package prefcache
