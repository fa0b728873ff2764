package e2e_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/e2e/harness"
	"github.com/twophase/coordinator/store/pgtest"
)

// revocationBound is what the protocol promises: revoking a token takes effect on every
// coordinator on the database within one second. It is a correctness bound, not a
// performance figure: a coordinator reads the tokens again every 250 ms.
const revocationBound = time.Second

// TestAuth runs two coordinator processes on one database with authentication on (the
// same admin token), and checks across them: a revocation (through the API of one, and
// through `coordinator token revoke` on the database) takes effect on both within a
// second; an expiry on both at once; a long-poll of a token revoked meanwhile answers 401
// at once; a client in another language (Python, standard library only) with tokens of
// every scope is allowed what its scope allows and refused the rest with 403, the refusals
// changing nothing; and no secret is ever in the database or the logs.
func TestAuth(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t) // first: under -short it skips the test
	adminFile, adminSecret := harness.AdminTokenFile(t)
	a := harness.StartCoordinator(t, dbURL, "--admin-token-file", adminFile)
	b := harness.StartCoordinator(t, dbURL, "--admin-token-file", adminFile)
	both := []*harness.Coordinator{a, b}
	for i, c := range both {
		if auth := c.ListeningLine()["auth"]; auth != "tokens" {
			t.Errorf("coordinator %d: the listening line says auth=%v, want tokens", i+1, auth)
		}
	}
	// Every secret the test handles, by token name: none may end up in the database or a log.
	secrets := map[string]string{"admin": adminSecret}
	var secretsMu sync.Mutex
	keep := func(name, secret string) string {
		secretsMu.Lock()
		defer secretsMu.Unlock()
		secrets[name] = secret
		return secret
	}

	t.Run("revocation through the API", func(t *testing.T) {
		secret := keep("revoke-api", a.CreateToken(t, harness.TokenSpec{Name: "revoke-api", Scopes: []string{"read"}}))
		harness.AwaitTokens(t, []*harness.Coordinator{b}, secret)
		for i, c := range both {
			mustAccept(t, c, i, secret)
		}
		sent := time.Now()
		a.RevokeToken(t, "revoke-api")
		answered := time.Now()
		refused := untilRefused(t, both, secret, sent)
		for i, at := range refused {
			if at.IsZero() {
				continue // reported
			}
			delay := at.Sub(sent)
			t.Logf("revoked through coordinator 1's API (answered in %s): coordinator %d refuses the token %s after the DELETE was sent",
				answered.Sub(sent).Round(time.Millisecond), i+1, delay.Round(time.Millisecond))
			if delay > revocationBound {
				t.Errorf("coordinator %d still accepted the revoked token %s after the revocation was sent, more than %s", i+1, delay, revocationBound)
			}
		}
	})

	t.Run("a new token at once on the other coordinator", func(t *testing.T) {
		// Behind a load balancer, a token's first request may reach another coordinator
		// than the one that created it: it is looked up there, not refused.
		secret := keep("fresh-api", a.CreateToken(t, harness.TokenSpec{Name: "fresh-api", Scopes: []string{"read"}}))
		mustAccept(t, b, 1, secret)
		secret = keep("fresh-cli", harness.CreateTokenCLI(t, dbURL, harness.TokenSpec{Name: "fresh-cli", Scopes: []string{"read"}, Job: "*"}))
		for i, c := range both {
			mustAccept(t, c, i, secret)
		}
	})

	t.Run("revocation after the database connections were lost", func(t *testing.T) {
		secret := keep("revoke-cut", a.CreateToken(t, harness.TokenSpec{Name: "revoke-cut", Scopes: []string{"read"}}))
		for i, c := range both {
			mustAccept(t, c, i, secret)
		}
		// Every connection of both coordinators to the database is cut (the listener's
		// among them); they connect again by themselves.
		conn, err := pgx.Connect(context.Background(), dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var cut int
		if err := conn.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&cut); err != nil || cut == 0 {
			t.Fatalf("cut the coordinators' connections: %d cut, %v", cut, err)
		}
		sent := time.Now()
		harness.TokenCommand(t, dbURL, "revoke", "revoke-cut")
		for i, at := range untilRefused(t, both, secret, sent) {
			if !at.IsZero() && at.Sub(sent) > revocationBound {
				t.Errorf("coordinator %d still accepted the token revoked after its connections were cut %s later", i+1, at.Sub(sent))
			}
		}
	})

	t.Run("revocation through the token command", func(t *testing.T) {
		// Created and revoked on the database directly, with no coordinator involved.
		secret := keep("revoke-cli", harness.CreateTokenCLI(t, dbURL, harness.TokenSpec{Name: "revoke-cli", Scopes: []string{"read"}, Job: "auth-*"}))
		created := time.Now()
		harness.AwaitTokens(t, both, secret)
		t.Logf("a token made by 'coordinator token create' was accepted by both coordinators %s after the command exited",
			time.Since(created).Round(time.Millisecond))
		for i, c := range both {
			mustAccept(t, c, i, secret)
		}
		list := harness.TokenCommand(t, dbURL, "list", "-o", "json")
		if list.Code != 0 || !strings.Contains(list.Stdout, `"revoke-cli"`) {
			t.Errorf("coordinator token list: status %d, stdout %s, stderr %s", list.Code, list.Stdout, list.Stderr)
		}
		checkNoSecrets(t, "the output of 'coordinator token list'", list.Stdout, secrets)

		started := time.Now()
		out := harness.TokenCommand(t, dbURL, "revoke", "revoke-cli")
		exited := time.Now()
		if out.Code != 0 {
			t.Fatalf("coordinator token revoke: status %d\n%s%s", out.Code, out.Stdout, out.Stderr)
		}
		refused := untilRefused(t, both, secret, started)
		for i, at := range refused {
			if at.IsZero() {
				continue
			}
			// The revocation committed while the command ran: from its exit the delay is
			// at most the true one, from its start at least.
			t.Logf("revoked by 'coordinator token revoke' (%s from start to exit): coordinator %d refuses the token %s after the command exited, %s after it started",
				exited.Sub(started).Round(time.Millisecond), i+1, at.Sub(exited).Round(time.Millisecond), at.Sub(started).Round(time.Millisecond))
			if delay := at.Sub(exited); delay > revocationBound {
				t.Errorf("coordinator %d still accepted the revoked token %s after 'coordinator token revoke' exited, more than %s", i+1, delay, revocationBound)
			}
		}
		if again := harness.TokenCommand(t, dbURL, "revoke", "revoke-cli"); again.Code != 2 {
			t.Errorf("revoking the revoked token again: status %d, want 2 (no such token)\n%s", again.Code, again.Stderr)
		}
	})

	t.Run("expiry", func(t *testing.T) {
		expires := time.Now().Add(2 * time.Second)
		secret := keep("expiring", a.CreateToken(t, harness.TokenSpec{Name: "expiring", Scopes: []string{"read"}, ExpiresAt: &expires}))
		harness.AwaitTokens(t, []*harness.Coordinator{b}, secret)
		if time.Until(expires) < 500*time.Millisecond {
			t.Fatalf("setting up took too long: the token expires in %s", time.Until(expires))
		}
		var wg sync.WaitGroup
		for i, c := range both {
			wg.Go(func() {
				accepted := 0
				for {
					sent := time.Now()
					ok, err := c.Accepts(secret)
					received := time.Now()
					switch {
					case err != nil:
						t.Errorf("coordinator %d: %v", i+1, err)
						return
					case ok:
						accepted++
						// A 200 means the coordinator's clock was before expires_at, so
						// the request was sent before it (one clock: one machine).
						if !sent.Before(expires) {
							t.Errorf("coordinator %d accepted the token %s after it expired", i+1, sent.Sub(expires))
							return
						}
					default:
						if received.Before(expires) {
							t.Errorf("coordinator %d refused the token %s before it expired", i+1, expires.Sub(received))
						} else if late := received.Sub(expires); late > time.Second {
							t.Errorf("coordinator %d refused the token only %s after it expired", i+1, late)
						} else {
							t.Logf("coordinator %d accepted the token %d times until it expired, then refused it within %s",
								i+1, accepted, late.Round(time.Millisecond))
						}
						return
					}
					if time.Since(expires) > 5*time.Second {
						t.Errorf("coordinator %d still accepts the token 5 s after it expired", i+1)
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		for _, c := range both {
			p := (&api{base: c.BaseURL, hc: c.WithToken(secret).HTTP}).mustProblem(t, request{method: "GET", path: "/v1/jobs"}, 401, "unauthenticated")
			if !strings.Contains(p.Detail, "expired") {
				t.Errorf("401 of an expired token: detail %q does not say it expired", p.Detail)
			}
		}
	})

	t.Run("long-poll of a revoked token", func(t *testing.T) {
		admin := &api{base: a.BaseURL, hc: a.Admin().HTTP}
		admin.mustDo(t, "PUT", jobPath("auth-lp"), `{"participants":["p"]}`, 201, nil)
		cp := admin.prepare(t, "auth-lp", `{"timeout_ms":60000}`)
		secret := keep("lp-reader", a.CreateToken(t, harness.TokenSpec{Name: "lp-reader", Scopes: []string{"read"}, Job: "auth-lp"}))
		harness.AwaitTokens(t, []*harness.Coordinator{b}, secret)
		before := rawGet(t, admin, cpPath("auth-lp", cp.Id))

		type answer struct {
			rep reply
			err error
			at  time.Time
		}
		done := make(chan answer, 1)
		long := &api{base: b.BaseURL, hc: &http.Client{Timeout: time.Minute}}
		go func() {
			rep, err := long.send(context.Background(), request{method: "GET", path: cpPath("auth-lp", cp.Id) + "?wait_ms=30000",
				header: map[string]string{"Authorization": "Bearer " + secret}})
			done <- answer{rep, err, time.Now()}
		}()
		select {
		case ans := <-done:
			t.Fatalf("the long-poll of a preparing checkpoint answered at once: %v %v", ans.rep, ans.err)
		case <-time.After(500 * time.Millisecond):
		}
		a.RevokeToken(t, "lp-reader")
		revoked := time.Now()
		select {
		case ans := <-done:
			if ans.err != nil {
				t.Fatal(ans.err)
			}
			if err := problemError(ans.rep, http.StatusUnauthorized, "unauthenticated"); err != nil {
				t.Error(err)
			}
			delay := ans.at.Sub(revoked)
			t.Logf("the long-poll on coordinator 2 of the token revoked through coordinator 1 answered %d %s after the revocation (%s after it began)",
				ans.rep.status, delay.Round(time.Millisecond), ans.rep.elapsed.Round(time.Millisecond))
			if delay > revocationBound {
				t.Errorf("the long-poll of a revoked token answered %s after the revocation, more than %s", delay, revocationBound)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the long-poll of a revoked token had not answered 10 s after the revocation")
		}
		if after := rawGet(t, admin, cpPath("auth-lp", cp.Id)); after != before {
			t.Errorf("the checkpoint changed:\n%s\n%s", before, after)
		}
	})

	t.Run("a client in Python", func(t *testing.T) {
		foreignClient(t, a, b, keep)
	})

	// Secrets are nowhere in the database: the tokens table holds digests (the live
	// tokens' among them), and no table holds a secret.
	tokensDump, allDump := dumpDatabase(t, dbURL)
	if !strings.Contains(tokensDump, "py-read") {
		t.Errorf("the tokens table does not list the live token py-read:\n%s", tokensDump)
	} else if digest := sha256.Sum256([]byte(secrets["py-read"])); !strings.Contains(tokensDump, hex.EncodeToString(digest[:])) {
		t.Errorf("the tokens table does not hold the SHA-256 digest of py-read's secret:\n%s", tokensDump)
	}
	checkNoSecrets(t, "the tokens table (SELECT * FROM tokens)", tokensDump, secrets)
	checkNoSecrets(t, "the database (every table)", allDump, secrets)
	for i, c := range both {
		checkNoSecrets(t, fmt.Sprintf("the log of coordinator %d", i+1), c.Logs(), secrets)
	}
	t.Logf("no secret of %d tokens in the database (%d bytes of rows) nor in the logs (%d and %d bytes)",
		len(secrets), len(allDump), len(a.Logs()), len(b.Logs()))
}

// mustAccept fails the test unless c accepts secret, and serves a request with it.
func mustAccept(t *testing.T, c *harness.Coordinator, i int, secret string) {
	t.Helper()
	if ok, err := c.Accepts(secret); !ok || err != nil {
		t.Fatalf("coordinator %d does not accept the token: %v", i+1, err)
	}
	(&api{base: c.BaseURL, hc: c.WithToken(secret).HTTP}).mustDo(t, "GET", "/v1/jobs", "", 200, nil)
}

// untilRefused polls every coordinator of coords at once, every 20 ms, until it refuses
// secret (401), for up to 5 s from since, and returns when each first answered 401 (zero
// for one that did not: the failure is reported). Until then each must answer 200, and
// after it keep refusing.
func untilRefused(t *testing.T, coords []*harness.Coordinator, secret string, since time.Time) []time.Time {
	t.Helper()
	refused := make([]time.Time, len(coords))
	var wg sync.WaitGroup
	for i, c := range coords {
		wg.Go(func() {
			for {
				ok, err := c.Accepts(secret)
				switch {
				case err != nil:
					t.Errorf("coordinator %d: %v", i+1, err)
					return
				case !ok:
					refused[i] = time.Now()
					return
				}
				if time.Since(since) > 5*time.Second {
					t.Errorf("coordinator %d still accepts the revoked token 5 s after the revocation", i+1)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	for i, c := range coords {
		if ok, err := c.Accepts(secret); ok || err != nil {
			t.Errorf("coordinator %d accepts the revoked token again (%v)", i+1, err)
		}
	}
	return refused
}

// dumpDatabase returns every row of the tokens table, and of every table of the database,
// as text (bytea as \x hex).
func dumpDatabase(t *testing.T, dbURL string) (tokens, all string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows := func(query string) string {
		t.Helper()
		var lines []string
		r, err := conn.Query(ctx, query)
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		defer r.Close()
		for r.Next() {
			var line string
			if err := r.Scan(&line); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, line)
		}
		if err := r.Err(); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return strings.Join(lines, "\n")
	}
	tokens = rows("SELECT t::text FROM tokens t ORDER BY name")
	var b strings.Builder
	tables := strings.Split(rows(`SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
		WHERE table_schema NOT IN ('pg_catalog', 'information_schema') AND table_type = 'BASE TABLE' ORDER BY 1`), "\n")
	for _, table := range tables {
		fmt.Fprintf(&b, "-- %s\n%s\n", table, rows("SELECT t::text FROM "+table+" t"))
	}
	return tokens, b.String()
}

// foreignScript is a client nobody in the project wrote: Python 3, standard library only.
// It reads {"coordinators": [base URLs], "admin": token, "requests": [...]} on stdin, sends
// each request (method, path, token, body, headers) to its coordinator, and around it GETs
// the paths of its "snapshot" with the admin token; it prints the results as JSON.
const foreignScript = `
import json, sys, urllib.error, urllib.request

def call(base, method, path, token=None, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with opener.open(req, timeout=30) as resp:
            return resp.status, resp.read().decode(), resp.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers

# Straight to the coordinators, whatever proxy the environment names.
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
spec = json.load(sys.stdin)
bases, admin = spec["coordinators"], spec["admin"]

def snapshot(paths):
    views = {}
    for p in paths:
        status, body, _ = call(bases[0], "GET", p, admin)
        views[p] = "%d %s" % (status, body)
    return views

results = []
for r in spec["requests"]:
    before = snapshot(r.get("snapshot", []))
    status, body, headers = call(bases[r["coordinator"]], r["method"], r["path"], r.get("token"), r.get("body"), r.get("headers"))
    results.append({"status": status, "body": body, "content_type": headers.get("Content-Type", ""),
                    "www_authenticate": headers.get("WWW-Authenticate", ""),
                    "before": before, "after": snapshot(r.get("snapshot", []))})
json.dump(results, sys.stdout)
`

// foreignRequest is one request of the Python client, and what it must get.
type foreignRequest struct {
	Coordinator int               `json:"coordinator"`
	Method      string            `json:"method"`
	Path        string            `json:"path"`
	Token       string            `json:"token,omitempty"`
	Body        any               `json:"body,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Snapshot    []string          `json:"snapshot,omitempty"`
	who         string
	want        int // the status; 401 and 403 are refusals, the others what an allowed request gets
}

// foreignClient runs foreignScript against a and b with tokens of every scope.
func foreignClient(t *testing.T, a, b *harness.Coordinator, keep func(name, secret string) string) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is required: %v", err)
	}
	admin := &api{base: a.BaseURL, hc: a.Admin().HTTP}
	admin.mustDo(t, "PUT", jobPath("auth-py"), `{"participants":["p1","p2"],"auto_commit":false}`, 201, nil)
	admin.mustDo(t, "PUT", jobPath("auth-other"), `{"participants":["q"]}`, 201, nil)
	e1, e2 := admin.register(t, "auth-py", "p1").Epoch, admin.register(t, "auth-py", "p2").Epoch
	specs := []harness.TokenSpec{
		{Name: "py-read", Scopes: []string{"read"}, Job: "auth-py"},
		{Name: "py-p1", Scopes: []string{"participant"}, Job: "auth-py", Participant: "p1"},
		{Name: "py-trigger", Scopes: []string{"trigger"}, Job: "auth-py"},
		{Name: "py-operator", Scopes: []string{"operator"}, Job: "auth-py"},
	}
	tok := map[string]string{"admin": a.AdminToken, "none": ""}
	secrets := a.CreateTokens(t, specs...)
	harness.AwaitTokens(t, []*harness.Coordinator{b}, secrets...)
	for i, s := range secrets {
		tok[specs[i].Name] = keep(specs[i].Name, s)
	}
	cp1 := cpPath("auth-py", 1)
	reqs := []foreignRequest{
		{who: "none", want: 401, Method: "GET", Path: jobPath("auth-py")},
		{who: "bogus", want: 401, Method: "GET", Path: "/v1/info", Token: "tpc_" + strings.Repeat("a", 40)},
		{who: "py-read", want: 200, Method: "GET", Path: jobPath("auth-py")},
		{who: "py-read", want: 200, Method: "GET", Path: "/v1/jobs"},
		{who: "py-read", want: 403, Method: "GET", Path: jobPath("auth-other")},
		{who: "py-read", want: 403, Method: "POST", Path: jobPath("auth-py") + "/checkpoints",
			Snapshot: []string{jobPath("auth-py"), jobPath("auth-py") + "/checkpoints"}},
		{who: "py-p1", want: 200, Method: "POST", Path: registerPath("auth-py", "p1")},
		{who: "py-p1", want: 403, Method: "POST", Path: registerPath("auth-py", "p2"),
			Snapshot: []string{jobPath("auth-py"), pendingPath("auth-py", "p2")}},
		{who: "py-trigger", want: 201, Method: "POST", Path: jobPath("auth-py") + "/checkpoints",
			Body: map[string]any{"timeout_ms": 60000}, Headers: map[string]string{"Idempotency-Key": "py-1"}},
		{who: "py-trigger", want: 403, Method: "POST", Path: cp1 + "/commit", Snapshot: []string{cp1}},
		{who: "py-p1", want: 403, Method: "PUT", Path: votePath("auth-py", 1, "p2"),
			Body: map[string]any{"epoch": e2, "vote": "prepared"}, Snapshot: []string{cp1}},
		{who: "py-p1", want: 200, Method: "PUT", Path: votePath("auth-py", 1, "p1"),
			Body: map[string]any{"epoch": e1 + 1, "vote": "prepared", "committables": []string{"py"}}},
		{who: "py-operator", want: 403, Method: "POST", Path: jobPath("auth-other") + "/checkpoints",
			Snapshot: []string{jobPath("auth-other"), jobPath("auth-other") + "/checkpoints"}},
		{who: "py-operator", want: 403, Method: "DELETE", Path: "/v1/tokens/py-read", Snapshot: []string{"/v1/tokens"}},
		{who: "py-trigger", want: 403, Method: "DELETE", Path: jobPath("auth-py"), Snapshot: []string{jobPath("auth-py")}},
		{who: "py-operator", want: 200, Method: "POST", Path: cp1 + "/abort", Body: map[string]any{"reason": "python operator"}},
		{who: "admin", want: 200, Method: "GET", Path: "/v1/tokens"},
	}
	for i := range reqs {
		reqs[i].Coordinator = i % 2
		if reqs[i].who != "bogus" {
			reqs[i].Token = tok[reqs[i].who]
		}
	}
	input, err := json.Marshal(map[string]any{"coordinators": []string{a.BaseURL, b.BaseURL}, "admin": a.AdminToken, "requests": reqs})
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "foreign_client.py")
	if err := os.WriteFile(script, []byte(foreignScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, script)
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 %s: %v\n%s", script, err, stderr.String())
	}
	var results []struct {
		Status          int               `json:"status"`
		Body            string            `json:"body"`
		ContentType     string            `json:"content_type"`
		WWWAuthenticate string            `json:"www_authenticate"`
		Before          map[string]string `json:"before"`
		After           map[string]string `json:"after"`
	}
	if err := json.Unmarshal(out, &results); err != nil || len(results) != len(reqs) {
		t.Fatalf("the Python client printed %d results for %d requests (%v):\n%s", len(results), len(reqs), err, out)
	}
	allowed, refused := 0, 0
	for i, r := range reqs {
		res := results[i]
		what := fmt.Sprintf("python, %s token, coordinator %d: %s %s -> %d %s", r.who, r.Coordinator+1, r.Method, r.Path, res.Status, res.Body)
		switch {
		case res.Status != r.want:
			t.Errorf("%s: want %d", what, r.want)
			continue
		case r.want == 401 || r.want == 403:
			refused++
			code := map[int]string{401: "unauthenticated", 403: "forbidden"}[r.want]
			var p problemDoc
			if res.ContentType != "application/problem+json" || json.Unmarshal([]byte(res.Body), &p) != nil || p.Code != code {
				t.Errorf("%s: not a problem document of code %s (Content-Type %q)", what, code, res.ContentType)
			}
			if r.want == 401 && !strings.HasPrefix(res.WWWAuthenticate, "Bearer") {
				t.Errorf("%s: WWW-Authenticate %q", what, res.WWWAuthenticate)
			}
			for path, before := range res.Before {
				if !strings.HasPrefix(before, "200 ") {
					t.Errorf("%s: the admin's GET %s: %s", what, path, before)
				}
				if after := res.After[path]; after != before {
					t.Errorf("%s: the refused request changed GET %s:\nbefore %s\nafter  %s", what, path, before, after)
				}
			}
		default:
			allowed++
		}
	}
	// What the answers said: the read token lists its job only; the admin's token list
	// names the tokens and holds no secret.
	var jobs struct{ Items []job }
	if err := json.Unmarshal([]byte(results[3].Body), &jobs); err != nil || len(jobs.Items) != 1 || jobs.Items[0].Name != "auth-py" {
		t.Errorf("GET /v1/jobs with a read token on auth-py: %s", results[3].Body)
	}
	tokenList := results[len(results)-1].Body
	for _, name := range []string{"py-read", "py-p1", "py-trigger", "py-operator"} {
		if !strings.Contains(tokenList, `"`+name+`"`) {
			t.Errorf("GET /v1/tokens does not list %s: %s", name, tokenList)
		}
	}
	checkNoSecrets(t, "GET /v1/tokens", tokenList, tok)
	// And what the allowed ones did.
	cp := admin.get(t, "auth-py", 1)
	if cp.Status != "aborted" || cp.DecidedBy == nil || *cp.DecidedBy != "py-operator" {
		t.Errorf("auth-py/1 after the operator's abort: %s, decided_by %v", cp.Status, cp.DecidedBy)
	}
	if p1, p2 := participant(cp, "p1"), participant(cp, "p2"); p1.Vote == nil || *p1.Epoch != e1+1 || p2.Vote != nil {
		t.Errorf("auth-py/1: p1 %+v, p2 %+v: want p1's vote with epoch %d, none of p2", p1, p2, e1+1)
	}
	if cps := admin.mustListAll(t, "auth-other"); len(cps) != 0 {
		t.Errorf("auth-other has %d checkpoints", len(cps))
	}
	t.Logf("the Python client: %d requests allowed, %d refused (each changing nothing)", allowed, refused)
}

// TestAuthListen checks where the coordinator agrees to listen: without authentication
// only on loopback (refused on 0.0.0.0 with status 2 naming --insecure-no-auth), unless
// --insecure-no-auth, which it warns about; with an admin token anywhere. Its "listening"
// line says auth=off or auth=tokens.
func TestAuthListen(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)

	refused := harness.LaunchCoordinator(t, "0.0.0.0:0", dbURL)
	select {
	case <-refused.Exited():
	case <-time.After(30 * time.Second):
		t.Fatalf("a coordinator without authentication on 0.0.0.0 still runs after 30 s:\n%s", refused.Logs())
	}
	if code, _ := refused.ExitCode(); code != 2 {
		t.Errorf("a coordinator without authentication on 0.0.0.0 exited with status %d, want 2 (usage)", code)
	}
	if logs := refused.Logs(); !strings.Contains(logs, "--insecure-no-auth") || refused.ListeningLine() != nil {
		t.Errorf("a coordinator without authentication on 0.0.0.0: the refusal does not mention --insecure-no-auth, or it listened:\n%s", logs)
	}

	loopback := harness.StartCoordinator(t, dbURL)
	if auth := loopback.ListeningLine()["auth"]; auth != "off" {
		t.Errorf("on 127.0.0.1 without an admin token: auth=%v, want off", auth)
	}
	loopback.Stop()

	for _, tc := range []struct {
		name string
		args []string
		auth string
	}{
		{"--insecure-no-auth", []string{"--insecure-no-auth"}, "off"},
		{"an admin token", []string{"--admin-token-file", func() string { f, _ := harness.AdminTokenFile(t); return f }()}, "tokens"},
	} {
		c := harness.LaunchCoordinator(t, "0.0.0.0:0", dbURL, tc.args...)
		c.WaitListening(time.Minute)
		line := c.ListeningLine()
		if host, _, err := net.SplitHostPort(fmt.Sprint(line["addr"])); err != nil || !net.ParseIP(host).IsUnspecified() {
			t.Errorf("with %s on 0.0.0.0:0: listening on %v", tc.name, line["addr"])
		}
		if line["auth"] != tc.auth {
			t.Errorf("with %s: the listening line says auth=%v, want %s", tc.name, line["auth"], tc.auth)
		}
		anonymous := newAPI(c)
		anonymous.mustDo(t, "GET", "/healthz", "", 200, nil)
		if tc.auth == "off" {
			anonymous.mustDo(t, "GET", "/v1/jobs", "", 200, nil)
		} else {
			anonymous.mustProblem(t, request{method: "GET", path: "/v1/jobs"}, 401, "unauthenticated")
			(&api{base: c.BaseURL, hc: c.Admin().HTTP}).mustDo(t, "GET", "/v1/jobs", "", 200, nil)
		}
		c.Stop() // then its whole output is in Logs
		if warned := warnedOf(c.Logs(), "authentication is off"); warned != (tc.auth == "off") {
			t.Errorf("with %s: warned that authentication is off: %v, want %v\n%s", tc.name, warned, tc.auth == "off", c.Logs())
		}
		// Tokens over plain HTTP beyond loopback: warned of.
		if warned := warnedOf(c.Logs(), "tokens travel in plain text"); warned != (tc.auth == "tokens") {
			t.Errorf("with %s on 0.0.0.0 without TLS: warned that tokens travel in plain text: %v, want %v\n%s", tc.name, warned, tc.auth == "tokens", c.Logs())
		}
	}

	// An admin token file that others may read is warned of; one of mode 0600 is not (the
	// runs above), and neither warning quotes the token.
	file, secret := harness.AdminTokenFile(t)
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	readable := harness.StartCoordinator(t, dbURL, "--admin-token-file", file)
	readable.Stop()
	if !warnedOf(readable.Logs(), "may be read by others") {
		t.Errorf("an admin token file of mode 0644: no warning\n%s", readable.Logs())
	}
	if warnedOf(readable.Logs(), "plain text") {
		t.Errorf("on loopback: warned that tokens travel in plain text\n%s", readable.Logs())
	}
	if strings.Contains(readable.Logs(), secret) {
		t.Error("the logs hold the admin token")
	}
}

// warnedOf reports whether logs (JSON lines) hold a warning whose message contains text.
func warnedOf(logs, text string) bool {
	return slices.ContainsFunc(strings.Split(logs, "\n"), func(l string) bool {
		var m struct{ Level, Msg string }
		return json.Unmarshal([]byte(l), &m) == nil && m.Level == "WARN" && strings.Contains(m.Msg, text)
	})
}
