package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/sqlite"
)

const helperEnv = "SQLITE_STORE_TEST_OWNER_DIR"

// TestMain lets the test binary play a coordinator that owns a data directory (see
// runOwner) when started with helperEnv set.
func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		if err := runOwner(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runOwner opens the store in dir and decides commit on checkpoint after checkpoint,
// printing "committed N" once each decision's Update returned, until it is killed (or
// after 30 s).
func runOwner(dir string) error {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, dir, sqlite.Options{Migrate: true})
	if err != nil {
		return err
	}
	svc := coordinator.NewService(st, nil)
	if _, _, err := svc.PutJob(ctx, "j", config("a")); err != nil {
		return err
	}
	r, err := svc.Register(ctx, "j", "a")
	if err != nil {
		return err
	}
	fmt.Println("ready")
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		cp, _, err := svc.Prepare(ctx, "j", coordinator.PrepareRequest{})
		if err != nil {
			return err
		}
		cp, err = svc.Vote(ctx, "j", cp.ID, "a", coordinator.Vote{Epoch: r.Epoch, Kind: coordinator.VotePrepared, Committables: []byte(`["` + strconv.FormatInt(cp.ID, 10) + `"]`)})
		if err != nil {
			return err
		}
		fmt.Println("committed", cp.ID)
		if _, err := svc.Ack(ctx, "j", cp.ID, "a", r.Epoch); err != nil {
			return err
		}
	}
	return errors.New("not killed in time")
}

// A process killed with SIGKILL loses no decision it reported, and its lock dies with it;
// while it lives, the directory is refused to others with its PID.
func TestSIGKILLLosesNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := filepath.Join(t.TempDir(), "data")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill() //nolint:errcheck // already dead when the test went well
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("owner did not start: %q %v", lines.Text(), lines.Err())
	}
	_, err = sqlite.Open(t.Context(), dir, sqlite.Options{Migrate: true})
	var inUse *sqlite.InUseError
	if !errors.As(err, &inUse) || inUse.PID != cmd.Process.Pid || !strings.Contains(err.Error(), "process "+strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("Open of a directory owned by process %d: %v", cmd.Process.Pid, err)
	}
	var reported int64
	for reported < 30 && lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) == 2 && f[0] == "committed" {
			reported, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait() //nolint:errcheck // killed
	if reported < 30 {
		t.Fatalf("owner reported only %d commits", reported)
	}

	st, err := sqlite.Open(t.Context(), dir, sqlite.Options{})
	if err != nil {
		t.Fatalf("Open after the owner was killed: %v", err)
	}
	defer st.Close()
	svc := coordinator.NewService(st, nil)
	for id := int64(1); id <= reported; id++ {
		cp, err := svc.GetCheckpoint(t.Context(), "j", id, 0)
		if err != nil {
			t.Fatalf("checkpoint %d: %v", id, err)
		}
		if cp.Status != coordinator.StatusCommitting && cp.Status != coordinator.StatusCommitted {
			t.Fatalf("checkpoint %d is %s, its commit was reported", id, cp.Status)
		}
		if got, want := string(cp.Participants[0].Committables), `["`+strconv.FormatInt(id, 10)+`"]`; got != want {
			t.Fatalf("checkpoint %d committables %s, want %s", id, got, want)
		}
	}
}
