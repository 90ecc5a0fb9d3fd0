package httpapi

// DefaultAddr is where gate serve listens for the HTTP API, and so where
// the command-line client looks for a running gate by default: loopback
// only, since the API answers /readyz and /metrics without a token.
const DefaultAddr = "127.0.0.1:8080"
