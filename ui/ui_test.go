package ui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/twophase/coordinator/ui"
)

// TestHandler: the console's files, with their types and a policy that lets them load
// nothing from elsewhere; unknown paths under /ui/ are the console's page; only GET and HEAD.
func TestHandler(t *testing.T) {
	srv := httptest.NewServer(ui.Handler())
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		path, contentType, contains string
	}{
		{"/ui/", "text/html", `<script type="module" src="/ui/app.js">`},
		{"/ui/app.js", "text/javascript", "askToken"},
		{"/ui/style.css", "text/css", "--committed"},
		{"/ui/jobs/orders", "text/html", "<main"},
	} {
		resp, err := noRedirect.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.contentType) || !strings.Contains(string(body), tc.contains) {
			t.Errorf("GET %s: %d %s, body %.80q", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tc.path, csp)
		}
	}
	resp, err := noRedirect.Get(srv.URL + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, err = http.Post(srv.URL+"/ui/", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/: %d, want 405", resp.StatusCode)
	}
}
