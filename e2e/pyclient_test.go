package e2e_test

import (
	"os/exec"
	"regexp"
	"testing"
)

// The Python client (clients/python, package twophase) passes its contract tests
// (clients/python/tests, python3 -m unittest) against real coordinators on PostgreSQL:
// every operation, each problem code as its exception, retries through a coordinator's
// SIGKILL, a lost answer to open_checkpoint, TLS with a client certificate, tokens, and
// its Runner through restarts. python3 must be installed: without it the test fails.
func TestPythonClient(t *testing.T) {
	t.Parallel()
	f := startClientFixture(t) // first: under -short it skips the test
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("python3 is required for the Python client's tests: %v", err)
	}
	out := runClientTests(t, f, "../clients/python", regexp.MustCompile(`Ran (\d+) tests?`), 15,
		"python3", "-W", "ignore::ResourceWarning", "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	t.Logf("python3 -m unittest:\n%s", out)
}
