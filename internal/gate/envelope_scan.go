package gate

import "strconv"

// An envelope is read in one pass over its bytes (envScan) instead of
// json.Unmarshal, which validates the whole body first and then decodes it
// again through reflection: most of a body is content the gate never reads,
// and the two passes were about a quarter of the gate's CPU. The scan
// accepts exactly what encoding/json accepts and gives the same errors,
// word for word; FuzzEnvelopeMatchesJSON holds it to that against the
// json-based parse kept in the tests, for every body whose keys are
// unambiguous and whose strings are text; a key given twice or in another
// case is refused instead (envelope_keys.go), and so is a lone surrogate
// escape where the gate reads text (surrogate).

// maxNestingDepth is encoding/json's limit on nested arrays and objects.
const maxNestingDepth = 10000

// Outcomes of a scan, in the order encoding/json reports them.
const (
	scanOK       = iota
	scanSyntax   // reason is a syntax error: the body is not JSON
	scanBadField // reason is a field's error: a value of the wrong type, an unknown field
	scanTrailing // stream mode only: data after the first value
	// scanAmbiguous: reason is why the body's keys are ambiguous (a key
	// given twice or in other letter case), which json would read one
	// way and a case-sensitive reader another. It comes after a syntax
	// error and before a field's error.
	scanAmbiguous
	// scanBadText: reason is why a string the gate reads is not text: a
	// \u escape of a lone surrogate (surrogate). It comes after a syntax
	// error and before the rest, as a body that is not UTF-8 comes first.
	scanBadText
)

// envScan reads a JSON body in one pass: it validates every byte as
// encoding/json's scanner does and captures the top-level fields it is
// given, refusing a body whose top-level keys are ambiguous. With stream set it behaves as a json.Decoder with
// DisallowUnknownFields followed by a check for EOF: it reads one value, an
// unknown field is an error, input that ends early is "unexpected EOF", and
// what follows the value is reported, not validated. Otherwise it behaves as
// json.Unmarshal: the whole body is one value.
type envScan struct {
	data   []byte
	i      int
	depth  int
	fields []scanField
	vals   [maxScanFields]scanValue
	stream bool
	syntax string // the syntax error, which stops the scan
	field  string // the first field error; the scan goes on to find syntax errors
	// ambiguous is why the keys are ambiguous, the first reason; seen
	// marks the fields met, a bit each (so maxScanFields is at most 16),
	// and others holds the other top-level keys.
	ambiguous string
	seen      uint16
	others    keySet
	// badText is why a string the gate reads is not text, the first
	// reason (surrogate). Those are the top-level keys and the captured
	// fields' values, or with allText every string, for a body json
	// decodes whole: the rest (content) is forwarded as sent and never
	// read, as a \u0000 there is.
	badText string
	allText bool
}

// run scans s.data and returns one of scanOK, scanSyntax, scanBadField,
// scanTrailing, scanAmbiguous or scanBadText, with the reason json would
// give for scanSyntax and scanBadField and the scan's own for
// scanAmbiguous and scanBadText.
func (s *envScan) run() (int, string) {
	s.ws()
	if s.i == len(s.data) {
		s.eof()
		return scanSyntax, s.syntax
	}
	c := s.data[s.i]
	if c == '{' {
		s.i++
		s.depth = 1
		if !s.object(true) {
			return scanSyntax, s.syntax
		}
	} else {
		if c != 'n' {
			s.fieldError(`field "" must be a struct, not a ` + kindName(c))
		}
		if !s.value() {
			return scanSyntax, s.syntax
		}
	}
	s.ws()
	if s.stream {
		switch {
		case s.badText != "":
			return scanBadText, s.badText
		case s.ambiguous != "":
			return scanAmbiguous, s.ambiguous
		case s.field != "":
			return scanBadField, s.field
		case s.i < len(s.data):
			return scanTrailing, ""
		}
		return scanOK, ""
	}
	if s.i < len(s.data) {
		s.fail(s.data[s.i], "after top-level value")
		return scanSyntax, s.syntax
	}
	if s.badText != "" {
		return scanBadText, s.badText
	}
	if s.ambiguous != "" {
		return scanAmbiguous, s.ambiguous
	}
	if s.field != "" {
		return scanBadField, s.field
	}
	return scanOK, ""
}

// kindName names the JSON type a value starting with c has, as
// json.UnmarshalTypeError names it.
func kindName(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	}
	return "number"
}

func (s *envScan) fieldError(reason string) {
	if s.field == "" {
		s.field = reason
	}
}

// fail records the syntax error json reports for byte c in context and
// returns false, so that callers can return it.
func (s *envScan) fail(c byte, context string) bool {
	s.syntax = "invalid character " + quoteChar(c) + " " + context
	return false
}

// eof records the error for input that ends where a value or more of one
// is expected.
func (s *envScan) eof() bool {
	if s.stream {
		s.syntax = "unexpected EOF"
	} else {
		s.syntax = "unexpected end of JSON input"
	}
	return false
}

