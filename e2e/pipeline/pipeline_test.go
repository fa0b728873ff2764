package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/e2e/harness"
	"github.com/twophase/coordinator/e2e/pipeline"
	"github.com/twophase/coordinator/e2e/sinks"
)

// TestMain makes this test binary double as the pipeline's worker processes: started with
// $PIPELINE_WORKER set, it is a source or a sink (pipeline.WorkerMain), not a test.
func TestMain(m *testing.M) {
	if pipeline.IsWorker() {
		os.Exit(pipeline.WorkerMain())
	}
	os.Exit(harness.Run(m))
}

const (
	pipelineEvents = 20000
	// pipelineRate is the source's events per second: slow enough that the stream lasts
	// through many kills, fast enough for the time budget.
	pipelineRate       = 700
	checkpointInterval = 200 * time.Millisecond
	checkpointTimeout  = 3000 // ms
	// The chaos phase ends when this share of the events is committed, or after
	// chaosBudget, or after maxKills; then the pipeline must finish within finishBudget.
	chaosShare   = 0.9
	chaosBudget  = 75 * time.Second
	maxKills     = 40
	finishBudget = 60 * time.Second
)

// The whole promise, end to end: a deterministic source of 20,000 events streams to three
// sinks of different kinds (PostgreSQL with PREPARE TRANSACTION, files renamed into place,
// and the Python participant), each a separate process, checkpointed every 200 ms by the
// coordinator (a separate process too). Processes of every kind are SIGKILLed at random
// moments and started again, PostgreSQL crashes, checkpoints are aborted under the
// pipeline's feet; at the end every sink holds events 1..N exactly once.
func TestPipelineExactlyOnce(t *testing.T) {
	t.Parallel()
	started := time.Now()
	cluster := harness.StartCluster(t) // first: under -short it skips the test
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is required (the Python sink is part of the pipeline): %v", err)
	}
	script, err := filepath.Abs("../sinks/python/pysink.py")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	server := harness.StartCoordinator(t, cluster.NewDatabase(t))
	sinkDB := cluster.NewDatabase(t)
	coord, err := cc.NewCoordinator(server.BaseURL, cc.Options{RequestTimeout: 5 * time.Second, MaxBackoff: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const job = "pipeline"
	sinkNames := []string{"pg-sink", "file-sink", "py-sink"}
	if _, err := coord.PutJob(ctx, job, cc.JobConfig{
		Participants:        append([]string{"source"}, sinkNames...),
		CheckpointTimeoutMs: ptr(int64(checkpointTimeout)),
	}); err != nil {
		t.Fatal(err)
	}

	sockDir := shortTempDir(t)
	socket := filepath.Join(sockDir, "source.sock")
	fileDir, pyDir := t.TempDir(), t.TempDir()
	base := pipeline.WorkerConfig{Coordinator: server.BaseURL, Job: job, Socket: socket}
	worker := func(name string, edit func(*pipeline.WorkerConfig)) *pipeline.Process {
		cfg := base
		cfg.Name = name
		edit(&cfg)
		return &pipeline.Process{Name: name, Command: func() *exec.Cmd {
			cmd := exec.Command(self, "-test.run=^$")
			cmd.Env = pipeline.Environ(cfg)
			return cmd
		}}
	}
	procs := map[string]*pipeline.Process{
		"source": worker("source", func(c *pipeline.WorkerConfig) {
			c.Role, c.Sinks, c.Total, c.Rate = pipeline.RoleSource, sinkNames, pipelineEvents, pipelineRate
		}),
		"pg-sink": worker("pg-sink", func(c *pipeline.WorkerConfig) {
			c.Role, c.DatabaseURL, c.Table = pipeline.RolePGSink, sinkDB, "events"
		}),
		"file-sink": worker("file-sink", func(c *pipeline.WorkerConfig) {
			c.Role, c.Dir = pipeline.RoleFileSink, fileDir
		}),
		"py-sink": {Name: "py-sink", Command: func() *exec.Cmd {
			return exec.Command(python, script, "--coordinator", server.BaseURL, "--job", job,
				"--name", "py-sink", "--socket", socket, "--dir", pyDir)
		}},
	}
	for _, p := range procs {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.Kill()
		}
		if t.Failed() {
			for name, p := range procs {
				t.Logf("---- output of %s (tail):\n%s", name, tail(p.Output(), 150))
			}
			logCheckpoints(t, coord, job, 40)
		}
	})

	tctx, stopTrigger := context.WithCancel(ctx)
	defer stopTrigger()
	trig := &cc.Trigger{Coordinator: coord, Job: job, Interval: checkpointInterval}
	trigDone := make(chan error, 1)
	go func() { trigDone <- trig.Run(tctx) }()

	committed := func() int64 {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, pos, err := cc.RestorePoint[pipeline.Position](cctx, coord, job, "source")
		if err != nil || len(pos) == 0 {
			return 1
		}
		return pos[0].Next
	}

	// Chaos: every 0.4 to 1.6 s, one of: SIGKILL a process (source, a sink, the coordinator),
	// crash PostgreSQL (pg_ctl stop -m immediate, holding the coordinator's and the PG
	// sink's databases), or abort the open checkpoint after the source sent its barrier (as
	// an operator or a failing participant would). The first seven actions are one of each,
	// in random order. A participant is killed at a random moment, or, as often, in one of
	// its two windows of doubt: after its prepared vote, before the decision; and after the
	// decision, before its ack.
	victims := []string{"source", "pg-sink", "file-sink", "py-sink", "coordinator", "postgres", "abort"}
	order := rand.Perm(len(victims))
	kills := map[string]int{}
	windows := map[string]int{}
	nkills := 0
	chaosEnd := time.Now().Add(chaosBudget)
	for nkills < maxKills && time.Now().Before(chaosEnd) {
		time.Sleep(time.Duration(400+rand.IntN(1200)) * time.Millisecond)
		if nkills >= len(victims) && committed() > int64(chaosShare*pipelineEvents) {
			break
		}
		v := victims[rand.IntN(len(victims))]
		if nkills < len(victims) {
			v = victims[order[nkills]]
		}
		down := time.Duration(rand.IntN(400)) * time.Millisecond
		what := ""
		switch v {
		case "coordinator":
			server.Kill()
			time.Sleep(down)
			server.Restart()
		case "postgres":
			cluster.Crash()
			time.Sleep(down)
			cluster.Start()
		case "abort":
			id, ok := waitWindow(ctx, coord, job, "source", windowInDoubt)
			if !ok {
				continue
			}
			if _, err := coord.Abort(ctx, job, id, "chaos: operator abort"); err != nil && !errors.Is(err, cc.ErrAlreadyDecided) {
				t.Fatalf("abort checkpoint %d: %v", id, err)
			}
			what = fmt.Sprintf("checkpoint %d", id)
		default:
			switch rand.IntN(4) {
			case 0:
				if id, ok := waitWindow(ctx, coord, job, v, windowInDoubt); ok {
					what = fmt.Sprintf("voted on %d, undecided", id)
					windows["in doubt"]++
				}
			case 1:
				if id, ok := waitWindow(ctx, coord, job, v, windowDecided); ok {
					what = fmt.Sprintf("%d decided, not acked", id)
					windows["decided, not acked"]++
				}
			}
			procs[v].Kill()
			time.Sleep(down)
			if err := procs[v].Start(); err != nil {
				t.Fatal(err)
			}
		}
		if !server.Running() {
			t.Errorf("the coordinator exited by itself:\n%s", tail(server.Logs(), 50))
			server.Restart()
		}
		kills[v]++
		nkills++
		t.Logf("%5.1fs chaos %2d: %-11s %-28s (down %3dms), committed position %d", time.Since(started).Seconds(), nkills, v, what, down.Milliseconds(), committed())
	}
	chaosDone := time.Since(started)
	for _, v := range victims {
		if kills[v] == 0 {
			t.Errorf("%s was never killed", v)
		}
	}

	// Quiet: the pipeline must finish on its own.
	finish := time.Now().Add(finishBudget)
	for committed() != pipelineEvents+1 {
		if time.Now().After(finish) {
			t.Fatalf("not finished %s after the chaos: committed position %d of %d", finishBudget, committed(), pipelineEvents+1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopTrigger()
	if err := <-trigDone; err != nil {
		t.Errorf("trigger: %v", err)
	}
	// Then until nobody owes anything: every decision applied and acked, rollbacks included.
	for {
		open, err := coord.Checkpoints(ctx, job, cc.Preparing, cc.Committing)
		owed := 0
		for _, name := range append([]string{"source"}, sinkNames...) {
			p, perr := coord.Pending(ctx, job, name)
			if perr != nil {
				err = perr
				break
			}
			owed += len(p.Items)
		}
		if err == nil && len(open) == 0 && owed == 0 {
			break
		}
		if time.Now().After(finish) {
			t.Fatalf("still open: %d checkpoints, %d items owed (%v)", len(open), owed, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range procs {
		p.Stop()
	}
	for name, p := range procs {
		if u := p.Unexpected(); len(u) > 0 {
			t.Errorf("%s stopped by itself: %s", name, strings.Join(u, "; "))
		}
	}

	// Every sink holds 1..N exactly once.
	pool, err := pgxpool.New(ctx, sinkDB)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pgEvents, err := sinks.ReadPG(ctx, pool, "events")
	if err != nil {
		t.Fatal(err)
	}
	var prepared int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&prepared); err != nil {
		t.Fatal(err)
	}
	if prepared != 0 {
		t.Errorf("%d prepared transactions left in the sink's cluster", prepared)
	}
	fileEvents, err := sinks.ReadFiles(fileDir)
	if err != nil {
		t.Fatal(err)
	}
	pyEvents, err := sinks.ReadFiles(pyDir)
	if err != nil {
		t.Fatal(err)
	}
	for name, held := range map[string][]sinks.Event{"pg-sink": pgEvents, "file-sink": fileEvents, "py-sink": pyEvents} {
		if msg := sinks.Check(held, pipelineEvents); msg != "" {
			t.Errorf("%s: %s", name, msg)
		} else {
			t.Logf("%s holds events 1..%d exactly once", name, pipelineEvents)
		}
	}

	cps, err := coord.Checkpoints(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	var committedN, abortedN int
	for _, cp := range cps {
		switch cp.Status {
		case cc.Committed:
			committedN++
		case cc.Aborted:
			abortedN++
		}
	}
	rewinds := strings.Count(procs["source"].Output(), "msg=rewound")
	fmt.Printf("pipeline: %d events into 3 sinks (postgres, files, python); %d chaos actions in %.1fs: SIGKILL source %d, pg-sink %d, file-sink %d, py-sink %d, coordinator %d (participants in doubt %d, decided but not acked %d), postgres crashes %d, operator aborts %d; %d checkpoints (%d committed, %d aborted); %d source rewinds; %.1fs in all\n",
		pipelineEvents, nkills, chaosDone.Seconds(), kills["source"], kills["pg-sink"], kills["file-sink"], kills["py-sink"], kills["coordinator"],
		windows["in doubt"], windows["decided, not acked"], kills["postgres"], kills["abort"],
		len(cps), committedN, abortedN, rewinds, time.Since(started).Seconds())
}

const (
	windowInDoubt = iota // the participant voted prepared, the checkpoint is preparing
	windowDecided        // the checkpoint is committing or aborted, the participant voted prepared and has not acked
)

// waitWindow polls the job's open checkpoints for up to 3 s until participant is in the
// window, and returns that checkpoint.
func waitWindow(ctx context.Context, coord *cc.Coordinator, job, participant string, window int) (int64, bool) {
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		cps, err := coord.Checkpoints(cctx, job, cc.Preparing, cc.Committing)
		cancel()
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for _, cp := range cps {
			for _, p := range cp.Participants {
				if p.Name != participant || p.Vote == nil || *p.Vote != cc.VoteKindPrepared {
					continue
				}
				if (window == windowInDoubt && cp.Status == cc.Preparing) ||
					(window == windowDecided && cp.Status == cc.Committing && p.AckedAt == nil) {
					return cp.Id, true
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
	return 0, false
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// logCheckpoints writes the last n checkpoints of job to the test log.
func logCheckpoints(t *testing.T, coord *cc.Coordinator, job string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cps, err := coord.Checkpoints(ctx, job)
	if err != nil {
		t.Logf("list checkpoints: %v", err)
		return
	}
	if len(cps) > n {
		cps = cps[:n]
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
