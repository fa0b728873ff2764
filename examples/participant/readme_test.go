package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twophase/coordinator/api"
	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/sqlite"
)

// readmeHeading is the heading of the README section whose first Go code block must be
// this program, byte for byte.
const readmeHeading = "### In Go: `coordinatorclient.Runner`"

// runMainEnv makes the test binary run the program's main instead of the tests, so that
// the tests run the program as a user does (flags, environment, signals) without a build.
const runMainEnv = "EXAMPLE_PARTICIPANT_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The README shows exactly this program: a newcomer who copies it gets code that compiles
// and runs (go vet ./... and go build ./... check this package like any other).
func TestREADMEShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	program, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	block, err := goBlockAfter(string(readme), readmeHeading)
	if err != nil {
		t.Fatal(err)
	}
	if block == string(program) {
		return
	}
	got, want := strings.Split(block, "\n"), strings.Split(string(program), "\n")
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Fatalf("README.md's Go block under %q differs from examples/participant/main.go at line %d of the block:\nREADME:  %q\nmain.go: %q\ncopy main.go into the README (or the other way round)",
				readmeHeading, i+1, g, w)
		}
	}
	t.Fatalf("README.md's Go block under %q has %d lines, examples/participant/main.go %d: copy main.go into the README",
		readmeHeading, len(got), len(want))
}

// goBlockAfter returns the content of the first ```go fenced block after the line heading.
func goBlockAfter(markdown, heading string) (string, error) {
	_, section, ok := strings.Cut(markdown, "\n"+heading+"\n")
	if !ok {
		return "", errors.New("README.md has no heading " + heading)
	}
	if next := strings.Index(section, "\n#"); next >= 0 {
		section = section[:next]
	}
	_, block, ok := strings.Cut(section, "\n```go\n")
	if !ok {
		return "", errors.New("no ```go block under " + heading)
	}
	block, _, ok = strings.Cut(block, "\n```\n")
	if !ok {
		return "", errors.New("the ```go block under " + heading + " is not closed")
	}
	return block + "\n", nil
}

