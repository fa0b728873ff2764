// Package ui is the operator console the coordinator serves at /ui/: static files embedded
// in the binary (no build step, nothing fetched from elsewhere), which call the API from
// the coordinator's own origin with the token the operator types in.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed static
var static embed.FS

// contentSecurityPolicy lets the console's pages load and call nothing but the
// coordinator: no inline script, no other origin, not framed.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// Handler serves the console: /ui/ and every file under it; /ui redirects to /ui/. Any
// other path under /ui/ that names no file is the console's page (its routes are in the
// fragment, but a link to /ui/anything still opens it).
func Handler() http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded directory exists
	}
	server := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the console's files are read with GET", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == "/ui" {
			http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, Prefix)
		if name == "" || strings.HasSuffix(name, "/") {
			name = "index.html"
		}
		if _, err := fs.Stat(files, path.Clean(name)); err != nil {
			name = "index.html"
		}
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache") // revalidated: a new build's files are seen at once
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		if name == "index.html" {
			r2.URL.Path = "/" // FileServer redirects /index.html to /
		}
		server.ServeHTTP(w, r2)
	})
}

// Serves reports whether path is the console's.
func Serves(path string) bool { return path == "/ui" || strings.HasPrefix(path, Prefix) }
