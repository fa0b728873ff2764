package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/twophase/coordinator/coordinator"
)

// These tests run the API with authentication on, on both stores, and send every route
// with every kind of token: what a token does not allow is refused with 401 or 403 and
// changes nothing.

const testAdminToken = "test-admin-token-0123456789abcdef0123456789"

type authBundle struct {
	url    string
	store  coordinator.Store
	tokens coordinator.TokenStore
	auth   *coordinator.Authenticator
	svc    *coordinator.Service
	// secrets of the tokens made by token(), by name.
	secrets map[string]string
}

func setupAuth(t *testing.T) *authBundle {
	t.Helper()
	store := testStore(t)
	ts := store.(coordinator.TokenStore)
	auth := coordinator.NewAuthenticator(ts, testAdminToken, nil)
	if err := auth.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	svc := coordinator.NewService(store, nil)
	srv := httptest.NewServer(NewHandler(svc, Options{
		Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Minute,
		Auth: auth, Tokens: coordinator.NewTokens(ts),
	}))
	t.Cleanup(srv.Close)
	return &authBundle{url: srv.URL, store: store, tokens: ts, auth: auth, svc: svc, secrets: map[string]string{}}
}

// token creates a token and makes the authenticator read it.
func (b *authBundle) token(t *testing.T, name string, job coordinator.JobPattern, participant string, scopes ...coordinator.Scope) string {
	t.Helper()
	_, secret, err := coordinator.NewTokens(b.tokens).Create(context.Background(),
		coordinator.Token{Name: name, Scopes: scopes, Job: job, Participant: participant})
	if err != nil {
		t.Fatalf("create token %s: %v", name, err)
	}
	if err := b.auth.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.secrets[name] = secret
	return secret
}

type reply struct {
	status  int
	header  http.Header
	body    []byte
	problem Problem
}

// send sends a request with the token secret ("" for none) and a JSON body ("" for none).
func (b *authBundle) send(t *testing.T, secret, method, path, body string, header ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		// An event stream, served: its answer never ends; its head is what is checked.
		return reply{status: resp.StatusCode, header: resp.Header}
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, body: raw}
	if method != http.MethodHead && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		if err := json.Unmarshal(raw, &r.problem); err != nil {
			t.Fatalf("%s %s: problem %s: %v", method, path, raw, err)
		}
	}
	return r
}

