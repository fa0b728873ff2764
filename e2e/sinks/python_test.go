package sinks_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/e2e/pipeline"
	"github.com/twophase/coordinator/e2e/sinks"
)

// The Python participant (python/pysink.py, standard library only) speaks the REST API by
// hand: fed by the pipeline's source, SIGKILLed twice at random moments and restarted, it
// ends with every event exactly once. python3 must be installed: without it the test
// fails, it does not skip.
func TestPythonParticipant(t *testing.T) {
	t.Parallel()
	coord, url := coordinatorFor(t) // first: under -short it skips the test
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is required for the Python participant's test: %v", err)
	}
	script, err := filepath.Abs("python/pysink.py")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := coord.PutJob(ctx, "py", cc.JobConfig{Participants: []string{"source", "py-sink"}, CheckpointTimeoutMs: ptr(int64(5000))}); err != nil {
		t.Fatal(err)
	}
	const total = 3000
	sockDir, err := os.MkdirTemp("", "py-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	socket := filepath.Join(sockDir, "s")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	var srcLog lockedBuffer
	logger := slog.New(slog.NewTextHandler(&srcLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	src := &pipeline.Source{Coordinator: coord, Job: "py", Name: "source", Sinks: []string{"py-sink"}, Total: total, Rate: 1000, Listener: ln, Logger: logger}
	errs := make(chan error, 3)
	go func() { errs <- src.Run(ctx) }()
	go func() {
		errs <- cc.NewRunner(coord, "py", "source", cc.Participant[pipeline.Position](src), cc.RunnerOptions{PollInterval: 10 * time.Millisecond, Logger: logger}).Run(ctx)
	}()
	trig := &cc.Trigger{Coordinator: coord, Job: "py", Interval: 100 * time.Millisecond}
	go func() { errs <- trig.Run(ctx) }()

	dir := t.TempDir()
	py := &pipeline.Process{Name: "pysink", Command: func() *exec.Cmd {
		return exec.Command(python, script, "--coordinator", url, "--job", "py", "--name", "py-sink", "--socket", socket, "--dir", dir)
	}}
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	defer py.Kill()
	defer func() {
		if t.Failed() {
			t.Logf("pysink output:\n%s", py.Output())
			t.Logf("source log:\n%s", srcLog.String())
		}
	}()
	committed := func() int64 {
		_, pos, err := cc.RestorePoint[pipeline.Position](ctx, coord, "py", "source")
		if err != nil || len(pos) == 0 {
			return 1
		}
		return pos[0].Next
	}
	deadline := time.Now().Add(90 * time.Second)
	for kill := 1; kill <= 2; kill++ {
		// Kill somewhere in the first or second third, once it made progress.
		target := int64(kill)*total/3 - rand.Int64N(total/6)
		for committed() < target {
			if time.Now().After(deadline) {
				t.Fatalf("no progress: committed position %d", committed())
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		py.Kill()
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		if err := py.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for {
		open, err := coord.Checkpoints(ctx, "py", cc.Committing)
		if committed() == total+1 && err == nil && len(open) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done: committed position %d", committed())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	for range 3 {
		<-errs
	}
	py.Kill()
	if u := py.Unexpected(); len(u) > 0 {
		t.Errorf("the Python participant stopped by itself: %s", strings.Join(u, "; "))
	}
	held, err := sinks.ReadFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if msg := sinks.Check(held, total); msg != "" {
		t.Error(msg)
		logCheckpoints(t, coord, "py")
	}
	t.Logf("%d events, %d Python runs (2 SIGKILLs), %d checkpoints opened, %d source rewinds",
		total, py.Runs(), trig.Opened(), src.Rewinds())
}

func ptr[T any](v T) *T { return &v }

// logCheckpoints writes the job's history to the test log, to explain a failure.
func logCheckpoints(t *testing.T, coord *cc.Coordinator, job string) {
	cps, err := coord.Checkpoints(context.Background(), job)
	if err != nil {
		t.Logf("list checkpoints: %v", err)
		return
	}
	for i := len(cps) - 1; i >= 0; i-- {
		cp := cps[i]
		line := fmt.Sprintf("checkpoint %d %s", cp.Id, cp.Status)
		if cp.AbortReason != nil {
			line += " (" + *cp.AbortReason + ")"
		}
		for _, p := range cp.Participants {
			vote := "-"
			if p.Vote != nil {
				vote = string(*p.Vote)
			}
			line += fmt.Sprintf(" | %s %s %s acked=%v", p.Name, vote, p.Committables, p.AckedAt != nil)
		}
		t.Log(line)
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
