package model

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The properties of coordinator.pml, each with the guards whose removal must make it
// fail. Liveness properties are checked for acceptance cycles (pan -a); the others are
// safety properties, checked with pan built for safety only, which is faster.
var properties = []struct {
	name     string
	liveness bool
	breaks   []string
}{
	{name: "one_decision", breaks: []string{"BREAK_ONE_DECISION", "BREAK_LOCK"}},
	{name: "unanimity", breaks: []string{"BREAK_UNANIMITY"}},
	{name: "fencing", breaks: []string{"BREAK_FENCING"}},
	{name: "exact_deadlines", breaks: []string{"BREAK_DEADLINE"}},
	{name: "owed_not_forgotten", liveness: true, breaks: []string{"BREAK_ACKS", "BREAK_PENDING"}},
	{name: "commit_order", breaks: []string{"BREAK_ORDER", "BREAK_CASCADE"}},
	{name: "owed_never_deleted", breaks: []string{"BREAK_RETENTION"}},
	{name: "settles", liveness: true, breaks: []string{"BREAK_SWEEPER", "BREAK_PENDING"}},
}

// TestModelNoDeadlock checks the model itself: no assertion fails and every process ends in
// a valid end state, whatever the interleaving.
func TestModelNoDeadlock(t *testing.T) {
	t.Parallel()
	dir := build(t, "", "-DSAFETY", "-DNOCLAIM")
	r := pan(t, dir)
	if r.errors != 0 {
		t.Fatalf("the model deadlocks or fails an assertion:\n%s", r.out)
	}
	t.Logf("%d states, %.1fs", r.states, r.seconds)
}

// TestPropertiesHold verifies every property on the whole state space.
func TestPropertiesHold(t *testing.T) {
	t.Parallel()
	safety := build(t, "", "-DSAFETY")
	live := build(t, "")
	for _, p := range properties {
		t.Run(p.name, func(t *testing.T) {
			dir := safety
			if p.liveness {
				dir = live
			}
			r := pan(t, dir, claimArgs(p.name, p.liveness)...)
			if r.errors != 0 || !r.complete {
				t.Fatalf("%s does not hold:\n%s", p.name, r.out)
			}
			t.Logf("holds: %d states, %.1fs", r.states, r.seconds)
		})
	}
}

// TestPropertiesFailWithoutTheirGuards removes each guard in turn and checks that Spin then
// finds a counterexample to the property that guard enforces: a property that held without
// its guard would prove nothing about the guard.
func TestPropertiesFailWithoutTheirGuards(t *testing.T) {
	t.Parallel()
	// One verifier per switch and kind, kept for the properties that share it.
	shared := t.TempDir()
	built := map[string]string{}
	for _, p := range properties {
		for _, br := range p.breaks {
			t.Run(p.name+"/"+br, func(t *testing.T) {
				flags := []string{}
				if !p.liveness {
					flags = append(flags, "-DSAFETY")
				}
				key := br + strings.Join(flags, " ")
				dir, ok := built[key]
				if !ok {
					var err error
					if dir, err = os.MkdirTemp(shared, "pan-"); err != nil {
						t.Fatal(err)
					}
					buildIn(t, dir, br, flags...)
					built[key] = dir
				}
				r := pan(t, dir, claimArgs(p.name, p.liveness)...)
				if r.errors == 0 {
					t.Fatalf("%s still holds without %s: the guard is not what enforces it\n%s", p.name, br, r.out)
				}
				// A claim's safety part fails as an assertion, its liveness part as an
				// acceptance cycle.
				violated := strings.Contains(r.out, "assertion violated") ||
					p.liveness && strings.Contains(r.out, "acceptance cycle")
				if !violated {
					t.Fatalf("without %s, %s fails but not as a violation of the claim:\n%s", br, p.name, r.out)
				}
				t.Logf("fails without %s: counterexample found after %d states", br, r.states)
			})
		}
	}
}

func claimArgs(name string, liveness bool) []string {
	args := []string{"-N", name}
	if liveness {
		args = append(args, "-a")
	}
	return args
}

// build generates the verifier for coordinator.pml (with the given BREAK_* switch, if any)
// and compiles it, in a directory of its own.
func build(t *testing.T, define string, cflags ...string) string {
	t.Helper()
	dir := t.TempDir()
	buildIn(t, dir, define, cflags...)
	return dir
}

// buildIn does the same in dir.
func buildIn(t *testing.T, dir, define string, cflags ...string) {
	t.Helper()
	for _, tool := range []string{"spin", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if testing.Short() {
				t.Skipf("%s is not installed (scripts/test-env installs it)", tool)
			}
			t.Fatalf("%s is not installed: scripts/test-env installs Debian's spin and gcc", tool)
		}
	}
	src, err := filepath.Abs("coordinator.pml")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-a"}
	if define != "" {
		args = append(args, "-D"+define)
	}
	run(t, dir, "spin", append(args, src)...)
	// Unoptimised: pan.c compiles in seconds instead of half a minute, and the search
	// takes seconds either way.
	run(t, dir, "gcc", append(append([]string{"-O0"}, cflags...), "-o", "pan", "pan.c")...)
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

type result struct {
	out      string
	errors   int
	states   int
	complete bool
	seconds  float64
}

var (
	errorsRe = regexp.MustCompile(`errors: (\d+)`)
	statesRe = regexp.MustCompile(`(\d+) states, stored`)
)

// pan runs the verifier built in dir. The model's longest run is a few hundred steps; the
// depth bound is far above it, and a search that reached it would say so and count as
// incomplete.
func pan(t *testing.T, dir string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./pan", append([]string{"-m100000"}, args...)...)
	cmd.Dir = dir
	start := time.Now()
	out, err := cmd.CombinedOutput()
	r := result{out: string(out), seconds: time.Since(start).Seconds()}
	if ctx.Err() != nil {
		t.Fatalf("pan %s did not finish within 10 minutes", strings.Join(args, " "))
	}
	m := errorsRe.FindStringSubmatch(r.out)
	if m == nil {
		t.Fatalf("pan %s: no result (%v):\n%s", strings.Join(args, " "), err, r.out)
	}
	r.errors, _ = strconv.Atoi(m[1])
	if m := statesRe.FindStringSubmatch(r.out); m != nil {
		r.states, _ = strconv.Atoi(m[1])
	}
	r.complete = !strings.Contains(r.out, "max search depth too small") && !strings.Contains(r.out, "Search not completed")
	if r.errors > 0 {
		// Keep the counterexample readable for whoever looks into a failure.
		if trail, err := filepath.Glob(filepath.Join(dir, "*.trail")); err == nil && len(trail) > 0 {
			if b, err := os.ReadFile(trail[0]); err == nil {
				r.out += "\ntrail " + trail[0] + ": " + strconv.Itoa(strings.Count(string(b), "\n")) + " steps"
			}
		}
	}
	return r
}
