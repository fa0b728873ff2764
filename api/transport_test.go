package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/coordinator"
)

// testHosts are the hosts of the requests that tests build in-process and hand to a
// handler: httptest.NewRequest's example.com, and FuzzParameters' coordinator.
var testHosts = []string{"example.com", "coordinator"}

func TestBrowsersRefused(t *testing.T)  { onEachStore(t, testBrowsersRefused) }
func TestHostsRefused(t *testing.T)     { onEachStore(t, testHostsRefused) }
func TestLongPollsBounded(t *testing.T) { onEachStore(t, testLongPollsBounded) }

// setupWith is setup with opts: the real service on the store the test's name says.
func setupWith(t *testing.T, opts Options) *bundle {
	t.Helper()
	store := testStore(t)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = time.Minute
	}
	srv := httptest.NewServer(NewHandler(coordinator.NewService(store, nil), opts))
	t.Cleanup(srv.Close)
	client, err := coordinatorclient.NewClientWithResponses(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{url: srv.URL, client: client, store: store}
}

// callHost is call with the Host header host ("" for the URL's, 127.0.0.1:port).
func (b *bundle) callHost(t *testing.T, host, method, path, contentType, body string, header ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %q): %v", method, path, host, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("%s %s (Host %q): no X-Request-Id", method, path, host)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: got, url: req.URL}
}

// state is what a refused request must not change: the job (its epochs) and its first
// checkpoint, as the API answers them.
func (b *bundle) state(t *testing.T, job string) string {
	t.Helper()
	a := b.call(t, "GET", "/v1/jobs/"+job, "", "")
	a.ok(t, 200, nil)
	return string(a.body) + "\n" + b.rawCheckpoint(t, job, 1)
}

// testBrowsersRefused sends what a browser sends for a page of another site: a form post
// (application/x-www-form-urlencoded, the kind no preflight precedes), with or without a
// body, to operations that would change something. Each gets 403 forbidden and changes
// nothing; clients that are not browsers, and pages of the allowed origin, are served.
func testBrowsersRefused(t *testing.T) {
	// Written with the default port: browsers send the origin without it. null is never
	// allowed, even when listed.
	b := setupWith(t, Options{AllowedOrigins: []string{"https://Dashboard.example:443", "null"}})
	b.job(t, "j", `{"participants":["a"],"auto_commit":false}`, "a")
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	before := b.state(t, "j")

	const form = "application/x-www-form-urlencoded"
	writes := []struct{ method, path string }{
		{"POST", "/v1/jobs/j/participants/a/register"},
		{"POST", "/v1/jobs/j/checkpoints/1/abort"},
		{"POST", "/v1/jobs/j/checkpoints"},
		{"DELETE", "/v1/jobs/j"},
	}
	for _, tt := range []struct {
		name   string
		header []string
	}{
		{"a foreign Origin", []string{"Origin", "https://evil.example"}},
		{"Origin null", []string{"Origin", "null"}},
		{"Sec-Fetch-Site cross-site", []string{"Sec-Fetch-Site", "cross-site"}},
		{"a foreign Origin of the same site", []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "same-site"}},
		{"the coordinator's own host over https", []string{"Origin", strings.Replace(b.url, "http://", "https://", 1), "Sec-Fetch-Site", "same-site"}},
		{"the coordinator's own host on another port", []string{"Origin", b.url + "1", "Sec-Fetch-Site", "same-site"}},
		{"the allowed origin on another port", []string{"Origin", "https://dashboard.example:8443"}},
		{"the allowed origin's host over http", []string{"Origin", "http://dashboard.example"}},
		{"an empty Origin", []string{"Origin", ""}},
		{"two Origins, one foreign", []string{"Origin", "https://dashboard.example", "Origin", "https://evil.example"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, w := range writes {
				for _, body := range []string{"", "reason=pwned"} {
					p := b.call(t, w.method, w.path, form, body, tt.header...).problem(t, 403, "forbidden")
					if p.Detail == nil || !strings.Contains(*p.Detail, "changed nothing") {
						t.Errorf("%s %s: detail %v", w.method, w.path, p.Detail)
					}
				}
			}
			// Reads too, whatever the method and the path, probes included.
			for _, r := range []struct{ method, path string }{
				{"GET", "/v1/jobs/j"}, {"HEAD", "/v1/jobs/j"}, {"OPTIONS", "/v1/jobs/j"},
				{"GET", "/v1/jobs/j/checkpoints/1?wait_ms=10"}, {"GET", "/healthz"}, {"GET", "/nowhere"},
			} {
				if a := b.call(t, r.method, r.path, "", "", tt.header...); a.status != 403 {
					t.Errorf("%s %s: %d, want 403", r.method, r.path, a.status)
				}
			}
		})
	}
	if after := b.state(t, "j"); after != before {
		t.Fatalf("refused requests changed the job or its checkpoint:\n%s\n%s", before, after)
	}

	// Served: a client that is no browser (no Origin, no Sec-Fetch-Site), the pages of the
	// allowed origin, even of another site, and browsers' requests of the same site or
	// typed in (Sec-Fetch-Site same-origin, same-site, none).
	var reg Registration
	for i, header := range [][]string{
		nil,
		{"Origin", "https://dashboard.example"},
		{"Origin", "https://dashboard.example", "Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-origin"},
		{"Sec-Fetch-Site", "same-site"},
		{"Sec-Fetch-Site", "none"},
		// The coordinator's own pages (the console): their Origin is its own.
		{"Origin", b.url, "Sec-Fetch-Site", "same-origin"},
		{"Origin", strings.ToUpper(b.url) + "/"},
	} {
		b.call(t, "POST", "/v1/jobs/j/participants/a/register", "", "", header...).ok(t, 200, &reg)
		if want := int64(i + 2); reg.Epoch != want {
			t.Errorf("register with %q: epoch %d, want %d", header, reg.Epoch, want)
		}
	}
	b.call(t, "POST", "/v1/jobs/j/checkpoints/1/abort", "", "", "Origin", "https://dashboard.example").ok(t, 200, nil)
	if cp := b.checkpoint(t, "j", 1); cp.Status != Aborted {
		t.Errorf("checkpoint 1 is %s after an abort from the allowed origin, want aborted", cp.Status)
	}
}

