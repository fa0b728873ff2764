package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
)

// Authentication (README, "Access control"): a coordinator started with an admin token
// (--admin-token-file) refuses every request without a valid token but the probes. The
// helpers here start one, make the tokens a test needs and give it clients that send
// them:
//
//	file, admin := harness.AdminTokenFile(t)
//	a := harness.StartCoordinator(t, dbURL, "--admin-token-file", file) // a.AdminToken == admin
//	b := harness.StartCoordinator(t, dbURL, "--admin-token-file", file) // the same database
//	secret := a.CreateToken(t, harness.TokenSpec{Name: "sink-a", Scopes: []string{"participant"}, Job: "j", Participant: "sink-a"})
//	resp, err := a.WithToken(secret).Client.GetJobWithResponse(ctx, "j")

// tokenAcceptTimeout bounds the wait for a coordinator to accept a token just created: it
// reads the tokens again within a second of a change (every 250 ms).
const tokenAcceptTimeout = 10 * time.Second

// AdminTokenFile writes a new random admin token (64 hex characters) to a file of its own
// in t.TempDir() (mode 0600) and returns the file's path, for --admin-token-file, and the
// token.
func AdminTokenFile(t testing.TB) (path, secret string) {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	secret = hex.EncodeToString(b)
	path = filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatalf("harness: write the admin token: %v", err)
	}
	return path, secret
}

// StartAuthCoordinator is StartCoordinator with authentication on: with a new admin
// token (AdminTokenFile) in --admin-token-file, which AdminToken then holds. Give a second
// coordinator on the same database the same admin token with
// StartCoordinator(t, dbURL, "--admin-token-file", file) instead.
func StartAuthCoordinator(t testing.TB, dbURL string, extraArgs ...string) *Coordinator {
	t.Helper()
	file, _ := AdminTokenFile(t)
	return StartCoordinator(t, dbURL, append([]string{"--admin-token-file", file}, extraArgs...)...)
}

// adminTokenOf reads the admin token from the file that args give --admin-token-file
// (as the coordinator does: without a trailing newline), "" if they give none.
func adminTokenOf(t testing.TB, args []string) string {
	t.Helper()
	file := ""
	for i, a := range args {
		a = "-" + strings.TrimLeft(a, "-")
		if a == "-admin-token-file" && i+1 < len(args) {
			file = args[i+1]
		} else if v, ok := strings.CutPrefix(a, "-admin-token-file="); ok {
			file = v
		}
	}
	if file == "" {
		return ""
	}
	b, err := os.ReadFile(file)
	if err != nil {
		// The coordinator will say so; the test may be about that.
		return ""
	}
	return strings.TrimRight(string(b), "\r\n")
}

// Clients are an HTTP client and the generated client on a coordinator's BaseURL that
// send one token on every request (Authorization: Bearer), like Coordinator.Client and
// Coordinator.HTTP, whose connections they share. A request that has an Authorization
// header of its own keeps it.
type Clients struct {
	// Client is the generated client, using HTTP.
	Client *coordinatorclient.ClientWithResponses
	// HTTP is for raw requests: 30 s timeout per request.
	HTTP *http.Client
	// Token is the secret the clients send.
	Token string
}

// WithToken returns clients on BaseURL that send secret as their bearer token; with ""
// they send none (Client and HTTP themselves). The address must be known (StartCoordinator
// returned, or WaitListening did).
func (c *Coordinator) WithToken(secret string) *Clients {
	c.t.Helper()
	if c.HTTP == nil {
		c.t.Fatalf("harness: WithToken before the coordinator's address is known")
	}
	if secret == "" {
		return &Clients{Client: c.Client, HTTP: c.HTTP}
	}
	hc := &http.Client{Timeout: c.HTTP.Timeout, Transport: &bearer{base: c.HTTP.Transport, header: "Bearer " + secret}}
	client, err := coordinatorclient.NewClientWithResponses(c.BaseURL, coordinatorclient.WithHTTPClient(hc))
	if err != nil {
		c.t.Fatalf("harness: client: %v", err)
	}
	return &Clients{Client: client, HTTP: hc, Token: secret}
}

// Admin returns clients that send the admin token. It fails the test when the coordinator
// has none.
func (c *Coordinator) Admin() *Clients {
	c.t.Helper()
	if c.AdminToken == "" {
		c.t.Fatalf("harness: the coordinator was started without an admin token (--admin-token-file)")
	}
	return c.WithToken(c.AdminToken)
}

// bearer sets the Authorization header of requests that have none.
type bearer struct {
	base   http.RoundTripper
	header string
}

func (b *bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") != "" {
		return b.base.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", b.header)
	return b.base.RoundTrip(r)
}

// TokenSpec is a token to create: what POST /v1/tokens and `coordinator token create`
// take. Job "" means "*".
type TokenSpec struct {
	Name        string
	Scopes      []string
	Job         string
	Participant string
	ExpiresAt   *time.Time
}

func (s TokenSpec) job() string {
	if s.Job == "" {
		return "*"
	}
	return s.Job
}

// CreateToken creates the token through POST /v1/tokens as admin, waits until the
// coordinator accepts it, and returns its secret.
func (c *Coordinator) CreateToken(t testing.TB, spec TokenSpec) string {
	t.Helper()
	return c.CreateTokens(t, spec)[0]
}

