package redisstore

import (
	"github.com/redis/go-redis/v9"
)

// The first bytes of the members of a recipient's key (see admit.lua).
const (
	capByte  = 128 // an entry of the cap window
	longByte = 255 // an entry of a scene whose tag takes three bytes
)

// tagOf is the prefix of the entries of the scene of tag t.
func tagOf(t int) string {
	if t < longByte-capByte {
		return string([]byte{byte(capByte + t)})
	}
	return string([]byte{longByte, byte(t / 256), byte(t % 256)})
}

// Entries counts, in a recipient's key read whole (ZRANGE key 0 -1
// WITHSCORES), the entries of scene's window, or with scene "" those of the
// cap window, whatever their age: what the tests and the fault suite check
// against the audit log.
func Entries(key []redis.Z, scene string) int {
	prefix := string([]byte{capByte})
	if scene != "" {
		prefix = ""
		for _, z := range key {
			if z.Member == sceneTag(scene) {
				prefix = tagOf(int(z.Score))
			}
		}
		if prefix == "" {
			return 0
		}
	}
	n := 0
	for _, z := range key {
		m, _ := z.Member.(string)
		if len(m) == len(prefix)+memberBytes && m[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

// Windows counts what a recipient's key read whole holds, as the layout
// before it counted keys: each scene window and the cap window that hold an
// entry, and each rate limit's TAT.
func Windows(key []redis.Z) int {
	n := 0
	if Entries(key, "") > 0 {
		n++
	}
	for _, z := range key {
		m, _ := z.Member.(string)
		switch {
		case len(m) > 1 && m[0] == '#' && Entries(key, m[1:]) > 0:
			n++
		case len(m) > 1 && m[0] == 'g':
			n++
		}
	}
	return n
}