// testHostsRefused: a request naming a Host the coordinator does not serve gets 421 and
// changes nothing, but the health probes are answered whatever their Host.
func testHostsRefused(t *testing.T) {
	b := setupWith(t, Options{})
	b.job(t, "j", `{"participants":["a"],"auto_commit":false}`, "a")
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)
	before := b.state(t, "j")

	foreign := []string{"evil.example", "evil.example:8080", "127.0.0.1.nip.io", "localhost.evil.example",
		"[::2]:8080", "10.1.2.3", "0.0.0.0:8080"}
	for _, host := range foreign {
		for _, r := range []struct{ method, path string }{
			{"POST", "/v1/jobs/j/participants/a/register"},
			{"POST", "/v1/jobs/j/checkpoints/1/abort"},
			{"DELETE", "/v1/jobs/j"},
			{"GET", "/v1/jobs/j"},
			{"POST", "/healthz"}, // only GET and HEAD probes are let through
		} {
			p := b.callHost(t, host, r.method, r.path, "", "").problem(t, 421, "misdirected_request")
			if p.Detail == nil || !strings.Contains(*p.Detail, "--allowed-hosts") {
				t.Errorf("Host %s, %s %s: detail %v", host, r.method, r.path, p.Detail)
			}
		}
	}
	// A page of a name that resolves to the coordinator (DNS rebinding) sends its own
	// origin, which matches its Host: the Host check still refuses it.
	for _, host := range []string{"evil.example:8080", "evil.example"} {
		b.callHost(t, host, "POST", "/v1/jobs/j/checkpoints/1/abort", "", "", "Origin", "http://"+host, "Sec-Fetch-Site", "same-origin").
			problem(t, 421, "misdirected_request")
	}
	if after := b.state(t, "j"); after != before {
		t.Fatalf("refused requests changed the job or its checkpoint:\n%s\n%s", before, after)
	}

	// The loopback names, in any case, with or without port.
	for _, host := range []string{"localhost:1234", "LocalHost", "localhost.", "127.0.0.1", "127.9.9.9:80", "[::1]:8080", "[::1]"} {
		if a := b.callHost(t, host, "GET", "/v1/jobs/j", "", ""); a.status != 200 {
			t.Errorf("Host %s: %d, want 200: %s", host, a.status, a.body)
		}
	}
	// Probes name what they like (the pod's address), but are not let through for a page.
	for _, path := range []string{"/healthz", "/readyz"} {
		for _, method := range []string{"GET", "HEAD"} {
			if a := b.callHost(t, "10.1.2.3:8080", method, path, "", ""); a.status != 200 {
				t.Errorf("%s %s, Host 10.1.2.3:8080: %d, want 200", method, path, a.status)
			}
		}
		b.callHost(t, "10.1.2.3:8080", "GET", path, "", "", "Origin", "https://evil.example").problem(t, 403, "forbidden")
	}

	// Hosts of its own, compared without port and case; * allows every one.
	named := setupWith(t, Options{AllowedHosts: []string{"Coordinator", "10.0.0.7", "[fd00::7]"}})
	for host, want := range map[string]int{
		"coordinator:8080": 200, "COORDINATOR": 200, "10.0.0.7:80": 200, "[fd00::7]:8080": 200, "localhost": 200,
		"coordinator.evil.example": 421, "10.0.0.8": 421,
	} {
		if a := named.callHost(t, host, "GET", "/v1/jobs", "", ""); a.status != want {
			t.Errorf("allowed hosts Coordinator, 10.0.0.7, [fd00::7]; Host %s: %d, want %d", host, a.status, want)
		}
	}
	anyHost := setupWith(t, Options{AllowedHosts: []string{AnyHost}})
	for _, host := range foreign {
		if a := anyHost.callHost(t, host, "GET", "/v1/jobs", "", ""); a.status != 200 {
			t.Errorf("allowed hosts *; Host %s: %d, want 200", host, a.status)
		}
	}
	anyHost.callHost(t, "evil.example", "GET", "/v1/jobs", "", "", "Origin", "https://evil.example").problem(t, 403, "forbidden")
}

