package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twophase/coordinator/api"
	"github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/sqlite"
)

// ctlFixture is the real API, with authentication on, on the embedded store, served by
// httptest on 127.0.0.1, and every output of ctl the test saw.
type ctlFixture struct {
	url     string
	admin   string // the admin token
	auth    *coordinator.Authenticator
	tokens  coordinator.TokenStore
	coord   *coordinatorclient.Coordinator // as admin, to play the participants
	caFile  string                         // over HTTPS: the server's certificate
	secrets []string

	mu      sync.Mutex
	outputs []string
}

func setupCtl(t *testing.T) *ctlFixture { return setupCtlServer(t, false) }

// setupCtlServer is setupCtl, over HTTPS with a certificate of httptest's with tls; the
// fixture's caFile then holds that certificate.
func setupCtlServer(t *testing.T, tls bool) *ctlFixture {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, t.TempDir(), sqlite.Options{Migrate: true})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(store.Close)
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	f := &ctlFixture{admin: "ctl-test-admin-" + hex.EncodeToString(b), tokens: store}
	f.auth = coordinator.NewAuthenticator(f.tokens, f.admin, nil)
	if err := f.auth.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(api.NewHandler(coordinator.NewService(store, nil), api.Options{
		Logger: slog.New(slog.DiscardHandler), RequestTimeout: time.Minute,
		Auth: f.auth, Tokens: coordinator.NewTokens(f.tokens),
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes refused on purpose
	opts := coordinatorclient.Options{Token: f.admin, MaxAttempts: 1}
	if tls {
		srv.StartTLS()
		f.caFile = filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(f.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
			t.Fatal(err)
		}
		opts.RootCAs = x509.NewCertPool()
		opts.RootCAs.AddCert(srv.Certificate())
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	f.url = srv.URL
	f.secrets = append(f.secrets, f.admin)
	f.coord, err = coordinatorclient.NewCoordinator(f.url, opts)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// token creates a token and returns its secret.
func (f *ctlFixture) token(t *testing.T, name string, scopes ...coordinator.Scope) string {
	t.Helper()
	_, secret, err := coordinator.NewTokens(f.tokens).Create(context.Background(),
		coordinator.Token{Name: name, Scopes: scopes, Job: coordinator.AllJobs})
	if err != nil {
		t.Fatalf("create token %s: %v", name, err)
	}
	if err := f.auth.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.secrets = append(f.secrets, secret)
	return secret
}

type ctlResult struct {
	code           int
	stdout, stderr string
}

// ctl runs "coordinator ctl args..." with COORDINATOR_URL the fixture's and
// COORDINATOR_TOKEN secret (none when empty).
func (f *ctlFixture) ctl(t *testing.T, secret string, args ...string) ctlResult {
	t.Helper()
	environ := []string{"COORDINATOR_URL=" + f.url}
	if secret != "" {
		environ = append(environ, "COORDINATOR_TOKEN="+secret)
	}
	return f.ctlEnv(t, environ, args...)
}

func (f *ctlFixture) ctlEnv(t *testing.T, environ []string, args ...string) ctlResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"ctl"}, args...), environ, &stdout, &stderr)
	r := ctlResult{code, stdout.String(), stderr.String()}
	f.mu.Lock()
	f.outputs = append(f.outputs, r.stdout, r.stderr)
	f.mu.Unlock()
	t.Logf("ctl %s: exit %d\n%s%s", strings.Join(args, " "), code, r.stdout, r.stderr)
	return r
}

