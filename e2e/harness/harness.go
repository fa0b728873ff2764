// Package harness runs the coordinator the way users do, for end-to-end tests: the real
// binary as a process, against a real PostgreSQL cluster that the test owns and may crash.
//
// A test package that uses it calls Run from its TestMain, so that the binary built once
// for the whole test binary is removed at the end:
//
//	func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }
//
// Then, in a test:
//
//	cluster := harness.StartCluster(t)                 // initdb + postgres on a free loopback port
//	coord := harness.StartCoordinator(t, cluster.NewDatabase(t))
//	resp, err := coord.Client.GetHealthzWithResponse(ctx)
//	coord.Kill()                                       // SIGKILL
//	coord.Restart()                                    // same address, same flags
//	cluster.Crash()                                    // pg_ctl stop -m immediate
//	cluster.Start()
//
// StartPGProxy puts a TCP proxy between a coordinator and the cluster that can lose the
// answer to one COMMIT (PGProxy.ArmCommitLoss), for the tests of an unknown commit outcome.
//
// With authentication on (auth.go): AdminTokenFile writes an admin token for
// --admin-token-file (StartAuthCoordinator does it all); Coordinator.AdminToken holds it,
// CreateTokens makes tokens through the API as admin, CreateTokenCLI and TokenCommand
// through `coordinator token` on the database, and WithToken (Admin) returns clients like
// Client and HTTP that send a token, which Client and HTTP themselves never do.
//
// Everything listens on 127.0.0.1 only. Every process is stopped by t.Cleanup, also when
// the test fails, and is killed by the kernel (PR_SET_PDEATHSIG) if the test binary itself
// dies. When a test fails, the tail of each process's log is written to the test's log.
//
// Tests may run as root (CI does): initdb and postgres refuse root, so the harness runs
// them as the "postgres" user, which must exist then.
//
// Under go test -short, StartCluster, StartCoordinator and BuildCoordinator skip the test
// (t.Skip): nothing is built or started.
package harness

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/twophase/coordinator/store/pgtest"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildPath string
	buildErr  error
)

// Run runs the tests of m, then removes what the harness built for them. Call it from
// TestMain: os.Exit(harness.Run(m)).
func Run(m *testing.M) int {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	pgtest.DropTemplate() // of the tests that used the shared server (pgtest), if any
	return code
}

// BuildCoordinator builds ./cmd/coordinator of the module under test, once per test binary
// (later calls return the same path), and returns the path of the binary. It fails the test
// if the build fails, and skips it under -short.
func BuildCoordinator(t testing.TB) string {
	t.Helper()
	skipShort(t, "builds and runs the coordinator binary")
	buildOnce.Do(func() { buildPath, buildErr = build() })
	if buildErr != nil {
		t.Fatalf("harness: build the coordinator: %v", buildErr)
	}
	return buildPath
}

// skipShort skips the test under -short: what needs the harness is an end-to-end test.
func skipShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("harness: %s: skipped under -short", what)
	}
}

func build() (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	root, err := moduleRoot(goTool)
	if err != nil {
		return "", err
	}
	buildDir, err = os.MkdirTemp("", "coordinator-e2e-bin-")
	if err != nil {
		return "", err
	}
	// The directory must be searchable by the users the harness runs processes as.
	if err := os.Chmod(buildDir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(buildDir, "coordinator")
	cmd := exec.Command(goTool, "build", "-o", out, "./cmd/coordinator")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/coordinator in %s: %v\n%s", root, err, stderr.String())
	}
	return out, nil
}

// moduleRoot is the directory of the main module's go.mod, as the go command sees it from
// the test's working directory (the test's package directory).
func moduleRoot(goTool string) (string, error) {
	out, err := exec.Command(goTool, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module (go env GOMOD = %q)", gomod)
	}
	return filepath.Dir(gomod), nil
}

// tail is a bounded, concurrency-safe log of a process's output: the last lines only, so
// that a test that sends thousands of requests still prints a readable failure.
type tail struct {
	mu    sync.Mutex
	lines []string
	max   int
	drop  int
}

func newTail(max int) *tail { return &tail{max: max} }

func (l *tail) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	if len(l.lines) > l.max {
		n := len(l.lines) - l.max
		l.drop += n
		l.lines = append(l.lines[:0], l.lines[n:]...)
	}
}

func (l *tail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	if l.drop > 0 {
		fmt.Fprintf(&b, "(%d earlier lines not kept)\n", l.drop)
	}
	for _, line := range l.lines {
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

var (
	npmMu   sync.Mutex
	npmDone bool
)

// TypeScriptClient makes sure that node and npm are there and that the TypeScript client's
// dependencies are installed (npm ci, from its package-lock.json, once per test binary),
// and returns the client's directory (clients/typescript). It fails the test without them.
func TypeScriptClient(t testing.TB) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("harness: %s is required (Node 20 or later, for the TypeScript client): %v", tool, err)
		}
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	root, err := moduleRoot(goTool)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	dir := filepath.Join(root, "clients", "typescript")
	npmMu.Lock()
	defer npmMu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openapi-fetch")); err != nil && !npmDone {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("harness: npm ci in clients/typescript: %v\n%s", err, out)
		}
	}
	npmDone = true
	return dir
}

var (
	browserMu   sync.Mutex
	browserDone bool
)

// BrowserTests makes sure that node, npm and Debian's chromium are there and that the
// browser tests' dependencies are installed (npm ci in e2e/browser, once per test binary),
// and returns that directory and the browser's path. It fails the test without them.
func BrowserTests(t testing.TB) (dir, chromium string) {
	t.Helper()
	skipShort(t, "drives a browser")
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("harness: %s is required (Node 20 or later, for the browser tests): %v", tool, err)
		}
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("harness: chromium is required for the browser tests (Debian's package chromium; scripts/test-env installs it): %v", err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	root, err := moduleRoot(goTool)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	dir = filepath.Join(root, "e2e", "browser")
	browserMu.Lock()
	defer browserMu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core")); err != nil && !browserDone {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("harness: npm ci in e2e/browser: %v\n%s", err, out)
		}
	}
	browserDone = true
	return dir, chromium
}