// testLongPollsBounded: with MaxWaiters 4, two long-polls of a checkpoint (reads, which
// hold at most half of the pool) are held, a third gets 503 with Retry-After until one of
// them ends; requests that do not wait are not counted.
func testLongPollsBounded(t *testing.T) {
	b := setupWith(t, Options{MaxWaiters: 4})
	b.job(t, "j", `{"participants":["a"],"auto_commit":false}`, "a")
	b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "").ok(t, 201, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type result struct {
		status int
		body   string
		err    error
	}
	hold := func(waitMs int) <-chan result {
		done := make(chan result, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/jobs/j/checkpoints/1?wait_ms=%d", b.url, waitMs), nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- result{err: err}
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			done <- result{status: resp.StatusCode, body: string(body)}
		}()
		return done
	}
	short, long := hold(1500), hold(20000)
	start := time.Now()
	// Give them time to be counted: the bound is checked before the request reads the store.
	time.Sleep(300 * time.Millisecond)

	probe := "/v1/jobs/j/checkpoints/1?wait_ms=1"
	var refused answer
	for deadline := time.Now().Add(5 * time.Second); ; {
		if refused = b.call(t, "GET", probe, "", ""); refused.status == 503 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	p := refused.problem(t, 503, "unavailable")
	if refused.header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After %q, want 1", refused.header.Get("Retry-After"))
	}
	if p.Detail == nil || !strings.Contains(*p.Detail, "hold their part of this coordinator's slots (2 of 4, --max-waiters)") {
		t.Errorf("detail %v", p.Detail)
	}
	if time.Since(start) < 1500*time.Millisecond {
		// Both still held: HEAD waits as GET does, and is counted alike; what does not wait
		// is not counted.
		if a := b.call(t, "HEAD", probe, "", ""); a.status != 503 {
			t.Errorf("HEAD long-poll while two are held: %d, want 503", a.status)
		}
		b.call(t, "GET", "/v1/jobs/j/checkpoints/1", "", "").ok(t, 200, nil)
		b.call(t, "GET", "/v1/jobs/j/checkpoints/1?wait_ms=0", "", "").ok(t, 200, nil)
		b.call(t, "GET", "/v1/jobs/j/participants/a/pending", "", "").ok(t, 200, nil)
	}

	// Once the short one ends, a long-poll is held again.
	if r := <-short; r.err != nil || r.status != 200 || !strings.Contains(r.body, `"preparing"`) {
		t.Fatalf("the first long-poll: %d %s %v, want 200 with the checkpoint preparing", r.status, r.body, r.err)
	}
	var accepted answer
	for deadline := time.Now().Add(3 * time.Second); ; {
		if accepted = b.call(t, "GET", probe, "", ""); accepted.status == 200 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	accepted.ok(t, 200, nil)

	// The long one was held all along: the abort ends it, with the decision.
	b.call(t, "POST", "/v1/jobs/j/checkpoints/1/abort", "", "").ok(t, 200, nil)
	if r := <-long; r.err != nil || r.status != 200 || !strings.Contains(r.body, `"aborted"`) {
		t.Fatalf("the second long-poll: %d %s %v, want 200 with the checkpoint aborted", r.status, r.body, r.err)
	}
}

// heldServer holds every GetCheckpoint (and PutVote) with a wait_ms until it takes a token from
// release (or release is closed), saying on entered when one begins to wait.
type heldServer struct {
	stubServer
	entered chan struct{}
	release chan struct{}
}

func (s heldServer) GetCheckpoint(ctx context.Context, req GetCheckpointRequestObject) (GetCheckpointResponseObject, error) {
	if req.Params.WaitMs != nil && *req.Params.WaitMs > 0 {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.stubServer.GetCheckpoint(ctx, req)
}

// PutVote holds a vote with a wait_ms like GetCheckpoint.
func (s heldServer) PutVote(ctx context.Context, req PutVoteRequestObject) (PutVoteResponseObject, error) {
	if req.Params.WaitMs != nil && *req.Params.WaitMs > 0 {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.stubServer.PutVote(ctx, req)
}

// TestWaiterBound counts exactly the requests held: MaxWaiters of them wait (votes, a
// participant's own waits, which may use the whole pool), the next one gets 503 at once,
// and one more is held as soon as one ends; requests that do not wait are not counted;
// MaxWaiters 0 holds any number.
func TestWaiterBound(t *testing.T) {
	t.Parallel()
	for _, max := range []int{0, 1, 3} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			t.Parallel()
			s := heldServer{entered: make(chan struct{}, 16), release: make(chan struct{})}
			srv := httptest.NewServer(newHandler(s, Options{MaxWaiters: max, Logger: slog.New(slog.DiscardHandler)}))
			t.Cleanup(srv.Close)
			var once sync.Once
			releaseAll := func() { once.Do(func() { close(s.release) }) }
			t.Cleanup(releaseAll)

			results := make(chan int, 16)
			send := func(method, query string) {
				path, body := "/v1/jobs/j/checkpoints/1", io.Reader(nil)
				if method == "PUT" { // a vote
					path, body = path+"/votes/p", strings.NewReader(`{"epoch":1,"vote":"prepared"}`)
				}
				req, _ := http.NewRequest(method, srv.URL+path+query, body)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					results <- 0
					return
				}
				resp.Body.Close()
				results <- resp.StatusCode
			}
			// holdWith sends a request that waits (a GET long-poll, or a PUT vote with
			// wait_ms) and checks that it is held.
			holdWith := func(method, what string) {
				t.Helper()
				go send(method, "?wait_ms=20000")
				select {
				case <-s.entered:
				case status := <-results:
					t.Fatalf("%s: answered %d, not held", what, status)
				case <-time.After(5 * time.Second):
					t.Fatalf("%s: neither held nor answered", what)
				}
			}
			hold := func(what string) { t.Helper(); holdWith("PUT", what) }
			answered := func(what string, want int) {
				t.Helper()
				select {
				case status := <-results:
					if status != want {
						t.Errorf("%s: %d, want %d", what, status, want)
					}
				case <-s.entered:
					t.Fatalf("%s: held, want %d at once", what, want)
				case <-time.After(5 * time.Second):
					t.Fatalf("%s: no answer", what)
				}
			}

			held := max
			if max == 0 {
				held = 5
			}
			for i := range held {
				hold(fmt.Sprintf("long-poll %d (MaxWaiters %d)", i+1, max))
			}
			if max > 0 {
				go send("GET", "?wait_ms=20000")
				answered("a GET long-poll past the bound", 503)
				go send("HEAD", "?wait_ms=20000")
				answered("a HEAD long-poll past the bound", 503)
				go send("GET", "")
				answered("a GET that does not wait, at the bound", 200)
				go send("GET", "?wait_ms=0")
				answered("a GET with wait_ms=0, at the bound", 200)
				go send("PUT", "?wait_ms=20000")
				answered("a vote that would wait, past the bound", 503)
				go send("PUT", "")
				answered("a vote that does not wait, at the bound", 200)

				s.release <- struct{}{}
				answered("the long-poll released", 200)
				holdWith("PUT", "a vote that waits, once a long-poll ended")
				go send("GET", "?wait_ms=20000")
				answered("a GET long-poll past the bound, a vote waiting", 503)
				s.release <- struct{}{}
				answered("the vote released", 200)
				hold("a long-poll once one ended")
				go send("GET", "?wait_ms=20000")
				answered("a GET long-poll past the bound again", 503)
			}
			releaseAll()
			for i := range held {
				answered(fmt.Sprintf("held long-poll %d, released", i+1), 200)
			}
		})
	}
}

