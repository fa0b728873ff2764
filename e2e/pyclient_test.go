package e2e_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twophase/coordinator/e2e/harness"
	"github.com/twophase/coordinator/store/pgtest"
)

// The Python client (clients/python, package twophase) passes its contract tests
// (clients/python/tests, python3 -m unittest) against real coordinators on PostgreSQL:
// every operation, each problem code as its exception, retries through a coordinator's
// SIGKILL, a lost answer to open_checkpoint, TLS with a client certificate, tokens, and
// its Runner through restarts. python3 must be installed: without it the test fails.
func TestPythonClient(t *testing.T) {
	// Not parallel: the clients' suites load both cores, and the package's tests with
	// one-second bounds (revocation, expiry) run in parallel after the serial ones.
	f := startClientFixture(t) // first: under -short it skips the test
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("python3 is required for the Python client's tests: %v", err)
	}
	out := runClientTests(t, f, "../clients/python", regexp.MustCompile(`Ran (\d+) tests?`), 15,
		"python3", "-W", "ignore::ResourceWarning", "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	t.Logf("python3 -m unittest:\n%s", out)
}

// The README's Python participant (clients/python/examples/participant.py) runs as
// printed against a coordinator with its defaults but the address, commits checkpoints,
// and stops on SIGINT with exit status 0.
func TestPythonExample(t *testing.T) {
	// Not parallel: the clients' suites load both cores, and the package's tests with
	// one-second bounds (revocation, expiry) run in parallel after the serial ones.
	coord := harness.StartCoordinator(t, pgtest.URL(t)) // first: under -short it skips the test
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("python3 is required for the Python example: %v", err)
	}
	cmd := exec.Command("python3", "examples/participant.py")
	cmd.Dir = "../clients/python"
	cmd.Env = append(os.Environ(), "COORDINATOR_URL="+coord.BaseURL, "PYTHONPATH=.")
	runExample(t, cmd, "committed 2 ")
}

// runExample runs an example participant until its output holds want (its second
// commit, say), then interrupts it and expects exit status 0 within 10 s.
func runExample(t *testing.T, cmd *exec.Cmd, want string) {
	t.Helper()
	var out lockedOutput
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), want) {
		select {
		case err := <-exited:
			t.Fatalf("the example exited (%v) before printing %q:\n%s", err, want, out.String())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("the example did not print %q within 30 s:\n%s", want, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("after SIGINT the example exited with %v, want 0:\n%s", err, out.String())
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("the example did not exit within 10 s of SIGINT:\n%s", out.String())
	}
	t.Logf("the example's output:\n%s", out.String())
}

// lockedOutput collects a process's output for reading while it runs.
type lockedOutput struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *lockedOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *lockedOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// The package installs with pip from Debian's setuptools (pip install --no-build-isolation,
// into a virtual environment that sees the system's packages) and imports by name from
// outside the source tree, its py.typed marker included.
func TestPythonPackageInstalls(t *testing.T) {
	// Not parallel: the clients' suites load both cores, and the package's tests with
	// one-second bounds (revocation, expiry) run in parallel after the serial ones.
	if testing.Short() {
		t.Skip("installs a package")
	}
	python := "/usr/bin/python3" // Debian's, with Debian's setuptools and wheel
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("Debian's python3 is required (with python3-setuptools, python3-wheel and python3-venv): %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if out, err := exec.Command("cp", "-r", "../clients/python", src).CombinedOutput(); err != nil {
		t.Fatalf("copy the package: %v\n%s", err, out)
	}
	venv := filepath.Join(dir, "venv")
	for _, args := range [][]string{
		{python, "-m", "venv", "--system-site-packages", venv},
		{filepath.Join(venv, "bin", "pip"), "install", "--no-build-isolation", "--no-index", "--disable-pip-version-check", src},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	check := exec.Command(filepath.Join(venv, "bin", "python"), "-c",
		`import importlib.resources, twophase; print(twophase.__file__); `+
			`assert importlib.resources.files("twophase").joinpath("py.typed").is_file(); `+
			`assert "site-packages" in twophase.__file__; print(twophase.Runner, twophase.Fenced)`)
	check.Dir = dir
	out, err := check.CombinedOutput()
	if err != nil {
		t.Fatalf("import the installed package: %v\n%s", err, out)
	}
	t.Logf("installed and imported: %s", out)
}

// The package keeps to Python 3.9: its tests run on the oldest Python found (3.9 where
// pyenv or the system has one), and every file parses with the 3.9 grammar.
func TestPythonClientOnTheOldestPython(t *testing.T) {
	// Not parallel: the clients' suites load both cores, and the package's tests with
	// one-second bounds (revocation, expiry) run in parallel after the serial ones.
	f := startClientFixture(t) // first: under -short it skips the test
	files, _ := filepath.Glob("../clients/python/twophase/*.py")
	tests, _ := filepath.Glob("../clients/python/tests/*.py")
	for _, file := range append(files, tests...) {
		out, err := exec.Command("python3", "-c",
			"import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1], feature_version=(3, 9))", file).CombinedOutput()
		if err != nil {
			t.Errorf("%s does not parse as Python 3.9: %v\n%s", file, err, out)
		}
	}
	old := oldestPython()
	if old == "" {
		t.Logf("no Python 3.9 on this machine: the 3.9 grammar was checked, the tests ran on python3 in TestPythonClient")
		return
	}
	out := runClientTests(t, f, "../clients/python", regexp.MustCompile(`Ran (\d+) tests?`), 15,
		old, "-W", "ignore::ResourceWarning", "-m", "unittest", "discover", "-s", "tests", "-t", ".")
	t.Logf("%s -m unittest:\n%s", old, lastLines(out, 4))
}

// oldestPython finds a Python 3.9 interpreter that runs: pyenv's, or python3.9 on PATH.
func oldestPython() string {
	home, _ := os.UserHomeDir()
	candidates, _ := filepath.Glob(filepath.Join(home, ".pyenv", "versions", "3.9*", "bin", "python3.9"))
	if p, err := exec.LookPath("python3.9"); err == nil {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		if exec.Command(p, "-c", "import sys; assert sys.version_info[:2] == (3, 9)").Run() == nil {
			return p
		}
	}
	return ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
