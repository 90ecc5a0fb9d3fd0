package webui

import (
	"embed"
	"io"
	"net/http"
	"path"
	"time"
)

// AssetPrefix is the path under which Assets serves the page's script and
// style sheet.
const AssetPrefix = "/ui/"

//go:embed static
var static embed.FS

// contentSecurityPolicy allows the page to load its own script and style
// and to call its own API, and nothing else.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Page serves the report page itself, at /.
func Page() http.Handler {
	return serveFile("static/index.html")
}

// Assets serves the page's files below AssetPrefix; any other path is 404.
func Assets() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := path.Base(r.URL.Path)
		if path.Dir(r.URL.Path)+"/" != AssetPrefix || name == "index.html" {
			http.NotFound(w, r)
			return
		}
		serveFile("static/"+name).ServeHTTP(w, r)
	})
}

// started stands in for the files' modification time, which embed does
// not keep: it lets browsers revalidate after a new gate starts.
var started = time.Now()

func serveFile(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := static.Open(name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-cache")
		rs, ok := f.(io.ReadSeeker) // embed's files are
		if !ok {
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		http.ServeContent(w, r, name, started, rs)
	})
}
