package e2e_test

import (
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/twophase/coordinator/e2e/harness"
)

// credentials are the tokens of a test that runs with authentication on, as a deployment
// would hand them out: each participant of each job its own participant token (job = its
// job, participant = its name), one trigger token, one operator token and one read token
// on every job, and the admin token the coordinators were started with.
type credentials struct {
	admin, operator, trigger, read string
	// participants: job + "/" + participant -> secret.
	participants map[string]string
	// names: secret -> token name, as decided_by shows it.
	names map[string]string
}

// Token names of the roles; a participant's token is named <job>.<participant>.
const (
	operatorToken = "e2e-operator"
	triggerToken  = "e2e-trigger"
	readToken     = "e2e-read"
)

func participantTokenName(job, p string) string { return job + "." + p }

// newCredentials creates, through c as admin, the tokens of the roles and one participant
// token per participant of jobs (job -> its participants), and waits until c and every
// coordinator of others accept them all.
func newCredentials(t testing.TB, c *harness.Coordinator, jobs map[string][]string, others ...*harness.Coordinator) *credentials {
	t.Helper()
	cr := &credentials{admin: c.AdminToken, participants: map[string]string{}, names: map[string]string{}}
	specs := []harness.TokenSpec{
		{Name: operatorToken, Scopes: []string{"operator"}},
		{Name: triggerToken, Scopes: []string{"trigger"}},
		{Name: readToken, Scopes: []string{"read"}},
	}
	var keys []string
	for job, ps := range jobs {
		for _, p := range ps {
			keys = append(keys, job+"/"+p)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		job, p, _ := strings.Cut(k, "/")
		specs = append(specs, harness.TokenSpec{Name: participantTokenName(job, p), Scopes: []string{"participant"}, Job: job, Participant: p})
	}
	secrets := c.CreateTokens(t, specs...)
	harness.AwaitTokens(t, others, secrets...)
	cr.operator, cr.trigger, cr.read = secrets[0], secrets[1], secrets[2]
	for i, k := range keys {
		cr.participants[k] = secrets[3+i]
	}
	for i, spec := range specs {
		cr.names[secrets[i]] = spec.Name
	}
	cr.names[cr.admin] = "admin"
	return cr
}

// api returns an api on c that sends each request with the token of its route.
func (cr *credentials) api(c *harness.Coordinator) *api {
	return &api{base: c.BaseURL, hc: c.HTTP, cred: cr}
}

// participant is the secret of p's participant token in job, "" if it has none.
func (cr *credentials) participant(job, p string) string { return cr.participants[job+"/"+p] }

// secrets lists every secret, the admin token's included.
func (cr *credentials) secrets() map[string]string {
	out := map[string]string{}
	for s, name := range cr.names {
		out[name] = s
	}
	return out
}

// forRoute is the token a request of method on path (a query may follow) is sent with:
// the participant's own for what a participant does (register, pending, votes, acks),
// the trigger's to open a checkpoint, the operator's to change a job or decide by hand,
// the read token for every other GET, the admin's for tokens, none for the probes. On a
// nil credentials it is "" (authentication off).
func (cr *credentials) forRoute(method, path string) string {
	if cr == nil {
		return ""
	}
	path, _, _ = strings.Cut(path, "?")
	seg := strings.Split(strings.Trim(path, "/"), "/")
	for i, s := range seg {
		if u, err := url.PathUnescape(s); err == nil {
			seg[i] = u
		}
	}
	switch {
	case path == "/healthz" || path == "/readyz":
		return ""
	case len(seg) >= 2 && seg[0] == "v1" && seg[1] == "tokens":
		return cr.admin
	case len(seg) < 3 || seg[0] != "v1" || seg[1] != "jobs":
		return cr.read // /v1/jobs, /v1/checkpoints, /v1/info, /problems
	}
	job := seg[2]
	switch {
	case len(seg) == 3: // /v1/jobs/{job}
		if method == http.MethodGet || method == http.MethodHead {
			return cr.read
		}
		return cr.operator
	case len(seg) == 6 && seg[3] == "participants": // .../participants/{p}/register|pending
		return cr.participant(job, seg[4])
	case len(seg) == 7 && (seg[5] == "votes" || seg[5] == "acks"): // .../checkpoints/{id}/votes/{p}
		return cr.participant(job, seg[6])
	case len(seg) == 6 && (seg[5] == "commit" || seg[5] == "abort"):
		return cr.operator
	case len(seg) == 4 && method == http.MethodPost: // POST .../checkpoints
		return cr.trigger
	}
	return cr.read
}

// checkDecidedBy checks who decided each decided checkpoint of cps (decided_by): a commit
// the last prepared vote of a participant (its own token) or the operator's commit; an
// abort a participant (an abort vote, a registration), the operator, or nobody (a deadline,
// and what it cascaded to). A token of another job's participant never decides.
func checkDecidedBy(t testing.TB, cr *credentials, job string, cps []checkpoint) {
	t.Helper()
	if cr == nil {
		return
	}
	participants := map[string]bool{}
	for k := range cr.participants {
		if j, p, _ := strings.Cut(k, "/"); j == job {
			participants[participantTokenName(j, p)] = true
		}
	}
	counts := map[string]int{}
	for _, cp := range cps {
		by := ""
		if cp.DecidedBy != nil {
			by = *cp.DecidedBy
		}
		switch decisionOf(cp.Status) {
		case "":
			if by != "" {
				t.Errorf("%s/%d is %s, decided by %q", job, cp.Id, cp.Status, by)
			}
		case "commit":
			if !participants[by] && by != operatorToken {
				t.Errorf("%s/%d committed (%s), decided by %q: neither a participant of the job nor the operator", job, cp.Id, cp.Status, by)
			}
		case "abort":
			if by != "" && !participants[by] && by != operatorToken {
				t.Errorf("%s/%d aborted (%v), decided by %q: neither a participant of the job, the operator nor a deadline", job, cp.Id, cp.AbortReason, by)
			}
		}
		if decisionOf(cp.Status) != "" {
			if by == "" {
				by = "(deadline)"
			}
			counts[string(decisionOf(cp.Status))+" by "+by]++
		}
	}
	t.Logf("%s decided: %v", job, counts)
}

// checkNoSecrets fails the test if any of the secrets (name -> secret) appears in text,
// which is what where names (a log, a table). The secret itself is never printed.
func checkNoSecrets(t testing.TB, where, text string, secrets map[string]string) {
	t.Helper()
	if text == "" {
		t.Errorf("%s is empty: nothing to look for secrets in", where)
	}
	for name, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			t.Errorf("the secret of token %s appears in %s", name, where)
		}
	}
}

