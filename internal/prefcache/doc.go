// Package prefcache keeps recipients' preferences (gate.Preferences) in
// the gate's memory, in front of the gate.PreferenceStore every gate
// shares. While the store holds few preferences (Options.Mirror rows), the
// cache mirrors them whole and never asks the store about a recipient;
// otherwise it is a bounded LRU that remembers recipients without
// preferences too (most have none), so that a batch asks the store only
// about the recipients it has not seen. A change made through any gate
// reaches every gate's cache within about one poll: each cache polls the
// store's changes every second, and reads the changed recipients again
// (the mirror) or drops them (the LRU).
//
// It imports the standard library, internal/gate and internal/ratelog.
package prefcache