// The program, run against a fresh coordinator, creates its job and commits checkpoints;
// run again, it finds the job and goes on; it stops cleanly (exit 0) on SIGINT and SIGTERM.
func TestProgramCommitsCheckpoints(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("sends SIGINT and SIGTERM")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := startCoordinator(ctx, t)
	coord, err := cc.NewCoordinator(url, cc.Options{MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}

	// First run: the URL from the environment, stopped by SIGINT.
	runProgram(ctx, t, coord, 1, []string{"COORDINATOR_URL=" + url}, nil, os.Interrupt)
	// Second run: the flag wins over the environment; the job exists; stopped by SIGTERM.
	runProgram(ctx, t, coord, 2, []string{"COORDINATOR_URL=http://127.0.0.1:1"}, []string{"-url", url}, syscall.SIGTERM)
}

// runProgram runs the program until the job's last committed checkpoint has grown by two,
// then stops it with sig and checks that it exited 0 as epoch epoch of pg-sink; it returns the
// program's log.
func runProgram(ctx context.Context, t *testing.T, coord *cc.Coordinator, epoch int64, env, args []string, sig os.Signal) string {
	t.Helper()
	var before int64
	if job, err := coord.Job(ctx, "orders"); err == nil && job.LastCommitted != nil {
		before = *job.LastCommitted
	}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), append(env, runMainEnv+"=1")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fail := func(format string, args ...any) {
		t.Helper()
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf(format+"\nthe program's log:\n%s", append(args, stderr.String())...)
	}

	deadline := time.Now().Add(20 * time.Second)
	for {
		job, err := coord.Job(ctx, "orders")
		if err == nil && job.LastCommitted != nil && *job.LastCommitted >= before+2 {
			if job.Epochs["pg-sink"] != epoch {
				fail("pg-sink's epoch is %d, want %d", job.Epochs["pg-sink"], epoch)
			}
			// A decided checkpoint is only committing until the program has applied it and
			// acked: wait for one it acked, so that its log says so.
			if acked(ctx, coord, before, *job.LastCommitted) {
				break
			}
		}
		if err != nil && !errors.Is(err, cc.ErrNotFound) {
			fail("get job: %v", err)
		}
		select {
		case err := <-exited:
			t.Fatalf("the program exited early (%v); its log:\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			fail("no two checkpoints committed, one of them acked, after checkpoint %d in 20 s", before)
		}
		time.Sleep(50 * time.Millisecond)
	}

	if err := cmd.Process.Signal(sig); err != nil {
		fail("signal: %v", err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("after %v the program exited with %v, want 0; its log:\n%s", sig, err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		fail("the program did not exit within 10 s of %v", sig)
	}
	// The Runner was given a Logger: it says what it did.
	for _, want := range []string{"msg=registered", `msg="applied and acked"`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the program's log has no %s:\n%s", want, stderr.String())
		}
	}
	return stderr.String()
}

// acked reports whether a checkpoint after before, up to last, is committed: decided and
// acknowledged by every participant.
func acked(ctx context.Context, coord *cc.Coordinator, before, last int64) bool {
	for id := before + 1; id <= last; id++ {
		if cp, err := coord.Checkpoint(ctx, "orders", id, 0); err == nil && cp.Status == cc.Committed {
			return true
		}
	}
	return false
}

// The program with a participant token: it may not create the job nor open checkpoints,
// so it only takes part, in the checkpoints that an operator opens.
func TestProgramRunsWithAParticipantToken(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("sends SIGTERM")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const admin = "the-admin-token-of-this-test-0123456789"
	url, tokens := startCoordinatorWithAuth(ctx, t, admin)
	operator, err := cc.NewCoordinator(url, cc.Options{Token: admin, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.PutJob(ctx, "orders", cc.JobConfig{Participants: []string{"pg-sink"}}); err != nil {
		t.Fatal(err)
	}
	_, secret, err := tokens.Create(ctx, coordinator.Token{Name: "orders-pg-sink", Scopes: []coordinator.Scope{coordinator.ScopeParticipant},
		Job: "orders", Participant: "pg-sink"})
	if err != nil {
		t.Fatal(err)
	}
	triggerCtx, stopTrigger := context.WithCancel(ctx)
	defer stopTrigger()
	go func() {
		_ = (&cc.Trigger{Coordinator: operator, Job: "orders", Interval: 100 * time.Millisecond}).Run(triggerCtx)
	}()
	stderr := runProgram(ctx, t, operator, 1, []string{"COORDINATOR_URL=" + url, "COORDINATOR_TOKEN=" + secret}, nil, syscall.SIGTERM)
	if !strings.Contains(stderr, "this token only takes part") {
		t.Errorf("the program did not say it only takes part:\n%s", stderr)
	}
}

// startCoordinator serves a coordinator on the embedded store in a temporary directory, on
// 127.0.0.1 and a free port, until the test ends, as cmd/coordinator does.
func startCoordinator(ctx context.Context, t *testing.T) string {
	url, _ := startCoordinatorWithAuth(ctx, t, "")
	return url
}

// startCoordinatorWithAuth is startCoordinator with authentication on when admin is not
// empty, and the tokens of its store.
func startCoordinatorWithAuth(ctx context.Context, t *testing.T, admin string) (string, *coordinator.Tokens) {
	t.Helper()
	store, err := sqlite.Open(ctx, t.TempDir(), sqlite.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	svc := coordinator.NewService(store, nil)
	sweepCtx, stopSweeper := context.WithCancel(context.Background())
	sweeper := make(chan struct{})
	go func() { defer close(sweeper); svc.RunSweeper(sweepCtx, 100*time.Millisecond) }()
	opts := api.Options{Logger: slog.New(slog.DiscardHandler), RequestTimeout: 30 * time.Second}
	var tokens *coordinator.Tokens
	if admin != "" {
		var ts coordinator.TokenStore = store
		opts.Auth = coordinator.NewAuthenticator(ts, admin, nil)
		if err := opts.Auth.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		tokens = coordinator.NewTokens(ts)
		opts.Tokens = tokens
	}
	srv := httptest.NewServer(api.NewHandler(svc, opts))
	t.Cleanup(func() {
		svc.EndWaits()
		srv.Close()
		stopSweeper()
		<-sweeper
	})
	return srv.URL, tokens
}