// eofIn records the error for input that ends in the middle of a token
// (context as for fail): json's scanner is fed a space at the end, which
// such a token refuses.
func (s *envScan) eofIn(context string) bool {
	if s.stream {
		return s.eof()
	}
	return s.fail(' ', context)
}

// quoteChar is encoding/json's quoting of a byte in a syntax error.
func quoteChar(c byte) string {
	switch c {
	case '\'':
		return `'\''`
	case '"':
		return `'"'`
	}
	q := strconv.Quote(string(rune(c)))
	return "'" + q[1:len(q)-1] + "'"
}

// ws skips JSON whitespace.
func (s *envScan) ws() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value scans one value starting at s.i, which must be a non-space byte.
func (s *envScan) value() bool {
	switch c := s.data[s.i]; c {
	case '{', '[':
		s.depth++
		if s.depth > maxNestingDepth {
			return s.fail(c, "exceeded max depth")
		}
		s.i++
		ok := false
		if c == '{' {
			ok = s.object(false)
		} else {
			ok = s.array()
		}
		s.depth--
		return ok
	case '"':
		_, ok := s.str(s.allText)
		return ok
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return s.number()
	default:
		return s.fail(c, "looking for beginning of value")
	}
}

// object scans an object after its '{'; top captures its fields.
func (s *envScan) object(top bool) bool {
	if !s.token() {
		return false
	}
	if s.data[s.i] == '}' {
		s.i++
		return true
	}
	for {
		if c := s.data[s.i]; c != '"' {
			return s.fail(c, "looking for beginning of object key string")
		}
		start := s.i + 1
		escaped, ok := s.str(top || s.allText)
		if !ok {
			return false
		}
		f := -1
		if top {
			f = s.match(start, s.i-1, escaped)
		}
		if !s.token() {
			return false
		}
		if c := s.data[s.i]; c != ':' {
			return s.fail(c, "after object key")
		}
		s.i++
		if !s.token() {
			return false
		}
		if f >= 0 {
			ok = s.capture(f)
		} else {
			ok = s.value()
		}
		if !ok {
			return false
		}
		if more, ok := s.next('}', "after object key:value pair"); !more || !ok {
			return ok
		}
	}
}

// array scans an array after its '['.
func (s *envScan) array() bool {
	if !s.token() {
		return false
	}
	if s.data[s.i] == ']' {
		s.i++
		return true
	}
	for {
		if !s.value() {
			return false
		}
		if more, ok := s.next(']', "after array element"); !more || !ok {
			return ok
		}
	}
}

// token skips whitespace to the next byte; input that ends there is an
// error.
func (s *envScan) token() bool {
	s.ws()
	return s.i < len(s.data) || s.eof()
}

// next reads what follows a member of an object or an element of an array
// (after names that place in json's error): a ',' and the next token (more
// to come), or close.
func (s *envScan) next(close byte, after string) (more, ok bool) {
	if !s.token() {
		return false, false
	}
	switch c := s.data[s.i]; c {
	case ',':
		s.i++
		return true, s.token()
	case close:
		s.i++
		return false, true
	default:
		return false, s.fail(c, after)
	}
}

// literal scans true, false or null; s.data[s.i] is word[0].
func (s *envScan) literal(word string) bool {
	for k := 1; k < len(word); k++ {
		j := s.i + k
		if j == len(s.data) {
			return s.eofIn("in literal " + word + " (expecting '" + word[k:k+1] + "')")
		}
		if s.data[j] != word[k] {
			return s.fail(s.data[j], "in literal "+word+" (expecting '"+word[k:k+1]+"')")
		}
	}
	s.i += len(word)
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number scans a number as json's scanner does: the byte after it is left
// to the caller, which judges it in its own context.
func (s *envScan) number() bool {
	d, i := s.data, s.i
	if d[i] == '-' {
		i++
		if i == len(d) {
			return s.eofIn("in numeric literal")
		}
		if !isDigit(d[i]) {
			return s.fail(d[i], "in numeric literal")
		}
	}
	if d[i] == '0' {
		i++
	} else {
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	ok := true
	if i < len(d) && d[i] == '.' {
		if i, ok = s.digits(i+1, "after decimal point in numeric literal"); !ok {
			return false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i, ok = s.digits(i, "in exponent of numeric literal"); !ok {
			return false
		}
	}
	s.i = i
	return true
}

// digits scans the one or more digits json requires at i, after a decimal
// point or in an exponent; where names the place in the error, and the
// index past the digits is returned.
func (s *envScan) digits(i int, where string) (int, bool) {
	d := s.data
	if i == len(d) {
		return i, s.eofIn(where)
	}
	if !isDigit(d[i]) {
		return i, s.fail(d[i], where)
	}
	for i < len(d) && isDigit(d[i]) {
		i++
	}
	return i, true
}