// CreateTokens creates the tokens through POST /v1/tokens as admin, then waits until the
// coordinator accepts every one (it reads tokens again every 250 ms), and returns their
// secrets in the order of specs. AwaitTokens waits for other coordinators on the database.
func (c *Coordinator) CreateTokens(t testing.TB, specs ...TokenSpec) []string {
	t.Helper()
	admin := c.Admin()
	secrets := make([]string, len(specs))
	for i, spec := range specs {
		body := map[string]any{"name": spec.Name, "scopes": spec.Scopes, "job": spec.job()}
		if spec.Participant != "" {
			body["participant"] = spec.Participant
		}
		if spec.ExpiresAt != nil {
			body["expires_at"] = spec.ExpiresAt.UTC().Format(time.RFC3339Nano)
		}
		status, out, err := doJSON(admin.HTTP, "POST", c.BaseURL+"/v1/tokens", body)
		if err != nil || status != http.StatusCreated {
			t.Fatalf("harness: create token %s: %d %s %v", spec.Name, status, out, err)
		}
		var created struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal(out, &created); err != nil || created.Token == "" {
			t.Fatalf("harness: create token %s: no secret in %d answer (%v)", spec.Name, status, err)
		}
		secrets[i] = created.Token
	}
	AwaitTokens(t, []*Coordinator{c}, secrets...)
	return secrets
}

// RevokeToken deletes the token named name through DELETE /v1/tokens/{name} as admin; it
// fails the test unless the answer is 204.
func (c *Coordinator) RevokeToken(t testing.TB, name string) {
	t.Helper()
	status, out, err := doJSON(c.Admin().HTTP, "DELETE", c.BaseURL+"/v1/tokens/"+url.PathEscape(name), nil)
	if err != nil || status != http.StatusNoContent {
		t.Fatalf("harness: revoke token %s: %d %s %v", name, status, out, err)
	}
}

// Accepts reports whether the coordinator accepts secret: GET /v1/info, which any valid
// token may read, answers 200 (401 when it does not; anything else is an error).
func (c *Coordinator) Accepts(secret string) (bool, error) {
	status, out, err := doJSON(c.WithToken(secret).HTTP, "GET", c.BaseURL+"/v1/info", nil)
	switch {
	case err != nil:
		return false, err
	case status == http.StatusOK:
		return true, nil
	case status == http.StatusUnauthorized:
		return false, nil
	}
	return false, fmt.Errorf("GET /v1/info: %d %s", status, out)
}

// AwaitTokens waits until every coordinator of coords accepts every secret, up to 10 s.
func AwaitTokens(t testing.TB, coords []*Coordinator, secrets ...string) {
	t.Helper()
	deadline := time.Now().Add(tokenAcceptTimeout)
	for _, c := range coords {
		for i, s := range secrets {
			for {
				ok, err := c.Accepts(s)
				if ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("harness: %s does not accept token %d of %d within %s of its creation (%v)",
						c.BaseURL, i+1, len(secrets), tokenAcceptTimeout, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}

func doJSON(hc *http.Client, method, u string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// Command is a run of the coordinator binary other than a server: its output and exit
// status.
type Command struct {
	Stdout, Stderr string
	Code           int
}

// RunCommand runs the coordinator binary (BuildCoordinator) with args, in the test's
// environment without COORDINATOR_ settings, and waits for it (at most a minute).
func RunCommand(t testing.TB, args ...string) Command {
	t.Helper()
	bin := BuildCoordinator(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = coordinatorEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = childAttr(nil)
	err := cmd.Run()
	code := 0
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("harness: run coordinator %s: %v", strings.Join(args, " "), err)
		}
		code = exit.ExitCode()
	}
	return Command{Stdout: stdout.String(), Stderr: stderr.String(), Code: code}
}

// TokenCommand runs `coordinator token --database-url dbURL args...` (create, list,
// revoke NAME: on the database directly, no coordinator involved). The flags come before
// the arguments: after `revoke NAME` they would be taken for more arguments.
func TokenCommand(t testing.TB, dbURL string, args ...string) Command {
	t.Helper()
	return RunCommand(t, append([]string{"token", "--database-url", dbURL}, args...)...)
}

// CreateTokenCLI creates the token with `coordinator token create` on the database and
// returns the secret it printed. The coordinators on the database accept it within a
// second (AwaitTokens).
func CreateTokenCLI(t testing.TB, dbURL string, spec TokenSpec) string {
	t.Helper()
	args := []string{"create", "--name", spec.Name, "--scopes", strings.Join(spec.Scopes, ","), "--job", spec.job()}
	if spec.Participant != "" {
		args = append(args, "--participant", spec.Participant)
	}
	if spec.ExpiresAt != nil {
		args = append(args, "--expires-in", time.Until(*spec.ExpiresAt).Round(time.Millisecond).String())
	}
	out := TokenCommand(t, dbURL, args...)
	if out.Code != 0 {
		t.Fatalf("harness: coordinator token create --name %s: status %d\nstdout: %s\nstderr: %s", spec.Name, out.Code, out.Stdout, out.Stderr)
	}
	secret := strings.TrimSpace(out.Stdout)
	if secret == "" || strings.ContainsAny(secret, " \n") {
		// Not quoted: it may hold the secret.
		t.Fatalf("harness: coordinator token create --name %s: stdout is not one secret (%d bytes)", spec.Name, len(out.Stdout))
	}
	return secret
}
