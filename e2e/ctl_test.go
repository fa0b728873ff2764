package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/e2e/harness"
	"github.com/twophase/coordinator/store/pgtest"
)

// TestCtlEndToEnd runs `coordinator ctl` as an operator would, as a process, against the
// coordinator binary on PostgreSQL with authentication on: find-stuck finds a checkpoint
// whose participant never acks (exit 1, naming it), complete settles it with a reason,
// find-stuck then finds nothing (exit 0), the audit shows the completion by the operator's
// token with its reason; a read-only token is refused (exit 3), a coordinator that is not
// there is exit 4; no token is in any output.
func TestCtlEndToEnd(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t) // first: under -short it skips the test
	c := harness.StartAuthCoordinator(t, dbURL)
	secrets := c.CreateTokens(t,
		harness.TokenSpec{Name: "oncall", Scopes: []string{"operator"}, Job: "orders*"},
		harness.TokenSpec{Name: "dashboard", Scopes: []string{"read"}})
	oncall, dashboard := secrets[0], secrets[1]
	secrets = append(secrets, c.AdminToken)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := coordinatorclient.NewCoordinator(c.BaseURL, coordinatorclient.Options{Token: c.AdminToken, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// orders-eu/1 committing: sink-a acked, sink-b never will.
	_, err = admin.PutJob(ctx, "orders-eu", coordinatorclient.JobConfig{Participants: []string{"sink-a", "sink-b"}})
	must(err)
	epochs := map[string]int64{}
	for _, p := range []string{"sink-a", "sink-b"} {
		r, err := admin.Register(ctx, "orders-eu", p)
		must(err)
		epochs[p] = r.Epoch
	}
	cp, err := admin.OpenCheckpoint(ctx, "orders-eu", "", 0)
	must(err)
	for _, p := range []string{"sink-a", "sink-b"} {
		raw := json.RawMessage(`[{"txn":"` + p + `-1"}]`)
		_, err = admin.Vote(ctx, "orders-eu", cp.Id, p, coordinatorclient.VoteRequest{Epoch: epochs[p], Vote: coordinatorclient.VoteKindPrepared, Committables: &raw})
		must(err)
	}
	_, err = admin.Ack(ctx, "orders-eu", cp.Id, "sink-a", epochs["sink-a"])
	must(err)
	id := strconv.FormatInt(cp.Id, 10)

	var outputs []string
	ctl := func(token string, args ...string) harness.Command {
		t.Helper()
		out := runCtl(t, c.BaseURL, token, args...)
		outputs = append(outputs, out.Stdout, out.Stderr)
		return out
	}
	want := func(out harness.Command, code int, subs ...string) {
		t.Helper()
		if out.Code != code {
			t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", out.Code, code, out.Stdout, out.Stderr)
		}
		for _, s := range subs {
			if !strings.Contains(out.Stdout+out.Stderr, s) {
				t.Errorf("output lacks %q:\nstdout:\n%s\nstderr:\n%s", s, out.Stdout, out.Stderr)
			}
		}
	}

	out := ctl(dashboard, "find-stuck", "--committing-for", "0s")
	want(out, 1, "orders-eu", "committing", "acks of sink-b")
	if strings.Contains(out.Stdout, "sink-a") {
		t.Errorf("find-stuck names sink-a, which acked:\n%s", out.Stdout)
	}
	want(ctl(dashboard, "complete", "orders-eu", id, "--reason", "x"), 3, "forbidden", "HTTP 403")
	want(ctl(oncall, "complete", "orders-eu", id, "--reason", "sink-b decommissioned (ticket OPS-7)"), 0,
		"committed", "acks settled by oncall for sink-b")
	want(ctl(dashboard, "find-stuck", "--committing-for", "0s"), 0, "nothing stuck")
	want(ctl(oncall, "checkpoint", "orders-eu", id), 0, "committed", "oncall")

	out = ctl(oncall, "-o", "json", "audit", "--job", "orders-eu")
	want(out, 0)
	var audit struct {
		Items []coordinatorclient.AuditEntry `json:"items"`
	}
	if err := json.Unmarshal([]byte(out.Stdout), &audit); err != nil {
		t.Fatalf("audit -o json: %v\n%s", err, out.Stdout)
	}
	found := false
	for _, e := range audit.Items {
		if e.Action == coordinatorclient.AuditCheckpointCompleted && e.Checkpoint != nil && *e.Checkpoint == cp.Id &&
			e.Token != nil && *e.Token == "oncall" && e.Reason != nil && *e.Reason == "sink-b decommissioned (ticket OPS-7)" {
			found = true
		}
	}
	if !found {
		t.Errorf("the audit lacks the completion by oncall with its reason:\n%s", out.Stdout)
	}
	want(ctl(oncall, "audit"), 0, "checkpoint_completed", "oncall", "sink-b decommissioned (ticket OPS-7)")

	// A coordinator that is not there.
	out = runCtl(t, "http://127.0.0.1:1", oncall, "checkpoints")
	outputs = append(outputs, out.Stdout, out.Stderr)
	want(out, 4, "connection refused")

	for _, o := range append(outputs, c.Logs()) {
		for _, s := range secrets {
			if strings.Contains(o, s) {
				t.Errorf("a token is in an output or the log:\n%s", strings.ReplaceAll(o, s, "<TOKEN>"))
			}
		}
	}
}

// runCtl runs `coordinator ctl args...` with COORDINATOR_URL and COORDINATOR_TOKEN in its
// environment (and no other COORDINATOR_ setting), and waits for it.
func runCtl(t *testing.T, url, token string, args ...string) harness.Command {
	t.Helper()
	bin := harness.BuildCoordinator(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"ctl"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COORDINATOR_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "COORDINATOR_URL="+url, "COORDINATOR_TOKEN="+token)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("run coordinator ctl %s: %v", strings.Join(args, " "), err)
		}
		code = exit.ExitCode()
	}
	t.Logf("coordinator ctl %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	return harness.Command{Stdout: stdout.String(), Stderr: stderr.String(), Code: code}
}