// want fails the test unless r exited with code and its stdout (stderr when the code is
// not 0 or 1) holds every one of subs.
func (r ctlResult) want(t *testing.T, code int, subs ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	out := r.stdout
	if code >= 2 {
		out = r.stderr
	}
	for _, s := range subs {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

// noSecrets fails the test if any output holds a token.
func (f *ctlFixture) noSecrets(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, out := range f.outputs {
		for _, s := range f.secrets {
			if strings.Contains(out, s) {
				t.Errorf("a token is in the output:\n%s", strings.ReplaceAll(out, s, "<TOKEN>"))
			}
		}
	}
}

// rows parses the table of stdout that starts at the line beginning with its first
// column's header: its rows, by column header, until an empty line.
func rows(t *testing.T, stdout, first string) []map[string]string {
	t.Helper()
	lines := strings.Split(stdout, "\n")
	for i, line := range lines {
		if !strings.HasPrefix(line, first+" ") {
			continue
		}
		var names []string
		var starts []int
		for j := 0; j < len(line); j++ {
			if line[j] != ' ' && (j == 0 || line[j-1] == ' ') {
				starts = append(starts, j)
				end := strings.IndexByte(line[j:], ' ')
				if end < 0 {
					end = len(line) - j
				}
				names = append(names, line[j:j+end])
			}
		}
		var out []map[string]string
		for _, l := range lines[i+1:] {
			if strings.TrimSpace(l) == "" {
				break
			}
			r := map[string]string{}
			runes := []rune(l)
			for k, name := range names {
				end := len(runes)
				if k+1 < len(starts) {
					end = min(starts[k+1], len(runes))
				}
				if starts[k] < len(runes) {
					r[name] = strings.TrimSpace(string(runes[starts[k]:end]))
				}
			}
			out = append(out, r)
		}
		return out
	}
	t.Fatalf("no table with %s in:\n%s", first, stdout)
	return nil
}

// row returns the row of the table (rows) whose first two columns are a and b.
func row(t *testing.T, stdout, first, second, a, b string) map[string]string {
	t.Helper()
	for _, r := range rows(t, stdout, first) {
		if r[first] == a && r[second] == b {
			return r
		}
	}
	t.Fatalf("no row %s %s in:\n%s", a, b, stdout)
	return nil
}

func prepared(epoch int64, ctlCommittables string) coordinatorclient.VoteRequest {
	raw := json.RawMessage(ctlCommittables)
	return coordinatorclient.VoteRequest{Epoch: epoch, Vote: coordinatorclient.VoteKindPrepared, Committables: &raw}
}

// TestCtlOperatorSession plays an operator's session on a real API: a checkpoint
// committing that one participant never acks, one preparing past its deadline, one
// waiting for a commit request; listing with filters, showing, pending, find-stuck
// (exit 1, naming who has not acked; exit 0 once settled), abort, commit and complete
// with reasons, the audit naming the token and reasons, a read-only token refused, JSON
// output, and no token ever printed.
func TestCtlOperatorSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setupCtl(t)
	ops := f.token(t, "ops", coordinator.ScopeOperator)
	viewer := f.token(t, "viewer", coordinator.ScopeRead)
	c := f.coord
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// orders/1 committing, sink-b never acks; orders/2 preparing, sink-a voted.
	_, err := c.PutJob(ctx, "orders", coordinatorclient.JobConfig{Participants: []string{"sink-a", "sink-b"}})
	must(err)
	ra, err := c.Register(ctx, "orders", "sink-a")
	must(err)
	rb, err := c.Register(ctx, "orders", "sink-b")
	must(err)
	cp1, err := c.OpenCheckpoint(ctx, "orders", "", 0)
	must(err)
	_, err = c.Vote(ctx, "orders", cp1.Id, "sink-a", prepared(ra.Epoch, `[{"txn":"a-1"}]`))
	must(err)
	_, err = c.Vote(ctx, "orders", cp1.Id, "sink-b", prepared(rb.Epoch, `[{"txn":"b-1","file":"/spool/orders/b-1.parquet.tmp"}]`))
	must(err)
	_, err = c.Ack(ctx, "orders", cp1.Id, "sink-a", ra.Epoch)
	must(err)
	cp2, err := c.OpenCheckpoint(ctx, "orders", "", 0)
	must(err)
	_, err = c.Vote(ctx, "orders", cp2.Id, "sink-a", prepared(ra.Epoch, `[{"txn":"a-2"}]`))
	must(err)
	// billing/1: preparing past its deadline (no sweeper runs here).
	_, err = c.PutJob(ctx, "billing", coordinatorclient.JobConfig{Participants: []string{"ledger"}})
	must(err)
	expired, err := c.OpenCheckpoint(ctx, "billing", "", 100*time.Millisecond)
	must(err)
	// manual/1: every vote prepared, waiting for a commit request.
	no := false
	_, err = c.PutJob(ctx, "manual", coordinatorclient.JobConfig{Participants: []string{"m1"}, AutoCommit: &no})
	must(err)
	rm, err := c.Register(ctx, "manual", "m1")
	must(err)
	manual, err := c.OpenCheckpoint(ctx, "manual", "", 0)
	must(err)
	_, err = c.Vote(ctx, "manual", manual.Id, "m1", prepared(rm.Epoch, `[]`))
	must(err)
	time.Sleep(150 * time.Millisecond) // billing's deadline passes

	id1, id2 := itoa(cp1.Id), itoa(cp2.Id)

	t.Run("checkpoints", func(t *testing.T) {
		r := f.ctl(t, viewer, "checkpoints")
		r.want(t, 0, "JOB", "STATUS", "AGE", "DEADLINE", "VOTES", "ACKS", "DECIDED_BY", "CAUSE")
		got := row(t, r.stdout, "JOB", "ID", "orders", id1)
		// The age is in whole seconds: 0s, or a few on a loaded machine.
		if age := got["AGE"]; !regexp.MustCompile(`^[0-9]s$`).MatchString(age) {
			t.Errorf("orders/%s is %q old, want a few seconds at most", id1, age)
		}
		delete(got, "AGE")
		if want := map[string]string{"JOB": "orders", "ID": id1, "STATUS": "committing", "DEADLINE": "-",
			"VOTES": "2/2", "ACKS": "1/2", "DECIDED_BY": "admin", "CAUSE": "all_prepared"}; !maps.Equal(got, want) {
			t.Errorf("orders/%s row = %q, want %q", id1, got, want)
		}
		got = row(t, r.stdout, "JOB", "ID", "orders", id2)
		if got["STATUS"] != "preparing" || !strings.HasPrefix(got["DEADLINE"], "in ") || got["VOTES"] != "1/2" || got["ACKS"] != "-" || got["CAUSE"] != "-" {
			t.Errorf("orders/%s row = %q: want preparing, a deadline to come, VOTES 1/2, ACKS -", id2, got)
		}
		if got := row(t, r.stdout, "JOB", "ID", "billing", itoa(expired.Id)); !strings.HasSuffix(got["DEADLINE"], " ago") || got["VOTES"] != "0/1" {
			t.Errorf("billing row = %q: want a deadline gone", got)
		}
		if n := strings.Count(r.stdout, "\n"); n != 5 {
			t.Errorf("%d lines, want a header and 4 open checkpoints", n)
		}

		r = f.ctl(t, viewer, "checkpoints", "--status", "committing")
		r.want(t, 0, "orders")
		if strings.Contains(r.stdout, "preparing") || strings.Contains(r.stdout, "billing") {
			t.Errorf("--status committing lists others:\n%s", r.stdout)
		}
		r = f.ctl(t, viewer, "checkpoints", "--job", "bill*")
		r.want(t, 0, "billing")
		if strings.Contains(r.stdout, "orders") {
			t.Errorf("--job bill* lists orders:\n%s", r.stdout)
		}
		f.ctl(t, viewer, "checkpoints", "--older-than", "1h").want(t, 0, "no checkpoints")

		r = f.ctl(t, viewer, "checkpoints", "--limit", "2")
		r.want(t, 0)
		if n := strings.Count(r.stdout, "\n"); n != 3 {
			t.Errorf("--limit 2: %d lines, want a header and 2", n)
		}
		if !strings.Contains(r.stderr, "raise --limit") {
			t.Errorf("--limit 2 does not say that more match: %q", r.stderr)
		}

		r = f.ctl(t, viewer, "-o", "json", "checkpoints", "--limit", "3")
		r.want(t, 0)
		var list struct {
			Items      []coordinatorclient.Checkpoint `json:"items"`
			NextCursor *string                        `json:"next_cursor"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Items) != 3 || list.NextCursor == nil {
			t.Errorf("-o json: %d items, next_cursor %v, error %v, want 3 items and a cursor:\n%s", len(list.Items), list.NextCursor, err, r.stdout)
		}
		r = f.ctl(t, viewer, "checkpoints", "--status", "all", "-o", "json")
		list.Items, list.NextCursor = nil, nil
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Items) != 4 || list.NextCursor != nil {
			t.Errorf("--status all: %d items, error %v, want 4", len(list.Items), err)
		}
	})

	t.Run("checkpoint", func(t *testing.T) {
		r := f.ctl(t, viewer, "checkpoint", "orders", id1)
		r.want(t, 0, "status:", "committing", "decision_cause:", "all_prepared", "decided_by:", "admin",
			"NAME", "VOTE", "EPOCH", "VOTED_AT", "ACKED_AT", "ACKED_BY", "COMMITTABLES", `[{"txn":"a-1"}]`, "…")
		if got := row(t, r.stdout, "NAME", "VOTE", "sink-b", "prepared"); got["ACKED_AT"] != "-" || got["ACKED_BY"] != "-" || got["EPOCH"] != "1" {
			t.Errorf("sink-b row = %q: want no ack", got)
		}
		if got := row(t, r.stdout, "NAME", "VOTE", "sink-a", "prepared"); got["ACKED_BY"] != "sink-a" || got["ACKED_AT"] == "-" {
			t.Errorf("sink-a row = %q: want acked by sink-a", got)
		}
		r = f.ctl(t, viewer, "checkpoint", "orders", id1, "-o", "json")
		var cp coordinatorclient.Checkpoint
		if err := json.Unmarshal([]byte(r.stdout), &cp); err != nil || cp.Id != cp1.Id || cp.Status != coordinatorclient.Committing {
			t.Errorf("-o json: %+v, %v", cp, err)
		}
		f.ctl(t, viewer, "checkpoint", "orders", "999").want(t, 3, "not_found", "HTTP 404")
	})

	t.Run("pending", func(t *testing.T) {
		r := f.ctl(t, viewer, "pending", "orders", "sink-b")
		r.want(t, 0, "participant sink-b of job orders", "CHECKPOINT", "ACTION", "commit", "vote")
		if got := row(t, r.stdout, "CHECKPOINT", "STATUS", id1, "committing"); got["ACTION"] != "commit" {
			t.Errorf("pending row %q: want commit", got)
		}
		f.ctl(t, viewer, "pending", "manual", "m1").want(t, 0, "nothing owed")
		r = f.ctl(t, viewer, "-o", "json", "pending", "orders", "sink-b")
		var p coordinatorclient.Pending
		if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || len(p.Items) != 2 {
			t.Errorf("-o json: %+v, %v", p, err)
		}
	})

	t.Run("find-stuck", func(t *testing.T) {
		r := f.ctl(t, viewer, "find-stuck", "--committing-for", "0s", "--grace", "0s")
		r.want(t, 1, "acks of sink-b", "ctl complete", "votes of ledger", "deadline passed")
		if got := rows(t, r.stdout, "JOB"); len(got) != 2 {
			t.Errorf("find-stuck lists %d checkpoints, want orders/%s and billing/%d", len(got), id1, expired.Id)
		}
		if got := row(t, r.stdout, "JOB", "ID", "orders", id1); got["WAITING_FOR"] != "acks of sink-b" || got["STATUS"] != "committing" {
			t.Errorf("orders row = %q", got)
		}
		if got := row(t, r.stdout, "JOB", "ID", "billing", itoa(expired.Id)); got["WAITING_FOR"] != "votes of ledger" {
			t.Errorf("billing row = %q", got)
		}
		// The default threshold (10m) and grace (5s): nothing here is that old.
		f.ctl(t, viewer, "find-stuck").want(t, 0, "nothing stuck")
		r = f.ctl(t, viewer, "find-stuck", "--committing-for", "0s", "--job", "orders", "-o", "json")
		r.want(t, 1)
		var out struct {
			Items []struct {
				Job        string          `json:"job"`
				ID         int64           `json:"id"`
				Stuck      string          `json:"stuck"`
				WaitingFor []string        `json:"waiting_for"`
				Checkpoint json.RawMessage `json:"checkpoint"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Items) != 1 ||
			out.Items[0].Stuck != "committing" || !slices.Equal(out.Items[0].WaitingFor, []string{"sink-b"}) || len(out.Items[0].Checkpoint) == 0 {
			t.Errorf("-o json: %+v, %v", out, err)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		r := f.ctl(t, viewer, "abort", "orders", id2, "--reason", "nope")
		r.want(t, 3, "forbidden", "HTTP 403", "request_id")
		f.ctl(t, "", "checkpoints").want(t, 3, "unauthenticated", "HTTP 401", "COORDINATOR_TOKEN")
		f.ctl(t, "tpc_"+strings.Repeat("a", 40), "checkpoints").want(t, 3, "unauthenticated")
		f.ctl(t, viewer, "audit").want(t, 3, "forbidden")
		f.ctl(t, ops, "commit", "orders", id2).want(t, 3, "votes_missing", "sink-b")
	})

	t.Run("decide", func(t *testing.T) {
		r := f.ctl(t, ops, "abort", "orders", id2, "--reason", "bad batch from upstream")
		r.want(t, 0, "checkpoint "+id2+" of job orders: aborted", "abort_request", "decided by ops", "bad batch from upstream")
		f.ctl(t, ops, "abort", "orders", id1).want(t, 3, "already_decided", "HTTP 409")
		r = f.ctl(t, ops, "commit", "manual", itoa(manual.Id), "--reason", "approved by on-call")
		r.want(t, 0, "committing", "commit_request", "decided by ops", "waiting for the acks of m1")
		r = f.ctl(t, ops, "-o", "json", "complete", "orders", id1, "--reason", "sink-b decommissioned")
		var cp coordinatorclient.Checkpoint
		if err := json.Unmarshal([]byte(r.stdout), &cp); err != nil || cp.Status != coordinatorclient.Committed {
			t.Fatalf("complete -o json: %+v, %v\n%s", cp, err, r.stdout)
		}
		// Repeating it changes nothing, and says who settled what.
		f.ctl(t, ops, "complete", "orders", id1).want(t, 0, "committed", "acks settled by ops for sink-b")
		f.ctl(t, viewer, "find-stuck", "--committing-for", "0s", "--job", "orders").want(t, 0, "nothing stuck")
	})

	t.Run("audit", func(t *testing.T) {
		r := f.ctl(t, ops, "audit")
		r.want(t, 0, "AT", "ACTION", "JOB", "CHECKPOINT", "TOKEN", "SUBJECT", "REASON", "REQUEST_ID")
		for _, w := range []struct{ action, job, id, reason string }{
			{"checkpoint_aborted", "orders", id2, "bad batch from upstream"},
			{"checkpoint_committed", "manual", itoa(manual.Id), "approved by on-call"},
			{"checkpoint_completed", "orders", id1, "sink-b decommissioned"},
		} {
			found := false
			for _, e := range rows(t, r.stdout, "AT") {
				if e["ACTION"] == w.action && e["JOB"] == w.job && e["CHECKPOINT"] == w.id && e["TOKEN"] == "ops" &&
					e["REASON"] == w.reason && e["REQUEST_ID"] != "-" {
					found = true
				}
			}
			if !found {
				t.Errorf("the audit lacks %s of %s/%s by ops with reason %q", w.action, w.job, w.id, w.reason)
			}
		}
		r = f.ctl(t, ops, "audit", "--job", "manual", "-o", "json")
		var list struct {
			Items []coordinatorclient.AuditEntry `json:"items"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Job == nil || *e.Job != "manual" {
				t.Errorf("--job manual lists %+v", e)
			}
		}
		if len(list.Items) != 2 { // job_created, checkpoint_committed
			t.Errorf("--job manual: %d entries, want 2: %s", len(list.Items), r.stdout)
		}
		r = f.ctl(t, ops, "audit", "--limit", "1")
		if n := strings.Count(r.stdout, "\n"); n != 2 || !strings.Contains(r.stderr, "raise --limit") {
			t.Errorf("--limit 1: %d lines, stderr %q", n, r.stderr)
		}
	})

	t.Run("token on the command line", func(t *testing.T) {
		// The flag wins over the twin, the URL flag too; neither is printed.
		r := f.ctlEnv(t, []string{"COORDINATOR_URL=http://127.0.0.1:1", "COORDINATOR_TOKEN=wrong"},
			"--url", f.url, "checkpoint", "--token", ops, "orders", id1)
		r.want(t, 0, "committed")
	})

	f.noSecrets(t)
}

// TestCtlOverTLS: an https:// coordinator whose certificate --ca-file trusts is
// reached; without --ca-file its certificate is refused (exit 4).
func TestCtlOverTLS(t *testing.T) {
	t.Parallel()
	f := setupCtlServer(t, true)
	ops := f.token(t, "ops", coordinator.ScopeOperator)
	if _, err := f.coord.PutJob(context.Background(), "orders", coordinatorclient.JobConfig{Participants: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.url, "https://") {
		t.Fatalf("url %s", f.url)
	}
	f.ctl(t, ops, "--ca-file", f.caFile, "audit").want(t, 0, "job_created", "orders")
	f.ctl(t, ops, "audit").want(t, 4, "certificate")
	f.noSecrets(t)
}

// TestCtlUnreachable: a coordinator that does not answer is exit 4, after a few attempts
// within --timeout; one that answers 503 or 500 is too, after 3 attempts, its problem
// printed.
func TestCtlUnreachable(t *testing.T) {
	t.Parallel()
	f := &ctlFixture{url: "http://127.0.0.1:1", secrets: []string{"tpc_secretsecretsecretsecretsecretsecret00"}}
	start := time.Now()
	r := f.ctl(t, f.secrets[0], "checkpoints")
	r.want(t, 4, "connection refused")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()
	start = time.Now()
	f.ctl(t, f.secrets[0], "--url", hang.URL, "--timeout", "300ms", "checkpoint", "j", "1").want(t, 4, "no answer within --timeout 300ms")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("--timeout 300ms took %s", d)
	}

	for _, status := range []int{503, 500} {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			if r.Header.Get("Authorization") != "Bearer "+f.secrets[0] {
				t.Errorf("Authorization = %q", r.Header.Get("Authorization"))
			}
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(status)
			code := map[int]string{503: "unavailable", 500: "internal"}[status]
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "/problems/" + code, "title": code, "status": status,
				"code": code, "detail": "the database cannot be reached; nothing of it was applied", "request_id": "r-1"})
		}))
		f.url = srv.URL
		f.ctl(t, f.secrets[0], "abort", "orders", "3").want(t, 4, "the database cannot be reached", "request_id r-1")
		if n := calls.Load(); n != ctlAttempts {
			t.Errorf("%d: %d attempts, want %d", status, n, ctlAttempts)
		}
		srv.Close()
	}
	// Something else than the coordinator answering: a 404 without a problem document.
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	f.url = srv.URL
	f.ctl(t, "", "audit").want(t, 3, "HTTP 404", "is --url right?")
	f.noSecrets(t)
}

// TestCtlUsage: help, and invalid command lines exit 2 without a request.
func TestCtlUsage(t *testing.T) {
	t.Parallel()
	f := &ctlFixture{url: "http://127.0.0.1:1"}
	for _, args := range [][]string{{"--help"}, {"help"}, {"abort", "--help"}, {"-h"}} {
		r := f.ctl(t, "", args...)
		r.want(t, 0, "Exit status:", "COORDINATOR_URL", "COORDINATOR_TOKEN", "find-stuck", "4  no answer")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "which command?"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"abort", "orders"}, "takes JOB ID"},
		{[]string{"abort", "orders", "x"}, "ID must be"},
		{[]string{"abort", "orders", "0"}, "ID must be"},
		{[]string{"pending", "orders", "bad name"}, "not a name"},
		{[]string{"checkpoints", "extra"}, "no arguments"},
		{[]string{"-o", "yaml", "checkpoints"}, "-o must be table or json"},
		{[]string{"checkpoints", "--status", "open"}, "--status takes"},
		{[]string{"checkpoints", "--job", "a*b"}, "--job must be"},
		{[]string{"checkpoints", "--limit", "0"}, "--limit must be"},
		{[]string{"checkpoints", "--older-than", "-1m"}, "--older-than must be"},
		{[]string{"checkpoints", "--reason", "x"}, "not defined"},
		{[]string{"checkpoints", "--newest"}, "--newest lists one job's checkpoints"},
		{[]string{"checkpoints", "--newest", "--job", "orders-*"}, "--newest lists one job's checkpoints"},
		{[]string{"checkpoints", "--newest", "--job", "orders", "--older-than", "1m"}, "does not go with --newest"},
		{[]string{"--url", "ftp://x", "audit"}, "--url"},
		{[]string{"--timeout", "0s", "audit"}, "--timeout must be positive"},
		{[]string{"--ca-file", "/nonexistent", "audit"}, "--ca-file is for an https://"},
		{[]string{"--url", "https://127.0.0.1:1", "--ca-file", "/nonexistent", "audit"}, "--ca-file"},
	} {
		r := f.ctl(t, "", c.args...)
		r.want(t, 2, c.want, "coordinator ctl --help")
	}
	// A token a header cannot carry: refused, and not shown.
	f.secrets = []string{"bad token"}
	f.ctl(t, "bad token", "audit").want(t, 2, "Token")
	f.noSecrets(t)
}

// TestCtlEnvironmentIsKnown: the server does not warn about ctl's settings.
func TestCtlEnvironmentIsKnown(t *testing.T) {
	t.Parallel()
	if got := unknownEnv([]string{"COORDINATOR_URL=http://x", "COORDINATOR_TOKEN=t", "COORDINATOR_TOKN=t"}); !slices.Equal(got, []string{"COORDINATOR_TOKN"}) {
		t.Errorf("unknown = %q, want only COORDINATOR_TOKN", got)
	}
}

func TestCtlShortDurations(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 0: "0s", 45 * time.Second: "45s", 12*time.Minute + 5*time.Second: "12m5s",
		10 * time.Minute: "10m", 3*time.Hour + 5*time.Minute: "3h5m", 3 * time.Hour: "3h", 51 * time.Hour: "2d3h",
	} {
		if got := ctlShort(d); got != want {
			t.Errorf("short(%s) = %q, want %q", d, got, want)
		}
	}
	if got := ctlClean("a\tb\nc\x1b[31md\u202e"); got != "a b c?[31md?" {
		t.Errorf("clean = %q", got)
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// A long history: checkpoints shows the oldest first and says how to go on; --cursor goes
// on; --newest shows the end of one job's history.
func TestCtlLongHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := setupCtl(t)
	viewer := f.token(t, "viewer", coordinator.ScopeRead)
	c := f.coord
	if _, err := c.PutJob(ctx, "long", coordinatorclient.JobConfig{Participants: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	reg, err := c.Register(ctx, "long", "a")
	if err != nil {
		t.Fatal(err)
	}
	for range 7 {
		cp, err := c.OpenCheckpoint(ctx, "long", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Vote(ctx, "long", cp.Id, "a", coordinatorclient.VoteRequest{Epoch: reg.Epoch, Vote: coordinatorclient.VoteKindAbort}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(stdout string) []string {
		var out []string
		for _, line := range strings.Split(strings.TrimSpace(stdout), "\n")[1:] {
			out = append(out, strings.Fields(line)[1])
		}
		return out
	}
	r := f.ctl(t, viewer, "checkpoints", "--status", "all", "--limit", "3")
	r.want(t, 0, "JOB")
	if got := ids(r.stdout); !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("the first 3: %q", got)
	}
	_, cursor, ok := strings.Cut(r.stderr, "--cursor ")
	if !ok {
		t.Fatalf("a cut list does not say how to go on: %q", r.stderr)
	}
	cursor = strings.TrimSpace(cursor)
	r = f.ctl(t, viewer, "checkpoints", "--status", "all", "--limit", "3", "--cursor", cursor)
	if got := ids(r.stdout); !slices.Equal(got, []string{"4", "5", "6"}) {
		t.Fatalf("the next 3 from the cursor: %q (%s)", got, r.stderr)
	}
	r = f.ctl(t, viewer, "checkpoints", "--newest", "--job", "long", "--limit", "2")
	r.want(t, 0, "JOB")
	if got := ids(r.stdout); !slices.Equal(got, []string{"7", "6"}) {
		t.Fatalf("the newest 2: %q (%s)", got, r.stderr)
	}
}
