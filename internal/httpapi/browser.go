package httpapi

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Cross-site requests. A page open in the operator's browser may send a
// "simple" request (POST with a text/plain body, mode no-cors) to the gate
// on 127.0.0.1 without a CORS preflight: the browser sends the gate's own
// Host, so the Host check passes, and without a token the request would
// take or hand back a recipient's slot though the page never reads the
// answer. Two guards close that:
//   - sameSite refuses every request that may change state (any method but
//     GET, HEAD and OPTIONS) that a browser marks as coming from another
//     site's page, before the token is checked;
//   - jsonBody refuses a body that is not application/json on the
//     endpoints that take JSON: a page can send such a body to another
//     origin only after a preflight, which the gate never answers.

// safeMethods change nothing, so any page may send them (it cannot read
// the answer: the gate sends no CORS headers).
var safeMethods = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodOptions: true}

// sameSite refuses, with 403, a request that may change state when the
// browser says it comes from another site: Sec-Fetch-Site cross-site or
// same-site (another port or subdomain is another program), or an Origin
// that is not the gate's own. The gate's own origin is the scheme-less
// host and port the request was sent to (its Host), or any port of a name
// in Options.AllowedHosts (a proxy may rewrite Host). Origin null (a
// sandboxed frame, a file: page, a redirect across sites) is refused. A
// request with neither header (curl, a service's HTTP client) passes:
// these are browser rules, and a client outside a browser is no page.
//
// The Host vouches for the Origin only when it is a name the gate knows
// (hostNames): with AllowedHosts "*" any Host gets in, and a page that
// rebinds its own name to the gate's address sends that name as both
// Host and Origin, so the Host alone would make every such page the
// gate's own.
func (s *server) sameSite(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if safeMethods[r.Method] {
			h.ServeHTTP(w, r)
			return
		}
		if msg := crossSite(r, s.originHosts, s.hostNames[hostName(r.Host)]); msg != "" {
			s.o.Log.Debug("request refused: cross-site", "method", r.Method, "path", r.URL.Path,
				"origin", r.Header.Values("Origin"), "sec_fetch_site", r.Header.Values("Sec-Fetch-Site"), "remote", r.RemoteAddr)
			writeError(w, http.StatusForbidden, msg)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// crossSite is why r comes from another site's page, or "" when it does
// not (as far as its headers tell); names are the allowed hosts, and
// known says whether r's Host is a name the gate knows (a loopback name or
// one of names) rather than one let in by "*".
func crossSite(r *http.Request, names map[string]bool, known bool) string {
	sites := r.Header.Values("Sec-Fetch-Site")
	for _, v := range sites {
		if site := strings.ToLower(strings.TrimSpace(v)); site == "cross-site" || site == "same-site" {
			return fmt.Sprintf("%s %s refused: the browser marked it Sec-Fetch-Site: %s, and the gate takes requests that change "+
				"state only from its own page or from clients outside a browser", r.Method, r.URL.Path, site)
		}
	}
	origins := r.Header.Values("Origin")
	switch {
	case len(origins) == 0 && (len(sites) == 0 || known):
		return ""
	case len(origins) == 0:
		return unknownHost(r, "")
	case len(origins) > 1:
		return fmt.Sprintf("%s %s refused: %d Origin headers; a browser sends one", r.Method, r.URL.Path, len(origins))
	}
	host := r.Host
	if !known {
		host = "" // vouches for no origin: see sameSite
	}
	switch {
	case ownOrigin(origins[0], host, names):
		return ""
	case !known:
		return unknownHost(r, origins[0])
	}
	return fmt.Sprintf("%s %s refused: it comes from a page of origin %q, and the gate takes requests that change state only "+
		"from its own origin (the host and port it was sent to, %s) or a host in GATE_HTTP_ALLOWED_HOSTS", r.Method, r.URL.Path, origins[0], r.Host)
}

// unknownHost is why a browser's request to a Host let in only by "*" in
// GATE_HTTP_ALLOWED_HOSTS is refused; origin is its Origin, if any.
func unknownHost(r *http.Request, origin string) string {
	from := "a browser sent it"
	if origin != "" {
		from = fmt.Sprintf("a browser sent it from a page of origin %q", origin)
	}
	return fmt.Sprintf("%s %s refused: %s to host %q, which only * in GATE_HTTP_ALLOWED_HOSTS lets in; any site can point its "+
		"name at the gate (DNS rebinding), so the gate takes a browser's requests that change state only on localhost, "+
		"127.0.0.1, ::1 or a host named in GATE_HTTP_ALLOWED_HOSTS", r.Method, r.URL.Path, from, r.Host)
}

// ownOrigin reports whether origin, an Origin header, is the gate's own:
// host and port those of host (the request's Host, whose missing port is
// the scheme's default), or a host among names at any port.
func ownOrigin(origin, host string, names map[string]bool) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return false // null, or not an origin at all
	}
	name := hostName(u.Host)
	if names[name] {
		return true
	}
	port := u.Port()
	if port == "" {
		port = defaultPort[u.Scheme]
	}
	hostPort := ""
	if _, p, err := net.SplitHostPort(host); err == nil {
		hostPort = p
	}
	return name == hostName(host) && (port == hostPort || hostPort == "" && port == defaultPort[u.Scheme])
}

// originHosts are the names of Options.AllowedHosts, whose origins are
// the gate's own at any port. * lifts the Host check, not this one: it
// says that any name reaches the gate, not that any site may post to it.
// Loopback names are not among them: another port of localhost is
// another program.
func originHosts(allowed []string) map[string]bool {
	names := map[string]bool{}
	for _, name := range allowed {
		if name != "*" {
			names[hostName(name)] = true
		}
	}
	return names
}

// defaultPort is the port of an origin that names none.
var defaultPort = map[string]string{"http": "80", "https": "443"}

// jsonBody refuses, with 415, a request whose body is not declared
// application/json (parameters such as charset are fine). It guards the
// endpoints that change state from a JSON body: a browser sends JSON to
// another origin only after a CORS preflight, which the gate does not
// answer, so a page of another site cannot send one.
func jsonBody(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		mt, _, err := mime.ParseMediaType(ct)
		if err == nil && mt == "application/json" {
			h.ServeHTTP(w, r)
			return
		}
		msg := fmt.Sprintf("Content-Type %q is not accepted: send the body as JSON with Content-Type: application/json", ct)
		if ct == "" {
			msg = "no Content-Type: send the body as JSON with Content-Type: application/json"
		}
		writeError(w, http.StatusUnsupportedMediaType, msg)
	})
}