// TestCredentialsForRoute checks the token each route is sent with (no process needed).
func TestCredentialsForRoute(t *testing.T) {
	cr := &credentials{admin: "A", operator: "O", trigger: "T", read: "R",
		participants: map[string]string{"j/p": "P", "j x/q": "Q"}}
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/healthz", ""},
		{"GET", "/readyz", ""},
		{"GET", "/v1/info", "R"},
		{"GET", "/v1/jobs?limit=5", "R"},
		{"GET", "/v1/checkpoints?status=preparing", "R"},
		{"POST", "/v1/tokens", "A"},
		{"DELETE", "/v1/tokens/x", "A"},
		{"PUT", "/v1/jobs/j", "O"},
		{"DELETE", "/v1/jobs/j", "O"},
		{"GET", "/v1/jobs/j", "R"},
		{"POST", "/v1/jobs/j/participants/p/register", "P"},
		{"GET", "/v1/jobs/j/participants/p/pending", "P"},
		{"POST", "/v1/jobs/j%20x/participants/q/register", "Q"},
		{"POST", "/v1/jobs/j/participants/other/register", ""},
		{"POST", "/v1/jobs/j/checkpoints", "T"},
		{"GET", "/v1/jobs/j/checkpoints?status=preparing", "R"},
		{"GET", "/v1/jobs/j/checkpoints/3?wait_ms=100", "R"},
		{"PUT", "/v1/jobs/j/checkpoints/3/votes/p", "P"},
		{"PUT", "/v1/jobs/j/checkpoints/3/acks/p", "P"},
		{"POST", "/v1/jobs/j/checkpoints/3/commit", "O"},
		{"POST", "/v1/jobs/j/checkpoints/3/abort", "O"},
	} {
		if got := cr.forRoute(tc.method, tc.path); got != tc.want {
			t.Errorf("%s %s: token %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
	if got := (*credentials)(nil).forRoute("GET", "/v1/jobs"); got != "" {
		t.Errorf("without credentials: %q", got)
	}
}