// snapshot is everything a request could change: jobs, checkpoints with their votes and
// acks, epochs, tokens.
func (b *authBundle) snapshot(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	jobs, err := b.store.ListJobs(ctx, "", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	cps, err := b.store.ListCheckpoints(ctx, coordinator.CheckpointQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := b.tokens.ListTokens(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(map[string]any{"jobs": jobs, "checkpoints": cps, "tokens": tokens})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestEveryRouteWithEveryScope(t *testing.T) { onEachStore(t, testEveryRouteWithEveryScope) }
func TestUnauthenticated(t *testing.T)          { onEachStore(t, testUnauthenticated) }
func TestListsShowOnlyWhatTheTokenReads(t *testing.T) {
	onEachStore(t, testListsShowOnlyWhatTheTokenReads)
}
func TestForbiddenSaysNothingOfExistence(t *testing.T) {
	onEachStore(t, testForbiddenSaysNothingOfExistence)
}
func TestRevocationAndExpiry(t *testing.T)         { onEachStore(t, testRevocationAndExpiry) }
func TestRevokedTokenEndsItsLongPoll(t *testing.T) { onEachStore(t, testRevokedTokenEndsItsLongPoll) }
func TestDecidedByNamesTheToken(t *testing.T)      { onEachStore(t, testDecidedByNamesTheToken) }

// routeCase is one route with concrete arguments, and the tokens (by role) it allows.
type routeCase struct {
	method, path, body string
	allowed            []string
}

// roles are the tokens every route is tried with, made for each job: the admin token of
// the configuration, a reader of the job and one of every job, participants sink-a and
// sink-b that the job expects and sink-c that it does not, a trigger, an operator of the
// job and an operator of another job.
var roles = []string{"reader", "reader-all", "sink-a", "sink-b", "sink-c", "trigger", "operator", "operator-other", "admin"}

// readers are the roles that may read the job.
var readers = []string{"reader", "reader-all", "sink-a", "sink-b", "sink-c", "trigger", "operator", "admin"}

func testEveryRouteWithEveryScope(t *testing.T) {
	b := setupAuth(t)
	ctx := context.Background()
	everyToken := roles
	cases := func(job string, id int64, epochA int64, victim string) []routeCase {
		j := "/v1/jobs/" + job
		cp := fmt.Sprintf("%s/checkpoints/%d", j, id)
		return []routeCase{
			{"GET", "/v1/info", "", everyToken},
			{"GET", "/problems", "", everyToken},
			{"GET", "/problems/fenced", "", everyToken},
			{"GET", "/v1/jobs", "", everyToken},
			{"GET", "/v1/checkpoints", "", everyToken},
			{"PUT", j, `{"participants":["sink-a","sink-b"],"max_concurrent_checkpoints":5}`, []string{"operator", "admin"}},
			{"GET", j, "", readers},
			{"HEAD", j, "", readers},
			{"DELETE", j, "", []string{"operator", "admin"}},
			{"POST", j + "/participants/sink-a/register", "", []string{"sink-a", "admin"}},
			// A participant token reads its own pending only: another participant's holds
			// that participant's committables.
			{"GET", j + "/participants/sink-a/pending", "", []string{"reader", "reader-all", "sink-a", "trigger", "operator", "admin"}},
			{"GET", j + "/participants/sink-a/pending?wait_ms=50", "", []string{"reader", "reader-all", "sink-a", "trigger", "operator", "admin"}},
			{"POST", j + "/checkpoints", "", []string{"trigger", "operator", "admin"}},
			{"GET", j + "/checkpoints", "", readers},
			{"GET", j + "/participants", "", readers},
			{"GET", j + "/events", "", readers},
			{"GET", "/v1/events", "", everyToken},
			{"GET", cp, "", readers},
			{"PUT", cp + "/votes/sink-a", fmt.Sprintf(`{"epoch":%d,"vote":"prepared"}`, epochA), []string{"sink-a", "admin"}},
			{"POST", cp + "/commit", "", []string{"operator", "admin"}},
			{"POST", cp + "/abort", "", []string{"sink-a", "sink-b", "operator", "admin"}},
			{"PUT", cp + "/acks/sink-a", fmt.Sprintf(`{"epoch":%d}`, epochA), []string{"sink-a", "admin"}},
			{"POST", cp + "/complete", `{"reason":"gone"}`, []string{"operator", "admin"}},
			{"GET", "/v1/audit", "", []string{"operator", "operator-other", "admin"}},
			{"GET", "/metrics", "", []string{"reader-all", "admin"}},
			{"POST", "/v1/tokens", `{"name":"new-` + job + `","scopes":["read"],"job":"*"}`, []string{"admin"}},
			{"GET", "/v1/tokens", "", []string{"admin"}},
			{"GET", "/v1/tokens/" + victim, "", []string{"admin"}},
			{"DELETE", "/v1/tokens/" + victim, "", []string{"admin"}},
		}
	}
	if _, _, err := b.svc.PutJob(ctx, "other", coordinator.JobConfig{Participants: []string{"x"},
		CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}); err != nil {
		t.Fatal(err)
	}
	b.token(t, "reader-all", "*", "", coordinator.ScopeRead)
	b.token(t, "operator-other", "other", "", coordinator.ScopeOperator)
	routes := map[string]bool{}
	for n := range len(cases("x", 1, 1, "v")) {
		// Each case gets a job of its own, in the same state: a preparing checkpoint 1
		// that expects sink-a and sink-b, both registered.
		job := fmt.Sprintf("job-%d", n)
		if _, _, err := b.svc.PutJob(ctx, job, coordinator.JobConfig{Participants: []string{"sink-a", "sink-b"},
			CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}); err != nil {
			t.Fatal(err)
		}
		reg, err := b.svc.Register(ctx, job, "sink-a")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.svc.Register(ctx, job, "sink-b"); err != nil {
			t.Fatal(err)
		}
		cp, _, err := b.svc.Prepare(ctx, job, coordinator.PrepareRequest{})
		if err != nil {
			t.Fatal(err)
		}
		secrets := map[string]string{"admin": testAdminToken, "reader-all": b.secrets["reader-all"], "operator-other": b.secrets["operator-other"]}
		coordJob := coordinator.JobPattern(job)
		secrets["reader"] = b.token(t, job+"-reader", coordJob, "", coordinator.ScopeRead)
		for _, p := range []string{"sink-a", "sink-b", "sink-c"} {
			secrets[p] = b.token(t, job+"-"+p, coordJob, p, coordinator.ScopeParticipant)
		}
		secrets["trigger"] = b.token(t, job+"-trigger", coordJob, "", coordinator.ScopeTrigger)
		secrets["operator"] = b.token(t, job+"-operator", coordJob, "", coordinator.ScopeOperator)
		victim := job + "-victim"
		b.token(t, victim, coordJob, "", coordinator.ScopeRead)

		c := cases(job, cp.ID, reg.Epoch, victim)[n]
		routes[c.method+" "+routeOf(c.path)] = true
		for _, role := range roles { // admin last: it may change what the others see
			before := b.snapshot(t)
			r := b.send(t, secrets[role], c.method, c.path, c.body)
			allowed := slices.Contains(c.allowed, role)
			what := fmt.Sprintf("%s %s as %s", c.method, c.path, role)
			switch {
			case allowed && (r.status == http.StatusUnauthorized || r.status == http.StatusForbidden):
				t.Errorf("%s: %d %s, want it allowed", what, r.status, r.body)
			case !allowed && r.status != http.StatusForbidden:
				t.Errorf("%s: %d %s, want 403 forbidden", what, r.status, r.body)
			case !allowed:
				if c.method != "HEAD" && (r.problem.Code != "forbidden" || r.problem.Detail == nil || *r.problem.Detail == "") {
					t.Errorf("%s: problem %s, want code forbidden with a detail naming the scope", what, r.body)
				}
				if after := b.snapshot(t); after != before {
					t.Errorf("%s was refused but changed the state:\nbefore %s\nafter  %s", what, before, after)
				}
			}
		}
	}
	// Every route of the authorisation table was tried.
	for route := range routeAccess {
		if route == "GET /healthz" || route == "GET /readyz" {
			continue
		}
		if !routes[route] {
			t.Errorf("route %s is in routeAccess but no case tries it", route)
		}
	}
}

// routeOf turns a concrete path of the cases into its route template.
func routeOf(path string) string {
	parts := strings.Split(path, "/")
	for i := range parts {
		switch {
		case i == 3 && parts[2] == "jobs":
			parts[i] = "{job}"
		case i == 5 && parts[4] == "checkpoints":
			parts[i] = "{id}"
		case i == 5 && parts[4] == "participants", i == 7 && (parts[6] == "votes" || parts[6] == "acks"):
			parts[i] = "{participant}"
		case i == 3 && parts[2] == "tokens":
			parts[i] = "{name}"
		case i == 2 && parts[1] == "problems":
			parts[i] = "{code}"
		}
	}
	method := strings.Join(parts, "/")
	return method
}

func testUnauthenticated(t *testing.T) {
	b := setupAuth(t)
	if _, _, err := b.svc.PutJob(context.Background(), "orders", coordinator.JobConfig{Participants: []string{"sink-a"},
		CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}); err != nil {
		t.Fatal(err)
	}
	valid := b.token(t, "sink-a", "orders", "sink-a", coordinator.ScopeParticipant)
	before := b.snapshot(t)
	forged := coordinator.NewTokenSecret() // well formed, never stored
	// The valid token with its last character changed (to another one).
	mangled := valid[:len(valid)-1] + "x"
	if valid[len(valid)-1] == 'x' {
		mangled = valid[:len(valid)-1] + "y"
	}
	for _, c := range []struct {
		name, authorization string
	}{
		{"no header", ""},
		{"another scheme", "Basic " + valid},
		{"no token", "Bearer "},
		{"two tokens", "Bearer " + valid + " " + valid},
		{"a token never created", "Bearer " + forged},
		{"a mangled token", "Bearer " + mangled},
		{"the admin token's prefix", "Bearer " + testAdminToken[:20]},
		{"a huge token", "Bearer " + strings.Repeat("a", 10000)},
	} {
		for _, path := range []string{"/v1/jobs/orders/participants/sink-a/register", "/v1/jobs", "/v1/nowhere", "/problems"} {
			method := "GET"
			if strings.HasSuffix(path, "register") {
				method = "POST"
			}
			var r reply
			if c.authorization == "" {
				r = b.send(t, "", method, path, "")
			} else {
				r = b.send(t, "", method, path, "", "Authorization", c.authorization)
			}
			if r.status != http.StatusUnauthorized || r.problem.Code != "unauthenticated" {
				t.Errorf("%s, %s %s: %d %s, want 401 unauthenticated", c.name, method, path, r.status, r.body)
			}
			if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s, %s %s: WWW-Authenticate %q, want Bearer", c.name, method, path, r.header.Get("WWW-Authenticate"))
			}
			if strings.Contains(string(r.body), valid) || strings.Contains(string(r.body), forged) || strings.Contains(string(r.body), testAdminToken[:20]) {
				t.Errorf("%s: the problem quotes the token: %s", c.name, r.body)
			}
		}
	}
	if after := b.snapshot(t); after != before {
		t.Errorf("unauthenticated requests changed the state:\nbefore %s\nafter  %s", before, after)
	}
	// The probes need no token.
	for _, path := range []string{"/healthz", "/readyz"} {
		if r := b.send(t, "", "GET", path, ""); r.status != http.StatusOK {
			t.Errorf("GET %s without a token: %d, want 200", path, r.status)
		}
	}
	// The scheme is case-insensitive (RFC 9110).
	if r := b.send(t, "", "POST", "/v1/jobs/orders/participants/sink-a/register", "", "Authorization", "bearer "+valid); r.status != http.StatusOK {
		t.Errorf("register with 'bearer <token>': %d %s, want 200", r.status, r.body)
	}
}

func testListsShowOnlyWhatTheTokenReads(t *testing.T) {
	b := setupAuth(t)
	ctx := context.Background()
	for _, job := range []string{"eu-orders", "eu-payments", "us-orders"} {
		if _, _, err := b.svc.PutJob(ctx, job, coordinator.JobConfig{Participants: []string{"a"},
			CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.svc.Prepare(ctx, job, coordinator.PrepareRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		secret string
		want   []string
	}{
		{b.token(t, "eu", "eu-*", "", coordinator.ScopeRead), []string{"eu-orders", "eu-payments"}},
		{b.token(t, "us-a", "us-orders", "a", coordinator.ScopeParticipant), []string{"us-orders"}},
		{b.token(t, "none", "asia-*", "", coordinator.ScopeOperator), nil},
		{testAdminToken, []string{"eu-orders", "eu-payments", "us-orders"}},
	} {
		var jobs JobList
		r := b.send(t, c.secret, "GET", "/v1/jobs", "")
		if err := json.Unmarshal(r.body, &jobs); err != nil || r.status != 200 {
			t.Fatalf("GET /v1/jobs: %d %s", r.status, r.body)
		}
		var names []string
		for _, j := range jobs.Items {
			names = append(names, j.Name)
		}
		if !slices.Equal(names, c.want) {
			t.Errorf("GET /v1/jobs shows %v, want %v", names, c.want)
		}
		var cps CheckpointList
		r = b.send(t, c.secret, "GET", "/v1/checkpoints", "")
		if err := json.Unmarshal(r.body, &cps); err != nil || r.status != 200 {
			t.Fatalf("GET /v1/checkpoints: %d %s", r.status, r.body)
		}
		names = nil
		for _, cp := range cps.Items {
			names = append(names, cp.Job)
		}
		if !slices.Equal(names, c.want) {
			t.Errorf("GET /v1/checkpoints shows checkpoints of %v, want %v", names, c.want)
		}
	}
}

func testForbiddenSaysNothingOfExistence(t *testing.T) {
	b := setupAuth(t)
	if _, _, err := b.svc.PutJob(context.Background(), "secret-job", coordinator.JobConfig{Participants: []string{"a"},
		CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}); err != nil {
		t.Fatal(err)
	}
	reader := b.token(t, "reader", "mine", "", coordinator.ScopeRead, coordinator.ScopeTrigger)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/jobs/%s"},
		{"GET", "/v1/jobs/%s/checkpoints/1"},
		{"POST", "/v1/jobs/%s/checkpoints"},
		{"PUT", "/v1/jobs/%s/checkpoints/1/votes/a"},
		{"DELETE", "/v1/jobs/%s"},
	} {
		exists := b.send(t, reader, c.method, fmt.Sprintf(c.path, "secret-job"), "")
		missing := b.send(t, reader, c.method, fmt.Sprintf(c.path, "no-such-job"), "")
		strip := func(r reply) string {
			return fmt.Sprintf("%d %s %s", r.status, r.problem.Code,
				strings.ReplaceAll(strings.ReplaceAll(deref(r.problem.Detail), "secret-job", "J"), "no-such-job", "J"))
		}
		if exists.status != http.StatusForbidden || strip(exists) != strip(missing) {
			t.Errorf("%s %s: a job that exists answers %q, one that does not %q; want the same 403", c.method, c.path, strip(exists), strip(missing))
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func testRevocationAndExpiry(t *testing.T) {
	b := setupAuth(t)
	secret := b.token(t, "reader", "*", "", coordinator.ScopeRead)
	if r := b.send(t, secret, "GET", "/v1/jobs", ""); r.status != 200 {
		t.Fatalf("GET /v1/jobs with a new token: %d %s", r.status, r.body)
	}
	// Revoked through the API, by the admin.
	if r := b.send(t, testAdminToken, "DELETE", "/v1/tokens/reader", ""); r.status != http.StatusNoContent {
		t.Fatalf("DELETE /v1/tokens/reader: %d %s", r.status, r.body)
	}
	if err := b.auth.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := b.send(t, secret, "GET", "/v1/jobs", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("GET /v1/jobs with a revoked token: %d %s, want 401", r.status, r.body)
	}
	if r := b.send(t, testAdminToken, "DELETE", "/v1/tokens/reader", ""); r.status != http.StatusNotFound {
		t.Fatalf("DELETE of a revoked token: %d %s, want 404", r.status, r.body)
	}
	// A token that expires.
	expires := time.Now().Add(1500 * time.Millisecond).UTC()
	r := b.send(t, testAdminToken, "POST", "/v1/tokens",
		fmt.Sprintf(`{"name":"brief","scopes":["read"],"job":"*","expires_at":%q}`, expires.Format(time.RFC3339Nano)))
	if r.status != http.StatusCreated {
		t.Fatalf("POST /v1/tokens: %d %s", r.status, r.body)
	}
	var created TokenCreated
	if err := json.Unmarshal(r.body, &created); err != nil {
		t.Fatal(err)
	}
	if err := coordinator.CheckTokenSecret(created.Token); err != nil || created.ExpiresAt == nil {
		t.Fatalf("created token %s: %v, expires %v", r.body, err, created.ExpiresAt)
	}
	if err := b.auth.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := b.send(t, created.Token, "GET", "/v1/jobs", ""); r.status != 200 {
		t.Fatalf("GET /v1/jobs before the token expires: %d %s", r.status, r.body)
	}
	time.Sleep(time.Until(expires) + 50*time.Millisecond)
	if r := b.send(t, created.Token, "GET", "/v1/jobs", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("GET /v1/jobs after the token expired: %d %s, want 401", r.status, r.body)
	}
	// The secret is shown once: the views never hold it, and the store keeps its digest only.
	for _, path := range []string{"/v1/tokens", "/v1/tokens/brief"} {
		if r := b.send(t, testAdminToken, "GET", path, ""); r.status != 200 || strings.Contains(string(r.body), created.Token) ||
			strings.Contains(string(r.body), `"token"`) {
			t.Errorf("GET %s: %d %s: want the views without the secret", path, r.status, r.body)
		}
	}
	if b.snapshot(t); strings.Contains(b.snapshot(t), created.Token) {
		t.Error("the store holds the secret")
	}
	// Tokens cannot be named admin, nor created twice.
	for _, body := range []string{`{"name":"admin","scopes":["read"],"job":"*"}`, `{"name":"brief","scopes":["read"],"job":"*"}`} {
		if r := b.send(t, testAdminToken, "POST", "/v1/tokens", body); r.status != http.StatusConflict || r.problem.Code != "token_exists" {
			t.Errorf("POST /v1/tokens %s: %d %s, want 409 token_exists", body, r.status, r.body)
		}
	}
	// An admin token need not name a job: it covers every job. Any other needs one.
	r = b.send(t, testAdminToken, "POST", "/v1/tokens", `{"name":"second-admin","scopes":["admin"]}`)
	var admin TokenCreated
	if err := json.Unmarshal(r.body, &admin); r.status != http.StatusCreated || err != nil || admin.Job != "*" {
		t.Fatalf("POST /v1/tokens of an admin without a job: %d %s, want 201 with job *", r.status, r.body)
	}
	if r := b.send(t, admin.Token, "GET", "/v1/tokens", ""); r.status != http.StatusOK {
		t.Errorf("the admin token without a job lists tokens: %d %s", r.status, r.body)
	}
	before := b.snapshot(t)
	if r := b.send(t, testAdminToken, "POST", "/v1/tokens", `{"name":"no-job","scopes":["read"]}`); r.status != http.StatusBadRequest ||
		r.problem.Code != "invalid_request" || !strings.Contains(string(r.body), "job") {
		t.Errorf("POST /v1/tokens of a reader without a job: %d %s, want 400 naming job", r.status, r.body)
	}
	if after := b.snapshot(t); after != before {
		t.Errorf("a refused token changed the state:\nbefore %s\nafter  %s", before, after)
	}
}

func testRevokedTokenEndsItsLongPoll(t *testing.T) {
	b := setupAuth(t)
	ctx := context.Background()
	if _, _, err := b.svc.PutJob(ctx, "orders", coordinator.JobConfig{Participants: []string{"a"},
		CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.svc.Prepare(ctx, "orders", coordinator.PrepareRequest{}); err != nil {
		t.Fatal(err)
	}
	secret := b.token(t, "watcher", "orders", "", coordinator.ScopeRead)
	done := make(chan reply, 1)
	start := time.Now()
	go func() { done <- b.send(t, secret, "GET", "/v1/jobs/orders/checkpoints/1?wait_ms=20000", "") }()
	time.Sleep(200 * time.Millisecond) // the long-poll is waiting
	if err := b.tokens.DeleteToken(ctx, "watcher", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.auth.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.status != http.StatusUnauthorized || r.problem.Code != "unauthenticated" {
			t.Fatalf("long-poll whose token was revoked: %d %s, want 401 unauthenticated", r.status, r.body)
		}
		if waited := time.Since(start); waited > 10*time.Second {
			t.Fatalf("the long-poll answered after %s, not when its token was revoked", waited)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the long-poll of a revoked token did not answer")
	}
}

func testDecidedByNamesTheToken(t *testing.T) {
	b := setupAuth(t)
	ctx := context.Background()
	if _, _, err := b.svc.PutJob(ctx, "orders", coordinator.JobConfig{Participants: []string{"a", "b"},
		CheckpointTimeout: time.Minute, MaxConcurrentCheckpoints: 1, AutoCommit: true}); err != nil {
		t.Fatal(err)
	}
	a := b.token(t, "sink-a-token", "orders", "a", coordinator.ScopeParticipant)
	bb := b.token(t, "sink-b-token", "orders", "b", coordinator.ScopeParticipant)
	trigger := b.token(t, "trigger-token", "orders", "", coordinator.ScopeTrigger)
	op := b.token(t, "operator-token", "orders", "", coordinator.ScopeOperator)
	for _, s := range []string{a, bb} {
		if r := b.send(t, s, "POST", "/v1/jobs/orders/participants/"+map[string]string{a: "a", bb: "b"}[s]+"/register", ""); r.status != 200 {
			t.Fatalf("register: %d %s", r.status, r.body)
		}
	}
	decided := func(id int64) (string, coordinator.Status) {
		cp, err := b.store.GetCheckpoint(ctx, "orders", id)
		if err != nil || cp == nil {
			t.Fatalf("checkpoint %d: %v", id, err)
		}
		return cp.DecidedBy, cp.Status
	}
	open := func() int64 {
		r := b.send(t, trigger, "POST", "/v1/jobs/orders/checkpoints", "")
		var cp Checkpoint
		if err := json.Unmarshal(r.body, &cp); err != nil || r.status != 201 {
			t.Fatalf("open: %d %s", r.status, r.body)
		}
		if cp.DecidedBy != nil {
			t.Fatalf("a preparing checkpoint shows decided_by %q", *cp.DecidedBy)
		}
		return cp.Id
	}
	// The last prepared vote decides.
	id := open()
	b.send(t, a, "PUT", fmt.Sprintf("/v1/jobs/orders/checkpoints/%d/votes/a", id), `{"epoch":1,"vote":"prepared"}`)
	r := b.send(t, bb, "PUT", fmt.Sprintf("/v1/jobs/orders/checkpoints/%d/votes/b", id), `{"epoch":1,"vote":"prepared"}`)
	var cp Checkpoint
	if err := json.Unmarshal(r.body, &cp); err != nil || cp.DecidedBy == nil || *cp.DecidedBy != "sink-b-token" {
		t.Fatalf("the last vote's answer: %s; want decided_by sink-b-token", r.body)
	}
	if by, st := decided(id); by != "sink-b-token" || st != coordinator.StatusCommitting {
		t.Fatalf("stored: decided_by %q, %s; want sink-b-token, committing", by, st)
	}
	for _, s := range []string{a, bb} {
		p := map[string]string{a: "a", bb: "b"}[s]
		b.send(t, s, "PUT", fmt.Sprintf("/v1/jobs/orders/checkpoints/%d/acks/%s", id, p), `{"epoch":1}`)
	}
	// An abort vote decides.
	id = open()
	b.send(t, a, "PUT", fmt.Sprintf("/v1/jobs/orders/checkpoints/%d/votes/a", id), `{"epoch":1,"vote":"abort","reason":"disk full"}`)
	if by, st := decided(id); by != "sink-a-token" || st != coordinator.StatusAborted {
		t.Fatalf("abort vote: decided_by %q, %s; want sink-a-token, aborted", by, st)
	}
	// An operator's abort.
	id = open()
	b.send(t, op, "POST", fmt.Sprintf("/v1/jobs/orders/checkpoints/%d/abort", id), `{"reason":"maintenance"}`)
	if by, st := decided(id); by != "operator-token" || st != coordinator.StatusAborted {
		t.Fatalf("operator abort: decided_by %q, %s; want operator-token, aborted", by, st)
	}
	// A registration before voting.
	id = open()
	b.send(t, a, "POST", "/v1/jobs/orders/participants/a/register", "")
	if by, st := decided(id); by != "sink-a-token" || st != coordinator.StatusAborted {
		t.Fatalf("registration: decided_by %q, %s; want sink-a-token, aborted", by, st)
	}
	// A deadline decides by nobody.
	r = b.send(t, trigger, "POST", "/v1/jobs/orders/checkpoints", `{"timeout_ms":100}`)
	if err := json.Unmarshal(r.body, &cp); err != nil || r.status != 201 {
		t.Fatalf("open: %d %s", r.status, r.body)
	}
	time.Sleep(150 * time.Millisecond)
	if _, err := b.svc.SweepExpired(ctx); err != nil {
		t.Fatal(err)
	}
	if by, st := decided(cp.Id); by != "" || st != coordinator.StatusAborted {
		t.Fatalf("deadline: decided_by %q, %s; want none, aborted", by, st)
	}
	// A participant token may veto only what expects it.
	c := b.token(t, "sink-c-token", "orders", "c", coordinator.ScopeParticipant)
	id = open()
	if r := b.send(t, c, "POST", fmt.Sprintf("/v1/jobs/orders/checkpoints/%d/abort", id), ""); r.status != http.StatusForbidden {
		t.Fatalf("abort by a participant the checkpoint does not expect: %d %s, want 403", r.status, r.body)
	}
	if _, st := decided(id); st != coordinator.StatusPreparing {
		t.Fatalf("a refused abort left the checkpoint %s", st)
	}
}

// TestRouteAccessMatchesSpec checks routeAccess against openapi.yaml: every operation is in
// the table and says in x-scopes which scopes allow it, the same words for the same access.
func TestRouteAccessMatchesSpec(t *testing.T) {
	t.Parallel()
	var spec struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	text, err := os.ReadFile("../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(text, &spec); err != nil {
		t.Fatal(err)
	}
	words := map[access]string{}
	operations := 0
	for path, item := range spec.Paths {
		for method, op := range item {
			if method == "parameters" {
				continue
			}
			operations++
			var fields struct {
				Scopes string `yaml:"x-scopes"`
			}
			if err := op.Decode(&fields); err != nil {
				t.Fatal(err)
			}
			route := strings.ToUpper(method) + " " + path
			need, ok := routeAccess[route]
			if !ok {
				t.Errorf("%s is not in routeAccess: every token would be refused", route)
				continue
			}
			if fields.Scopes == "" {
				t.Errorf("%s: no x-scopes in openapi.yaml", route)
			}
			if w, seen := words[need]; seen && w != fields.Scopes && need != accessReach {
				t.Errorf("%s: x-scopes %q, but another route of the same access says %q", route, fields.Scopes, w)
			}
			words[need] = fields.Scopes
		}
	}
	if operations != len(routeAccess) {
		t.Errorf("openapi.yaml has %d operations, routeAccess %d routes", operations, len(routeAccess))
	}
}

func TestFindAndSettleStuckCheckpoints(t *testing.T) { onEachStore(t, testFindAndSettle) }

// An operator finds a checkpoint that hangs by age, settles it with complete, and reads
// what it did in the audit; a reader may do none of the two.
func testFindAndSettle(t *testing.T) {
	b := setupAuth(t)
	op := b.token(t, "ops", "orders*", "", coordinator.ScopeOperator)
	a := b.token(t, "orders-a", "orders", "a", coordinator.ScopeParticipant)
	bb := b.token(t, "orders-b", "orders", "b", coordinator.ScopeParticipant)
	reader := b.token(t, "reader", "*", "", coordinator.ScopeRead)
	if r := b.send(t, op, "PUT", "/v1/jobs/orders", `{"participants":["a","b"]}`); r.status != 201 {
		t.Fatalf("PUT job: %d %s", r.status, r.body)
	}
	b.send(t, a, "POST", "/v1/jobs/orders/participants/a/register", "")
	b.send(t, bb, "POST", "/v1/jobs/orders/participants/b/register", "")
	b.send(t, op, "POST", "/v1/jobs/orders/checkpoints", "")
	b.send(t, a, "PUT", "/v1/jobs/orders/checkpoints/1/votes/a", `{"epoch":1,"vote":"prepared"}`)
	r := b.send(t, bb, "PUT", "/v1/jobs/orders/checkpoints/1/votes/b", `{"epoch":1,"vote":"prepared"}`)
	var cp Checkpoint
	if err := json.Unmarshal(r.body, &cp); err != nil || cp.DecisionCause == nil || *cp.DecisionCause != CauseAllPrepared ||
		cp.DecidedBy == nil || *cp.DecidedBy != "orders-b" {
		t.Fatalf("the deciding vote's answer: %s; want decision_cause all_prepared by orders-b", r.body)
	}
	b.send(t, a, "PUT", "/v1/jobs/orders/checkpoints/1/acks/a", `{"epoch":1}`)
	time.Sleep(300 * time.Millisecond)
	list := func(secret, query string) []string {
		t.Helper()
		r := b.send(t, secret, "GET", "/v1/checkpoints?"+query, "")
		var l CheckpointList
		if err := json.Unmarshal(r.body, &l); err != nil || r.status != 200 {
			t.Fatalf("GET /v1/checkpoints?%s: %d %s", query, r.status, r.body)
		}
		var out []string
		for _, c := range l.Items {
			out = append(out, fmt.Sprintf("%s/%d %s", c.Job, c.Id, c.Status))
		}
		return out
	}
	if got := list(op, "status=committing&older_than_ms=200"); !slices.Equal(got, []string{"orders/1 committing"}) {
		t.Fatalf("committing for over 200 ms: %v", got)
	}
	if got := list(op, "older_than_ms=60000"); len(got) != 0 {
		t.Fatalf("open for over a minute: %v, want none", got)
	}
	if got := list(op, "job=payments*"); len(got) != 0 {
		t.Fatalf("job=payments* with a token of orders*: %v, want none", got)
	}
	if got := list(reader, "job=orders"); !slices.Equal(got, []string{"orders/1 committing"}) {
		t.Fatalf("job=orders: %v", got)
	}
	if r := b.send(t, reader, "POST", "/v1/jobs/orders/checkpoints/1/complete", ""); r.status != http.StatusForbidden {
		t.Fatalf("complete with a read token: %d %s, want 403", r.status, r.body)
	}
	r = b.send(t, op, "POST", "/v1/jobs/orders/checkpoints/1/complete", `{"reason":"sink b was decommissioned"}`, "X-Request-Id", "settle-1")
	if err := json.Unmarshal(r.body, &cp); err != nil || r.status != 200 || cp.Status != Committed {
		t.Fatalf("complete: %d %s", r.status, r.body)
	}
	for _, p := range cp.Participants {
		want := map[string]string{"a": "a", "b": "ops"}[p.Name]
		if p.AckedBy == nil || *p.AckedBy != want {
			t.Errorf("participant %s acked_by %v, want %q", p.Name, p.AckedBy, want)
		}
	}
	if r := b.send(t, reader, "GET", "/v1/audit", ""); r.status != http.StatusForbidden {
		t.Fatalf("the audit with a read token: %d %s, want 403", r.status, r.body)
	}
	r = b.send(t, op, "GET", "/v1/audit?job=orders", "")
	var audit AuditList
	if err := json.Unmarshal(r.body, &audit); err != nil || r.status != 200 || len(audit.Items) != 2 {
		t.Fatalf("the audit: %d %s; want the completion and the job's creation", r.status, r.body)
	}
	e := audit.Items[0]
	if e.Action != AuditCheckpointCompleted || deref(e.Job) != "orders" || e.Checkpoint == nil || *e.Checkpoint != 1 ||
		deref(e.Token) != "ops" || deref(e.Reason) != "sink b was decommissioned" || deref(e.RequestId) != "settle-1" {
		t.Fatalf("the audit's newest entry: %s", r.body)
	}
	if audit.Items[1].Action != AuditJobCreated {
		t.Fatalf("the audit's second entry: %+v, want job_created", audit.Items[1])
	}
}

// TestTwoAuthorizationHeaders: a request with two Authorization headers is refused with
// 400, whichever tokens they carry (a proxy that adds its own must not decide which one
// counts), and changes nothing.
func TestTwoAuthorizationHeaders(t *testing.T) { onEachStore(t, testTwoAuthorizationHeaders) }

func testTwoAuthorizationHeaders(t *testing.T) {
	b := setupAuth(t)
	reader := b.token(t, "reader", "*", "", coordinator.ScopeRead)
	before := b.snapshot(t)
	for _, pair := range [][2]string{{testAdminToken, reader}, {reader, testAdminToken}, {testAdminToken, testAdminToken}} {
		req, err := http.NewRequest("PUT", b.url+"/v1/jobs/orders", strings.NewReader(`{"participants":["a"]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Add("Authorization", "Bearer "+pair[0])
		req.Header.Add("Authorization", "Bearer "+pair[1])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p Problem
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(raw, &p) != nil || p.Code != "invalid_request" {
			t.Errorf("two Authorization headers: %d %s, want 400 invalid_request", resp.StatusCode, raw)
		}
		if strings.Contains(string(raw), reader) || strings.Contains(string(raw), testAdminToken) {
			t.Errorf("the problem quotes a token: %s", raw)
		}
	}
	if after := b.snapshot(t); after != before {
		t.Errorf("a refused request changed the state:\nbefore %s\nafter  %s", before, after)
	}
}
