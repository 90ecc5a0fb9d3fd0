package nacosrules

import "time"

// The defaults of Options, which gate serve's settings table names too.
const (
	// DefaultGroup is the Nacos group of the rule document.
	DefaultGroup = "GATE"
	// DefaultDataID is the Nacos data id of the rule document.
	DefaultDataID = "gate-rules.yaml"
	// DefaultResync is how often the document is read again besides the
	// server's push notifications, which a lost connection can miss.
	DefaultResync = 30 * time.Second
)
