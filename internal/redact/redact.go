package redact

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
)

// Mask stands in for a secret in what the gate logs or prints.
const Mask = "xxxxx"

// URL returns a configured address with every secret in it masked,
// for logs: the password of user:password@ and a bare userinfo (a NATS
// token@), the value of every query parameter whose name says it is a
// secret (password, sslpassword, token, access_token, secret, …, in any
// case), the same in every address of a comma-separated list (NATS and
// Redis Cluster seeds take several), and the secret values of a libpq
// keyword/value string (host=db password=…). The rest stays as written, so
// the log still says where the gate connects.
//
// An address that does not parse is masked generously: everything before
// its last @ is taken for userinfo, since a password with an unescaped /, ?
// or # would otherwise show; an @ in a path or query value then hides more
// than the secret.
func URL(s string) string {
	out, _ := redactAddress(s)
	return out
}

// redactAddress is URL that also returns the secrets it masked.
func redactAddress(s string) (string, []string) {
	var secrets []string
	if !strings.Contains(s, "://") && isKeywordDSN(s) {
		return redactKeywords(s, &secrets), secrets
	}
	parts := splitAddresses(s)
	for i, p := range parts {
		parts[i] = redactOne(p, &secrets)
	}
	return strings.Join(parts, ","), secrets
}

