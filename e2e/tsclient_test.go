package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/twophase/coordinator/e2e/harness"
	"github.com/twophase/coordinator/store/pgtest"
)

// typescriptPackage is the TypeScript client's directory, its dependencies installed.
func typescriptPackage(t *testing.T) string { return harness.TypeScriptClient(t) }

// The TypeScript client (clients/typescript, @twophase/coordinator) passes its contract
// tests (node --test) against real coordinators on PostgreSQL: every operation, each
// problem code as its error class, retries through a coordinator's SIGKILL, a lost answer
// to openCheckpoint, TLS with a client certificate, tokens, and its Runner through restarts.
func TestTypeScriptClient(t *testing.T) {
	// Not parallel: the clients' suites load both cores, and the package's tests with
	// one-second bounds (revocation, expiry) run in parallel after the serial ones.
	f := startClientFixture(t) // first: under -short it skips the test
	dir := typescriptPackage(t)
	out := runClientTests(t, f, dir, regexp.MustCompile(`(?m)^# pass (\d+)`), 15, "node", "--test", "--test-concurrency=1", "test/")
	t.Logf("node --test:\n%s", lastLines(out, 10))
}

// The README's TypeScript participant (clients/typescript/examples/participant.mjs) runs
// as printed against a coordinator with its defaults but the address, commits checkpoints,
// and stops on SIGINT with exit status 0.
func TestTypeScriptExample(t *testing.T) {
	// Not parallel: the clients' suites load both cores, and the package's tests with
	// one-second bounds (revocation, expiry) run in parallel after the serial ones.
	coord := harness.StartCoordinator(t, pgtest.URL(t)) // first: under -short it skips the test
	dir := typescriptPackage(t)
	cmd := exec.Command("node", "examples/participant.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "COORDINATOR_URL="+coord.BaseURL)
	runExample(t, cmd, "committed 2 ")
}

// npm pack gives a tarball that installs into a fresh project (its dependencies from the
// registry or npm's cache, nothing built at install) and imports by name, with its types.
func TestTypeScriptPackageInstalls(t *testing.T) {
	// Not parallel: the clients' suites load both cores, and the package's tests with
	// one-second bounds (revocation, expiry) run in parallel after the serial ones.
	if testing.Short() {
		t.Skip("packs and installs a package")
	}
	dir := typescriptPackage(t)
	tmp := t.TempDir()
	pack := exec.Command("npm", "pack", "--pack-destination", tmp, "--loglevel=error")
	pack.Dir = dir
	out, err := pack.Output()
	if err != nil {
		t.Fatalf("npm pack: %v", err)
	}
	tarball := filepath.Join(tmp, lastLines(string(out), 1))
	project := filepath.Join(tmp, "project")
	if err := os.MkdirAll(project, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, "package.json"), []byte(`{"name":"fresh","private":true,"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"npm", "install", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error", tarball},
		{"node", "-e", `const m = await import("@twophase/coordinator"); ` +
			`if (typeof m.Coordinator !== "function" || typeof m.Runner !== "function" || !(new m.Fenced("x", 409) instanceof m.CoordinatorError)) process.exit(1); ` +
			`const fs = await import("node:fs"); if (!fs.existsSync("node_modules/@twophase/coordinator/dist/index.d.ts")) process.exit(2); ` +
			`if (fs.existsSync("node_modules/@twophase/coordinator/src")) process.exit(3); console.log("imported", Object.keys(m).length, "exports")`},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = project
		if args[0] == "node" {
			cmd.Args = append([]string{"node", "--input-type=module"}, args[1:]...)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", args[0]+" "+args[1], err, out)
		}
		t.Logf("%s", out)
	}
}
