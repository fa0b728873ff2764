package pipeline_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// The whole promise, end to end: a deterministic source of 20,000 events streams to four
// sinks of different kinds (PostgreSQL with PREPARE TRANSACTION, files renamed into place,
// and the Python and TypeScript participants, on their clients' Runners), each a separate process, checkpointed every 200 ms by the
// coordinator (a separate process too). Processes of every kind are SIGKILLed at random
// moments and started again, PostgreSQL crashes, checkpoints are aborted under the
// pipeline's feet; at the end every sink holds events 1..N exactly once.
//
// Authentication is on: each participant process sends its own participant token, the
// trigger a trigger token, the operator's aborts an operator token, the test's reads a
// read token. Every commit is decided by (decided_by) the participant whose vote completed
// it, and no secret appears in any log.
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
	harness.TypeScriptClient(t) // node, and the TypeScript client's dependencies
	tsScript, err := filepath.Abs("../sinks/typescript/tssink.mjs")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	server := harness.StartAuthCoordinator(t, cluster.NewDatabase(t))
	sinkDB := cluster.NewDatabase(t)
	mariaDSN := harness.MariaDB(t)
	const job = "pipeline"
	sinkNames := []string{"pg-sink", "file-sink", "py-sink", "ts-sink", "mariadb-sink"}
	participants := append([]string{"source"}, sinkNames...)
	tokens := newTokens(t, server, job, participants)
	client := func(token string) *cc.Coordinator {
		c, err := cc.NewCoordinator(server.BaseURL, cc.Options{Token: token, RequestTimeout: 5 * time.Second, MaxBackoff: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// coord reads; operator changes the job and aborts by hand.
	coord, operator := client(tokens.secret["read"]), client(tokens.secret["operator"])
	if _, err := operator.PutJob(ctx, job, cc.JobConfig{
		Participants:        participants,
		CheckpointTimeoutMs: ptr(int64(checkpointTimeout)),
	}); err != nil {
		t.Fatal(err)
	}

	sockDir := shortTempDir(t)
	socket := filepath.Join(sockDir, "source.sock")
	fileDir, pyDir, tsDir := t.TempDir(), t.TempDir(), t.TempDir()
	base := pipeline.WorkerConfig{Coordinator: server.BaseURL, Job: job, Socket: socket}
	worker := func(name string, edit func(*pipeline.WorkerConfig)) *pipeline.Process {
		cfg := base
		cfg.Name, cfg.Token = name, tokens.participant(name)
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
		"mariadb-sink": worker("mariadb-sink", func(c *pipeline.WorkerConfig) {
			c.Role, c.DatabaseURL, c.Table = pipeline.RoleMariaDBSink, mariaDSN, "events"
		}),
		"file-sink": worker("file-sink", func(c *pipeline.WorkerConfig) {
			c.Role, c.Dir = pipeline.RoleFileSink, fileDir
		}),
		"py-sink": {Name: "py-sink", Command: func() *exec.Cmd {
			cmd := exec.Command(python, script, "--coordinator", server.BaseURL, "--job", job,
				"--name", "py-sink", "--socket", socket, "--dir", pyDir)
			cmd.Env = append(os.Environ(), "PYSINK_TOKEN="+tokens.participant("py-sink"))
			return cmd
		}},
		"ts-sink": {Name: "ts-sink", Command: func() *exec.Cmd {
			cmd := exec.Command("node", tsScript, "--coordinator", server.BaseURL, "--job", job,
				"--name", "ts-sink", "--socket", socket, "--dir", tsDir)
			cmd.Env = append(os.Environ(), "TSSINK_TOKEN="+tokens.participant("ts-sink"))
			return cmd
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
	trig := &cc.Trigger{Coordinator: client(tokens.secret["trigger"]), Job: job, Interval: checkpointInterval}
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
	// an operator or a failing participant would). The first nine actions are one of each,
	// in random order. A participant is killed at a random moment, or, as often, in one of
	// its two windows of doubt: after its prepared vote, before the decision; and after the
	// decision, before its ack.
	victims := []string{"source", "pg-sink", "file-sink", "py-sink", "ts-sink", "mariadb-sink", "coordinator", "postgres", "abort"}
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
			if _, err := operator.Abort(ctx, job, id, "chaos: operator abort"); err != nil && !errors.Is(err, cc.ErrAlreadyDecided) {
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
			p, perr := coord.Pending(ctx, job, name, 0)
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
	tsEvents, err := sinks.ReadFiles(tsDir)
	if err != nil {
		t.Fatal(err)
	}
	mdb, err := sql.Open("mysql", mariaDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer mdb.Close()
	mariaEvents, err := sinks.ReadMariaDB(ctx, mdb, "events")
	if err != nil {
		t.Fatal(err)
	}
	mariaSink := &sinks.MariaDBSink{DB: mdb, Job: job, Name: "mariadb-sink", Table: "events"}
	if err := mariaSink.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if xids, err := mariaSink.Prepared(ctx); err != nil || len(xids) != 0 {
		t.Errorf("XA transactions left prepared in MariaDB: %v (%v)", xids, err)
	}
	for name, held := range map[string][]sinks.Event{"pg-sink": pgEvents, "file-sink": fileEvents, "py-sink": pyEvents, "ts-sink": tsEvents, "mariadb-sink": mariaEvents} {
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
	checkDecidedBy(t, tokens, cps)
	checkNoSecrets(t, "the coordinator's log", server.Logs(), tokens.secret)
	for name, p := range procs {
		checkNoSecrets(t, "the output of "+name, p.Output(), tokens.secret)
	}
	rewinds := strings.Count(procs["source"].Output(), "msg=rewound")
	fmt.Printf("pipeline: %d events into 5 sinks (postgres, files, python, typescript, mariadb); %d chaos actions in %.1fs: SIGKILL source %d, pg-sink %d, file-sink %d, py-sink %d, ts-sink %d, mariadb-sink %d, coordinator %d (participants in doubt %d, decided but not acked %d), postgres crashes %d, operator aborts %d; %d checkpoints (%d committed, %d aborted); %d source rewinds; %.1fs in all\n",
		pipelineEvents, nkills, chaosDone.Seconds(), kills["source"], kills["pg-sink"], kills["file-sink"], kills["py-sink"], kills["ts-sink"], kills["mariadb-sink"], kills["coordinator"],
		windows["in doubt"], windows["decided, not acked"], kills["postgres"], kills["abort"],
		len(cps), committedN, abortedN, rewinds, time.Since(started).Seconds())
}

// pipelineTokens are the pipeline's tokens: one participant token per participant (named
// <job>.<participant>), and a trigger, an operator and a read token on the job; secret
// holds each by role or participant name, and the admin token as "admin".
type pipelineTokens struct {
	secret map[string]string // role or participant -> secret
	name   map[string]string // role or participant -> token name
}

func (tk *pipelineTokens) participant(p string) string { return tk.secret["participant "+p] }

// newTokens creates the pipeline's tokens through server (as admin).
func newTokens(t *testing.T, server *harness.Coordinator, job string, participants []string) *pipelineTokens {
	t.Helper()
	tk := &pipelineTokens{secret: map[string]string{"admin": server.AdminToken}, name: map[string]string{"admin": "admin"}}
	var keys []string
	var specs []harness.TokenSpec
	for _, role := range []string{"trigger", "operator", "read"} {
		keys = append(keys, role)
		specs = append(specs, harness.TokenSpec{Name: job + "-" + role, Scopes: []string{role}, Job: job})
	}
	for _, p := range participants {
		keys = append(keys, "participant "+p)
		specs = append(specs, harness.TokenSpec{Name: job + "." + p, Scopes: []string{"participant"}, Job: job, Participant: p})
	}
	for i, s := range server.CreateTokens(t, specs...) {
		tk.secret[keys[i]], tk.name[keys[i]] = s, specs[i].Name
	}
	return tk
}

// checkDecidedBy checks decided_by on every checkpoint of cps (all of the job): a commit
// is decided by the prepared vote that completed it, so decided_by is the token of the
// participant whose vote was recorded when the commit was (voted_at = decided_at: on this
// checkpoint, or on a lower one whose commit carried it); an abort by a participant (an
// abort vote, the source rewinding, a registration), the operator, or a deadline (null).
func checkDecidedBy(t *testing.T, tk *pipelineTokens, cps []cc.Checkpoint) {
	t.Helper()
	participantOf := map[string]string{} // token name -> participant
	for key, name := range tk.name {
		if p, ok := strings.CutPrefix(key, "participant "); ok {
			participantOf[name] = p
		}
	}
	// Who voted at each instant.
	votedAt := map[time.Time][]string{}
	for _, cp := range cps {
		for _, p := range cp.Participants {
			if p.VotedAt != nil {
				votedAt[p.VotedAt.UTC()] = append(votedAt[p.VotedAt.UTC()], p.Name)
			}
		}
	}
	count := map[string]int{}
	bad := 0
	for _, cp := range cps {
		by := ""
		if cp.DecidedBy != nil {
			by = *cp.DecidedBy
		}
		switch cp.Status {
		case cc.Committed, cc.Committing:
			count["commit by "+by]++
			if _, ok := participantOf[by]; !ok {
				bad++
				t.Errorf("checkpoint %d committed, decided_by %q: not a participant's token", cp.Id, by)
				continue
			}
			voters := votedAt[cp.DecidedAt.UTC()]
			if !slices.Contains(voters, participantOf[by]) {
				bad++
				t.Errorf("checkpoint %d committed at %v, decided_by %q (participant %s), but the vote recorded then was %v's",
					cp.Id, cp.DecidedAt, by, participantOf[by], voters)
			}
		case cc.Aborted:
			if by == "" {
				count["abort by deadline"]++
				continue
			}
			count["abort by "+by]++
			if _, ok := participantOf[by]; !ok && by != tk.name["operator"] {
				bad++
				t.Errorf("checkpoint %d aborted (%v), decided_by %q: neither a participant's token nor the operator's", cp.Id, cp.AbortReason, by)
			}
		default:
			if by != "" {
				t.Errorf("checkpoint %d is %s, decided_by %q", cp.Id, cp.Status, by)
			}
		}
		if bad > 10 {
			t.Fatalf("more than 10 checkpoints decided by the wrong token")
		}
	}
	t.Logf("checkpoints decided by: %v", count)
}

// checkNoSecrets fails the test if a secret (name -> secret) appears in text; it never
// prints one.
func checkNoSecrets(t *testing.T, where, text string, secrets map[string]string) {
	t.Helper()
	for name, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			t.Errorf("the secret of the %s token appears in %s", name, where)
		}
	}
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