func TestCheckOriginAndHost(t *testing.T) {
	t.Parallel()
	for _, origin := range []string{"https://a.example", "http://localhost:3000", "https://a.example:8443", "https://a.example/", "http://[::1]:8080"} {
		if err := CheckOrigin(origin); err != nil {
			t.Errorf("CheckOrigin(%q): %v", origin, err)
		}
	}
	for _, origin := range []string{"null", "*", "a.example", "ftp://a.example", "https://", "https://a.example/app",
		"https://a.example?x=1", "https://u@a.example", "https://a.example#x", ""} {
		if err := CheckOrigin(origin); err == nil {
			t.Errorf("CheckOrigin(%q) accepts it", origin)
		}
	}
	for _, host := range []string{"coordinator", "coordinator.example.com", "Coordinator.Example.COM.", "10.0.0.7", "::1", "[::1]", "*", "my_host"} {
		if err := CheckHost(host); err != nil {
			t.Errorf("CheckHost(%q): %v", host, err)
		}
	}
	for _, host := range []string{"coordinator:8080", "[::1]:8080", "http://coordinator", "coordinator/x", "*.example.com", "a b", "", "a..b"} {
		if err := CheckHost(host); err == nil {
			t.Errorf("CheckHost(%q) accepts it", host)
		}
	}
}

