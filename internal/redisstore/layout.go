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

// timeBytes is the length of the admission time (Unix ms, big-endian) a
// window entry carries after its tag, and a TAT or the expiry after its name.
const timeBytes = 6

// sceneOf parses a scene tag member ('#' tag scene, see admit.lua) into
// the tag's number and the scene; ok is false for any other member.
func sceneOf(m string) (t int, scene string, ok bool) {
	switch {
	case len(m) >= 2 && m[0] == '#' && m[1] != longByte:
		return int(m[1]) - capByte, m[2:], true
	case len(m) >= 4 && m[0] == '#':
		return int(m[2])*256 + int(m[3]), m[4:], true
	}
	return 0, "", false
}

// Entries counts, in a recipient's key read whole (ZRANGE key 0 -1, scores
// or not), the entries of scene's window, or with scene "" those of the cap
// window, whatever their age: what the tests and the fault suite check
// against the audit log. An entry may carry an undo after its hash (a forced
// admission's, see admit.lua); no other member starts with a tag.
func Entries(key []redis.Z, scene string) int {
	prefix := string([]byte{capByte})
	if scene != "" {
		prefix = ""
		for _, z := range key {
			m, _ := z.Member.(string)
			if t, name, ok := sceneOf(m); ok && name == scene {
				prefix = tagOf(t)
			}
		}
		if prefix == "" {
			return 0
		}
	}
	n := 0
	for _, z := range key {
		m, _ := z.Member.(string)
		if len(m) >= len(prefix)+timeBytes+memberBytes && m[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

// TAT returns the theoretical arrival time (Unix ms) of the rate limit of
// scene, or with scene "" of the caps, in a recipient's key read whole; ok
// is false when the key holds none.
func TAT(key []redis.Z, scene string) (tat int64, ok bool) {
	prefix := "g" + string([]byte{capByte})
	if scene != "" {
		prefix = ""
		for _, z := range key {
			m, _ := z.Member.(string)
			if t, name, ok := sceneOf(m); ok && name == scene {
				prefix = "g" + tagOf(t)
			}
		}
		if prefix == "" {
			return 0, false
		}
	}
	for _, z := range key {
		m, _ := z.Member.(string)
		if len(m) == len(prefix)+timeBytes && m[:len(prefix)] == prefix {
			for i := len(prefix); i < len(m); i++ {
				tat = tat<<8 | int64(m[i])
			}
			return tat, true
		}
	}
	return 0, false
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
		if _, scene, ok := sceneOf(m); ok && Entries(key, scene) > 0 {
			n++
		}
		if len(m) > 1 && m[0] == 'g' {
			n++
		}
	}
	return n
}
