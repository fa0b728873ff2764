package api

import (
	"bytes"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
)

// fetch GETs (or HEADs) u with hc and returns the answer, read.
func fetch(t *testing.T, hc *http.Client, method, u string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// checkProblemTypeResolves checks that p's type, resolved against the URL of the request
// it answered, is the page about p's code on the same server (GET with hc: 200 HTML).
func checkProblemTypeResolves(t *testing.T, hc *http.Client, reqURL *url.URL, p Problem) {
	t.Helper()
	ref, err := url.Parse(p.Type)
	if err != nil {
		t.Fatalf("type %q: %v", p.Type, err)
	}
	u := reqURL.ResolveReference(ref)
	if u.Scheme != reqURL.Scheme || u.Host != reqURL.Host {
		t.Fatalf("type %q resolves to %s, not on the server that answered %s", p.Type, u, reqURL)
	}
	resp, body := fetch(t, hc, http.MethodGet, u.String())
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET %s (the type of a %s problem): %d %q", u, p.Code, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !bytes.Contains(body, []byte("<h1><code>"+p.Code+"</code>")) {
		t.Errorf("GET %s: not the page about %s:\n%s", u, p.Code, body)
	}
}

// TestProblemPages checks the pages problem types name: one per code of problemKinds, with
// its status, title and the whole of its text, listed by /problems; HEAD answers alike,
// an unknown code is a 404 problem.
func TestProblemPages(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(stubHandler(t, nil))
	t.Cleanup(srv.Close)
	hc := srv.Client()

	listURL, err := url.Parse(srv.URL + "/problems")
	if err != nil {
		t.Fatal(err)
	}
	resp, list := fetch(t, hc, http.MethodGet, listURL.String())
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /problems: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Error("GET /problems: no X-Request-Id")
	}
	if len(problemKinds) != len(problemTable) {
		t.Errorf("problemKinds has %d codes, problemTable %d rows", len(problemKinds), len(problemTable))
	}
	for code, k := range problemKinds {
		for name, text := range map[string]string{"when": k.when, "retry": k.retry, "action": k.action} {
			if text == "" || !strings.HasSuffix(text, ".") || strings.Count(text, "`")%2 != 0 {
				t.Errorf("%s: %s %q: want a sentence, with its backquotes paired", code, name, text)
			}
		}
		link := `href="problems/` + code + `"`
		if !bytes.Contains(list, []byte(link)) {
			t.Errorf("GET /problems does not link %s", code)
			continue
		}
		page := listURL.ResolveReference(&url.URL{Path: "problems/" + code})
		if page.Path != "/problems/"+code {
			t.Fatalf("the link to %s resolves to %s", code, page)
		}
		resp, body := fetch(t, hc, http.MethodGet, page.String())
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Errorf("GET %s: %d %q", page.Path, resp.StatusCode, resp.Header.Get("Content-Type"))
			continue
		}
		for _, want := range []string{
			"<h1><code>" + code + "</code>: " + template.HTMLEscapeString(k.title) + "</h1>",
			"<strong>" + strconv.Itoa(k.status) + " " + http.StatusText(k.status) + "</strong>",
			string(inlineHTML(k.when)), string(inlineHTML(k.retry)), string(inlineHTML(k.action)),
			`<a href="../problems">`,
		} {
			if !bytes.Contains(body, []byte(want)) {
				t.Errorf("GET %s lacks %q:\n%s", page.Path, want, body)
			}
		}
		if bytes.Contains(bytes.ToLower(body), []byte("<script")) {
			t.Errorf("GET %s has a script", page.Path)
		}
		head, headBody := fetch(t, hc, http.MethodHead, page.String())
		if head.StatusCode != http.StatusOK || len(headBody) != 0 || head.Header.Get("Content-Type") != resp.Header.Get("Content-Type") ||
			head.Header.Get("Content-Length") != strconv.Itoa(len(body)) {
			t.Errorf("HEAD %s: %d, %d body bytes, %q, Content-Length %q; GET: %d bytes", page.Path, head.StatusCode, len(headBody),
				head.Header.Get("Content-Type"), head.Header.Get("Content-Length"), len(body))
		}
	}
	back := listURL.ResolveReference(&url.URL{Path: "problems/fenced"}).ResolveReference(&url.URL{Path: "../problems"})
	if back.Path != "/problems" {
		t.Errorf("a page's link back resolves to %s", back)
	}
	if head, body := fetch(t, hc, http.MethodHead, listURL.String()); head.StatusCode != http.StatusOK || len(body) != 0 {
		t.Errorf("HEAD /problems: %d with %d body bytes", head.StatusCode, len(body))
	}

	for _, path := range []string{"/problems/nope", "/problems/Fenced", "/problems/fenced/x", "/problems/"} {
		reqURL, _ := url.Parse(srv.URL + path)
		resp, body := fetch(t, hc, http.MethodGet, reqURL.String())
		resp.Body = io.NopCloser(bytes.NewReader(body))
		p := decodeProblem(t, resp, http.StatusNotFound, "not_found")
		checkProblemTypeResolves(t, hc, reqURL, p)
	}
	resp, body := fetch(t, hc, http.MethodPost, srv.URL+"/problems/fenced")
	resp.Body = io.NopCloser(bytes.NewReader(body))
	decodeProblem(t, resp, http.StatusMethodNotAllowed, "method_not_allowed")
	if got := strings.Join(resp.Header.Values("Allow"), ","); got != "GET,HEAD" {
		t.Errorf("POST /problems/fenced: Allow %q, want GET,HEAD", got)
	}
}