// splitAddresses splits a comma-separated list of addresses. Where the
// list holds URLs, only a comma before the next scheme:// separates, so a
// comma in a password does not cut it in two.
func splitAddresses(s string) []string {
	if !strings.Contains(s, "://") {
		return strings.Split(s, ",")
	}
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == ',' && startsURL(s[i+1:]) {
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// startsURL reports whether s (after blanks) starts with scheme://.
func startsURL(s string) bool {
	s = strings.TrimLeft(s, " \t")
	scheme, _, ok := strings.Cut(s, "://")
	if !ok || scheme == "" {
		return false
	}
	return strings.IndexFunc(scheme, func(r rune) bool { return !isWordRune(r) && r != '+' && r != '-' && r != '.' }) < 0
}

// isWordRune reports an ASCII letter, digit or underscore.
func isWordRune(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_'
}

// redactOne masks the secrets of one address, with or without a scheme.
func redactOne(s string, secrets *[]string) string {
	prefix, rest := "", s
	scheme := ""
	if i := strings.Index(s, "://"); i >= 0 {
		prefix, rest = s[:i+3], s[i+3:]
		scheme = strings.ToLower(strings.TrimSpace(s[:i]))
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		userinfo := rest[:at]
		if user, password, ok := strings.Cut(userinfo, ":"); ok {
			prefix += user + ":" + Mask
			addSecret(secrets, password)
		} else {
			prefix += Mask
			// PostgreSQL and Redis read a bare userinfo as a user name,
			// which needs no hiding elsewhere in the log; NATS reads it as
			// a token.
			if scheme != "postgres" && scheme != "postgresql" && scheme != "redis" && scheme != "rediss" {
				addSecret(secrets, userinfo)
			}
		}
		rest = rest[at:]
	}
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		rest = rest[:q+1] + redactQuery(rest[q+1:], secrets)
	}
	return prefix + rest
}

// redactQuery masks the values of the secret parameters of a query,
// whichever of & and ; separates them.
func redactQuery(q string, secrets *[]string) string {
	var b strings.Builder
	for q != "" {
		end := strings.IndexAny(q, "&;")
		pair, sep := q, ""
		if end >= 0 {
			pair, sep, q = q[:end], q[end:end+1], q[end+1:]
		} else {
			q = ""
		}
		key, value, ok := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(key)
		if err != nil {
			name = key
		}
		if ok && secretKey(name) {
			pair = key + "=" + Mask
			addSecret(secrets, value)
		}
		b.WriteString(pair + sep)
	}
	return b.String()
}

// secretKey reports whether a parameter or keyword names a secret.
func secretKey(name string) bool {
	name = strings.ToLower(name)
	for _, w := range []string{"pass", "pwd", "secret", "token", "apikey", "api_key", "credential"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// isKeywordDSN reports whether s is a libpq keyword/value string: it
// starts with keyword=.
func isKeywordDSN(s string) bool {
	key, _, ok := strings.Cut(s, "=")
	key = strings.TrimSpace(key)
	return ok && key != "" && strings.IndexFunc(key, func(r rune) bool { return !isWordRune(r) }) < 0
}

// redactKeywords masks the secret values of a libpq keyword/value string
// (keyword = value pairs apart by blanks; a value in single quotes may hold
// blanks, with \' and \\ escaped). Past anything that does not parse, the
// rest is masked whole.
func redactKeywords(s string, secrets *[]string) string {
	var b strings.Builder
	i := 0
	isBlank := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for i < len(s) {
		start := i
		for i < len(s) && isBlank(s[i]) {
			i++
		}
		keyStart := i
		for i < len(s) && s[i] != '=' && !isBlank(s[i]) {
			i++
		}
		key := s[keyStart:i]
		for i < len(s) && isBlank(s[i]) {
			i++
		}
		if key == "" || i >= len(s) || s[i] != '=' {
			if strings.TrimSpace(s[start:]) == "" {
				b.WriteString(s[start:])
				return b.String()
			}
			b.WriteString(s[start:keyStart] + Mask)
			addSecret(secrets, s[keyStart:])
			return b.String()
		}
		i++ // '='
		for i < len(s) && isBlank(s[i]) {
			i++
		}
		valueStart := i
		quoted := i < len(s) && s[i] == '\''
		if quoted {
			i++
		}
		closed := !quoted
		for i < len(s) {
			c := s[i]
			if c == '\\' && i+1 < len(s) {
				i += 2
				continue
			}
			if quoted && c == '\'' {
				i++
				closed = true
				break
			}
			if !quoted && isBlank(c) {
				break
			}
			i++
		}
		value := s[valueStart:i]
		if !closed || secretKey(key) {
			b.WriteString(s[start:valueStart] + Mask)
			addSecret(secrets, strings.Trim(value, "'"))
			continue
		}
		b.WriteString(s[start:i])
	}
	return b.String()
}

// addSecret records a masked value, and its unescaped form when that
// differs: a driver may quote either.
func addSecret(secrets *[]string, v string) {
	*secrets = append(*secrets, v)
	if u, err := url.PathUnescape(v); err == nil && u != v {
		*secrets = append(*secrets, u)
	}
	if u, err := url.QueryUnescape(v); err == nil && u != v {
		*secrets = append(*secrets, u)
	}
}

// minScrubbed is the shortest secret scrubbed from free text: a shorter
// one would garble every log line that happens to hold those letters, and
// the addresses that contain it are replaced whole anyway.
const minScrubbed = 4

// Scrubber masks the configured secrets wherever they appear in text the
// gate logs or prints: a driver's error may quote the address it was given
// (pgx repeats a query's password=, net/url the whole URL), and the SDKs
// log what they like. Each configured address is replaced by its redacted
// form, then each secret found in it, and each secret setting, by Mask.
// A nil *Scrubber masks nothing, at no cost.
type Scrubber struct{ r *strings.Replacer }

// New collects the secrets of addresses (URLs, lists of them, libpq
// keyword/value strings) and the secret values themselves (tokens,
// passwords). It is nil when there is nothing to hide.
func New(addresses, secrets []string) *Scrubber {
	type pair struct{ old, new string }
	var pairs []pair
	for _, addr := range addresses {
		red, found := redactAddress(addr)
		if red != addr {
			pairs = append(pairs, pair{addr, red})
			for _, p := range splitAddresses(addr) {
				if r := URL(p); r != p {
					pairs = append(pairs, pair{p, r})
				}
			}
		}
		secrets = append(secrets, found...)
	}
	for _, s := range secrets {
		if len(s) >= minScrubbed {
			pairs = append(pairs, pair{s, Mask})
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	// The replacer tries the pairs in order at each position: the longest
	// first, so a whole address goes before a secret inside it.
	slices.SortStableFunc(pairs, func(a, b pair) int { return len(b.old) - len(a.old) })
	args := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p.old, p.new)
	}
	return &Scrubber{r: strings.NewReplacer(args...)}
}

// String masks the secrets in s.
func (s *Scrubber) String(v string) string {
	if s == nil {
		return v
	}
	return s.r.Replace(v)
}

// Error masks the secrets in err's text; errors.Is and errors.As still see
// err.
func (s *Scrubber) Error(err error) error {
	if s == nil || err == nil {
		return err
	}
	msg := s.String(err.Error())
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{err: err, msg: msg}
}

type scrubbedError struct {
	err error
	msg string
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// Handler wraps h so that every record's message and attributes are
// scrubbed before h writes them.
func (s *Scrubber) Handler(h slog.Handler) slog.Handler {
	if s == nil {
		return h
	}
	return &scrubHandler{Handler: h, s: s}
}

type scrubHandler struct {
	slog.Handler
	s *Scrubber
}

func (h *scrubHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.s.String(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h *scrubHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = h.attr(a)
	}
	return &scrubHandler{Handler: h.Handler.WithAttrs(clean), s: h.s}
}

func (h *scrubHandler) WithGroup(name string) slog.Handler {
	return &scrubHandler{Handler: h.Handler.WithGroup(name), s: h.s}
}

// attr scrubs the text of one attribute: strings, errors, groups, and any
// other value whose printed form holds a secret (printed, then, as text).
func (h *scrubHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.s.String(v.String()))
	case slog.KindGroup:
		group := v.Group()
		clean := make([]any, len(group))
		for i, g := range group {
			clean[i] = h.attr(g)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		var text string
		if err, ok := v.Any().(error); ok {
			text = err.Error()
		} else {
			text = fmt.Sprintf("%+v", v.Any())
		}
		if clean := h.s.String(text); clean != text {
			return slog.String(a.Key, clean)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
