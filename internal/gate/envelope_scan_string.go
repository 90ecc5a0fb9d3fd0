package gate

import (
	"encoding/binary"
	"fmt"
)

// The strings of an envelope: the scan's hot loop, since most of a body is
// its content string, and the \u escapes it judges where the gate reads
// text.

// plainByte marks the bytes a string holds as they are: not a quote, a
// backslash or a control character.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Bit patterns for testing eight bytes at once.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// str scans a string from its opening quote and reports whether it holds a
// backslash; with text set, a string the gate reads, it records a lone
// surrogate escape (surrogate). Most of a body is the content string, so
// the plain bytes are skipped eight at a time.
func (s *envScan) str(text bool) (escaped, ok bool) {
	d := s.data
	i := s.i + 1
	for {
		for i+8 <= len(d) {
			x := binary.LittleEndian.Uint64(d[i:])
			// Any byte < 0x20, == '"' or == '\\': each test is exact
			// about whether some byte matches.
			lt := (x - ones*0x20) &^ x
			q := x ^ (ones * '"')
			q = (q - ones) &^ q
			b := x ^ (ones * '\\')
			b = (b - ones) &^ b
			if (lt|q|b)&highs != 0 {
				break
			}
			i += 8
		}
		for i < len(d) && plainByte[d[i]] {
			i++
		}
		if i == len(d) {
			return false, s.eof()
		}
		switch c := d[i]; c {
		case '"':
			s.i = i + 1
			return escaped, true
		case '\\':
			escaped = true
			i++
			if i == len(d) {
				return false, s.eofIn("in string escape code")
			}
			switch d[i] {
			case 'b', 'f', 'n', 'r', 't', '\\', '/', '"':
				i++
			case 'u':
				i++
				for range 4 {
					if i == len(d) {
						return false, s.eofIn(`in \u hexadecimal character escape`)
					}
					if !isHex(d[i]) {
						return false, s.fail(d[i], `in \u hexadecimal character escape`)
					}
					i++
				}
				if text {
					i = s.surrogate(i)
				}
			default:
				return false, s.fail(d[i], "in string escape code")
			}
		default:
			return false, s.fail(c, "in string literal")
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// hexValue is the value of the four hex digits at d[i:i+4], or -1 when
// they are not four hex digits.
func hexValue(d []byte, i int) rune {
	if i+4 > len(d) {
		return -1
	}
	var r rune
	for _, c := range d[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// surrogate judges the \u escape that ends at i (its four hex digits just
// scanned) and returns where the scan goes on. An escape of a surrogate
// (U+D800 to U+DFFF) is half of a character: a high one followed at once
// by an escaped low one is a pair, one character beyond U+FFFF, and both
// are passed; alone, either half encodes no character, and is recorded as
// badText. json would read it as U+FFFD, so that "\ud800" and "\ufffd"
// would name one id or recipient; the body is not the valid UTF-8 text
// the contract asks for, and is refused instead.
func (s *envScan) surrogate(i int) int {
	d := s.data
	r := hexValue(d, i-4)
	if r < 0xd800 || r > 0xdfff {
		return i
	}
	if r < 0xdc00 && i+6 <= len(d) && d[i] == '\\' && d[i+1] == 'u' {
		if lo := hexValue(d, i+2); lo >= 0xdc00 && lo <= 0xdfff {
			return i + 6
		}
	}
	if s.badText == "" {
		s.badText = loneSurrogate(d[i-6:i], i-6)
	}
	return i
}

// loneSurrogate is the reason a body is refused for esc, a lone surrogate
// escape (\ud800) at byte at.
func loneSurrogate(esc []byte, at int) string {
	return fmt.Sprintf(`%s at byte %d is a lone surrogate escape: half of a UTF-16 pair, it encodes no character (JSON readers turn it into U+FFFD)`, esc, at)
}
