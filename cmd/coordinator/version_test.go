package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionOf(t *testing.T) {
	t.Parallel()
	vcs := func(revision, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: revision},
			{Key: "vcs.time", Value: "2026-12-01T10:52:09Z"}, {Key: "vcs.modified", Value: modified}}
	}
	const revision = "d492756724d780d6d7fd24b8c9d8defd5f4378d0"
	tests := []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"no build info", nil, false, "devel"},
		{"go install at a tag", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, true, "v1.2.3"},
		{"go build in a clone: pseudo-version wins over the commit",
			&debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201105209-d492756724d7+dirty"}, Settings: vcs(revision, "true")},
			true, "v0.0.0-20261201105209-d492756724d7+dirty"},
		{"commit only", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(revision, "false")}, true, "d492756724d7"},
		{"commit with uncommitted changes", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(revision, "true")}, true, "d492756724d7-dirty"},
		{"short commit", &debug.BuildInfo{Settings: vcs("abc123", "false")}, true, "abc123"},
		{"no version, no commit (go run, -buildvcs=false)", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true, "devel"},
	}
	for _, tt := range tests {
		if got := versionOf(tt.info, tt.ok); got != tt.want {
			t.Errorf("%s: version %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestVersionCommand(t *testing.T) {
	t.Parallel()
	want := "coordinator " + buildVersion() + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, []string{"COORDINATOR_LISTEN=not a port"}, &stdout, &stderr)
		if code != exitOK || stdout.String() != want || stderr.Len() > 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 0 and %q", args, code, stdout.String(), stderr.String(), want)
		}
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"version", "--json"}, nil, &stdout, &stderr)
	if code != exitUsage || stdout.Len() > 0 || !strings.Contains(stderr.String(), `unexpected argument "--json"`) {
		t.Errorf("version --json: exit %d, stdout %q, stderr %q; want exit %d naming the argument", code, stdout.String(), stderr.String(), exitUsage)
	}
}

// A version set at link time, as the Dockerfile sets it, is the one reported.
func TestLinkedVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: skipped under -short")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "coordinator")
	build := exec.Command("go", "build", "-ldflags", "-X main.linkedVersion=v9.8.7-test", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "coordinator v9.8.7-test ") {
		t.Fatalf("--version of a build linked with a version: %q, %v", out, err)
	}
}
