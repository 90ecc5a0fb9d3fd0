// Package redact keeps secrets out of what the gate logs and prints: it
// masks the passwords and tokens of configured addresses (URLs, lists of
// them, libpq keyword/value strings), and a Scrubber masks them, and the
// secret settings, wherever they turn up in free text, errors and log
// records.
//
// It imports only the standard library.
package redact
