package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/twophase/coordinator/coordinator"
)

// coordinator token create|list|revoke on the embedded store of a data directory: the
// secret once on stdout, flags before or after the name, refusals with exit status 2.
func TestTokenCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"token"}, args...), nil, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, out, errOut := cmd("create", "--data-dir", dir, "--name", "sink-a", "--scopes", "participant", "--job", "orders", "--participant", "a")
	secret := strings.TrimSpace(out)
	if code != 0 || coordinator.CheckTokenSecret(secret) != nil {
		t.Fatalf("token create: %d %q %q", code, out, errOut)
	}
	code, out, _ = cmd("create", "--data-dir", dir, "--name", "ops", "--scopes", "operator,read", "--job", "orders-*", "--expires-in", "24h", "-o", "json")
	var created struct {
		Name, Job, Token string
		Scopes           []string
		ExpiresAt        *string `json:"expires_at"`
	}
	if err := json.Unmarshal([]byte(out), &created); code != 0 || err != nil || created.Job != "orders-*" || created.ExpiresAt == nil ||
		coordinator.CheckTokenSecret(created.Token) != nil || len(created.Scopes) != 2 {
		t.Fatalf("token create -o json: %d %q %v", code, out, err)
	}
	code, out, _ = cmd("list", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "sink-a") || !strings.Contains(out, "ops") || strings.Contains(out, secret) || strings.Contains(out, created.Token) {
		t.Fatalf("token list: %d\n%s", code, out)
	}
	for _, bad := range [][]string{
		{"create", "--data-dir", dir, "--name", "sink-a", "--scopes", "read"},   // the name is taken
		{"create", "--data-dir", dir, "--name", "admin", "--scopes", "read"},    // reserved
		{"create", "--data-dir", dir, "--name", "x", "--scopes", "root"},        // no such scope
		{"create", "--data-dir", dir, "--name", "p", "--scopes", "participant"}, // no participant
		{"revoke", "--data-dir", dir, "nobody"},                                 // no such token
		{"revoke", "--data-dir", dir},                                           // no name
		{"rotate", "--data-dir", dir},                                           // no such action
	} {
		if code, out, errOut := cmd(bad...); code != exitUsage || strings.Contains(out+errOut, secret) {
			t.Errorf("token %q: exit %d (%q %q), want %d and no secret", bad, code, out, errOut, exitUsage)
		}
	}
	// Flags after the name too.
	if code, out, errOut := cmd("revoke", "sink-a", "--data-dir", dir); code != 0 {
		t.Fatalf("token revoke NAME --data-dir: %d %q %q", code, out, errOut)
	}
	code, out, _ = cmd("list", "--data-dir", dir, "-o", "json")
	if code != 0 || strings.Contains(out, `"sink-a"`) || !strings.Contains(out, `"ops"`) {
		t.Fatalf("token list after revoke: %d %s", code, out)
	}
}