// TestProblemTypesResolve checks that every problem's type names a page of the handler
// that answered it: the type of each code of problemKinds, resolved against a request URL,
// and the types of problems the handler answers for each kind of refusal of its own.
func TestProblemTypesResolve(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(stubHandler(t, nil))
	t.Cleanup(srv.Close)
	hc := srv.Client()
	reqURL, err := url.Parse(srv.URL + "/v1/jobs/orders/checkpoints/7/votes/sink-a?x=1")
	if err != nil {
		t.Fatal(err)
	}
	for code := range problemKinds {
		p := newProblem(code, "")
		checkProblemTypeResolves(t, hc, reqURL, p.body)
	}

	for _, rr := range []struct {
		rawRequest
		status int
		code   string
	}{
		{rawRequest{method: "GET", path: "/v1/nothing"}, 404, "not_found"},
		{rawRequest{method: "DELETE", path: "/healthz"}, 405, "method_not_allowed"},
		{rawRequest{method: "GET", path: "/healthz?probe=1"}, 400, "invalid_request"},
		{rawRequest{method: "PUT", path: "/v1/jobs/j", contentType: "text/plain", body: `{"participants":["a"]}`}, 415, "unsupported_media_type"},
		{rawRequest{method: "PUT", path: "/v1/jobs/j", contentType: "application/json", body: `{"participants":["` + strings.Repeat("a", 300) + `"]}`}, 413, "payload_too_large"},
		{rawRequest{method: "GET", path: "/v1/jobs/j/checkpoints/x"}, 400, "invalid_request"},
	} {
		u, err := url.Parse(srv.URL + rr.path)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(rr.method, u.String(), strings.NewReader(rr.body))
		if err != nil {
			t.Fatal(err)
		}
		if rr.contentType != "" {
			req.Header.Set("Content-Type", rr.contentType)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		p := decodeProblem(t, resp, rr.status, rr.code)
		checkProblemTypeResolves(t, hc, u, p)
	}
}

// TestProblemsDoc checks that docs/problems.md is the text of the problem pages, as go
// generate writes it.
func TestProblemsDoc(t *testing.T) {
	t.Parallel()
	got, err := os.ReadFile("../docs/problems.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := ProblemTypesMarkdown(); !bytes.Equal(got, want) {
		t.Errorf("docs/problems.md is not what problemTable says: run go generate ./api/")
	}
	for code := range problemKinds {
		if !bytes.Contains(got, []byte("\n## `"+code+"`\n")) {
			t.Errorf("docs/problems.md has no section on %s", code)
		}
	}
}