func TestCORSForAllowedOrigins(t *testing.T) { onEachStore(t, testCORSForAllowedOrigins) }

// A page of an allowed origin gets what a browser needs to call the API with a token: a
// preflight answered 204 with the methods and headers the API takes, and answers that name
// the origin and expose the headers clients read. Other origins get no CORS header (and
// stay refused); clients that are no browsers get none either.
func testCORSForAllowedOrigins(t *testing.T) {
	const page = "https://dashboard.example"
	b := setupWith(t, Options{AllowedOrigins: []string{page}})
	b.job(t, "j", `{"participants":["a"]}`, "a")
	pre := b.call(t, "OPTIONS", "/v1/jobs/j/checkpoints", "", "", "Origin", page,
		"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization, content-type, idempotency-key")
	if pre.status != http.StatusNoContent || pre.header.Get("Access-Control-Allow-Origin") != page ||
		!strings.Contains(pre.header.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(pre.header.Get("Access-Control-Allow-Headers"), "Authorization") ||
		!strings.Contains(pre.header.Get("Access-Control-Allow-Headers"), "Idempotency-Key") ||
		pre.header.Get("Access-Control-Max-Age") == "" || !slices.Contains(pre.header.Values("Vary"), "Origin") {
		t.Fatalf("preflight from the allowed origin: %d %v", pre.status, pre.header)
	}
	if r := b.call(t, "GET", "/v1/jobs/j/checkpoints/1", "", ""); r.status != http.StatusNotFound {
		t.Fatalf("after a preflight, checkpoint 1: %d; want none opened", r.status)
	}
	open := b.call(t, "POST", "/v1/jobs/j/checkpoints", "", "", "Origin", page)
	if open.status != http.StatusCreated || open.header.Get("Access-Control-Allow-Origin") != page ||
		!strings.Contains(open.header.Get("Access-Control-Expose-Headers"), "X-Request-Id") ||
		!strings.Contains(open.header.Get("Access-Control-Expose-Headers"), "Retry-After") {
		t.Fatalf("a request from the allowed origin: %d %v", open.status, open.header)
	}
	// A problem answer carries them too, so that the page can read its code.
	bad := b.call(t, "GET", "/v1/jobs/nope", "", "", "Origin", page)
	if bad.status != http.StatusNotFound || bad.header.Get("Access-Control-Allow-Origin") != page {
		t.Fatalf("a 404 to the allowed origin: %d %v", bad.status, bad.header)
	}
	for _, header := range [][]string{nil, {"Origin", "https://evil.example", "Access-Control-Request-Method", "POST"}} {
		a := b.call(t, "OPTIONS", "/v1/jobs/j/checkpoints", "", "", header...)
		if a.header.Get("Access-Control-Allow-Origin") != "" || a.status == http.StatusNoContent {
			t.Errorf("OPTIONS with %q: %d %v; want no CORS", header, a.status, a.header)
		}
	}
	if r := b.call(t, "GET", "/v1/jobs/j/checkpoints/2", "", ""); r.status != http.StatusNotFound {
		t.Fatalf("checkpoint 2: %d; want only the one opened", r.status)
	}
}
