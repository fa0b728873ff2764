package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/internal/cli"
)

// "coordinator fleet" runs a fleet of jobs the way users run them: one
// coordinatorclient.Runner per participant, with a trivial in-memory Participant, and a
// coordinatorclient.Trigger per job opening a checkpoint every interval. Unlike bench,
// which drives rounds as fast as they go with a hand-written client, it offers a fixed
// load through the participant library and measures what that costs the coordinator and
// PostgreSQL (CPU, RSS) and how long a checkpoint takes; with --idle, what a fleet that
// only waits costs.

// fleetConfig is every setting of "coordinator fleet".
type fleetConfig struct {
	url               string
	token             string
	jobs              int
	participants      int
	interval          time.Duration
	duration          time.Duration
	warmup            time.Duration
	wait              time.Duration
	checkpointTimeout time.Duration
	idle              bool
	coordinatorPID    int
	rssPID            int
	rssInterval       time.Duration
	postgres          bool
	json              bool
	jobPrefix         string
	http2             bool
}

// Bounds of the fleet settings: the traffic it sends is bounded in count and time.
const (
	maxFleetJobs         = 10000
	maxFleetParticipants = 100
	maxFleetRunners      = 50000
	maxFleetDuration     = time.Hour
	maxFleetWarmup       = 10 * time.Minute
)

func defineFleet(cfg *fleetConfig) *cli.Settings {
	s := cli.NewSettings("fleet")
	fs := s.FS
	flagOnly := s.FlagOnly

	fs.StringVar(&cfg.url, "url", "http://127.0.0.1:8080", "base `URL` of the running coordinator")
	flagOnly("url")
	fs.StringVar(&cfg.token, "token", "", "`token` sent with every request (Authorization: Bearer): one that may create jobs, "+
		"open checkpoints and act as every participant, e.g. the admin token")
	flagOnly("token")
	fs.IntVar(&cfg.jobs, "jobs", 1000, "`number` of jobs, each with its participants and its trigger")
	flagOnly("jobs")
	fs.IntVar(&cfg.participants, "participants", 4, "`number` of participants of each job, each a Runner of its own")
	flagOnly("participants")
	cli.DurationVar(fs, &cfg.interval, "interval", 2*time.Second, "each job's trigger opens a checkpoint every `duration`; "+
		"the jobs' first openings are spread evenly over one interval")
	flagOnly("interval")
	cli.DurationVar(fs, &cfg.duration, "duration", 60*time.Second, "how long (`duration`) to measure, after the warm-up")
	flagOnly("duration")
	cli.DurationVar(fs, &cfg.warmup, "warmup", 10*time.Second, "`duration` from the start of the triggers (or, with --idle, from the last "+
		"registration) to the start of the measurement; at least twice --interval")
	flagOnly("warmup")
	cli.DurationVar(fs, &cfg.wait, "wait", 10*time.Second, "the Runners' long-poll (RunnerOptions.LongPoll, `duration`, at most 60s)")
	flagOnly("wait")
	cli.DurationVar(fs, &cfg.checkpointTimeout, "checkpoint-timeout", 10*time.Second, "the jobs' checkpoint_timeout_ms (`duration`)")
	flagOnly("checkpoint-timeout")
	fs.BoolVar(&cfg.idle, "idle", false, "no triggers: only the participants, waiting, to measure what an idle fleet costs")
	flagOnly("idle")
	fs.IntVar(&cfg.coordinatorPID, "coordinator-pid", 0, "measure the CPU of this `process` (the coordinator) over the window, from /proc/PID/stat")
	flagOnly("coordinator-pid")
	fs.IntVar(&cfg.rssPID, "rss-pid", 0, "sample the resident memory of this `process`")
	flagOnly("rss-pid")
	cli.DurationVar(fs, &cfg.rssInterval, "rss-interval", 5*time.Second, "how often (`duration`) --rss-pid is sampled")
	flagOnly("rss-interval")
	fs.BoolVar(&cfg.postgres, "postgres", true, "measure the CPU of every process named postgres over the window (the whole server, "+
		"whatever database it serves)")
	flagOnly("postgres")
	fs.BoolVar(&cfg.http2, "http2", false, "speak HTTP/2 (to an http:// coordinator with prior knowledge, as "+
		"coordinatorclient.Options.UnencryptedHTTP2 does; over https:// negotiated): the runners' requests share a few connections instead of one each")
	flagOnly("http2")
	fs.BoolVar(&cfg.json, "json", false, "print the report as one JSON object on stdout (the text report goes to stderr)")
	flagOnly("json")
	fs.StringVar(&cfg.jobPrefix, "job-prefix", "", "jobs are named `prefix`-0, prefix-1, ... (default fleet-<random>)")
	flagOnly("job-prefix")
	return s
}

func (cfg *fleetConfig) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	u, err := url.Parse(cfg.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("--url must be an http:// URL, like http://127.0.0.1:8080, not %q", cfg.url)
	}
	cfg.url = strings.TrimRight(cfg.url, "/")
	if cfg.jobs < 1 || cfg.jobs > maxFleetJobs {
		bad("--jobs must be from 1 to %d, not %d", maxFleetJobs, cfg.jobs)
	}
	if cfg.participants < 1 || cfg.participants > maxFleetParticipants {
		bad("--participants must be from 1 to %d, not %d", maxFleetParticipants, cfg.participants)
	}
	if n := cfg.jobs * cfg.participants; n > maxFleetRunners {
		bad("--jobs x --participants must be at most %d, not %d", maxFleetRunners, n)
	}
	if cfg.duration <= 0 || cfg.duration > maxFleetDuration {
		bad("--duration must be positive and at most %s, not %s", maxFleetDuration, cfg.duration)
	}
	if cfg.warmup < 0 || cfg.warmup > maxFleetWarmup {
		bad("--warmup must be from 0 to %s, not %s", maxFleetWarmup, cfg.warmup)
	}
	if cfg.interval < 10*time.Millisecond || cfg.interval > 10*time.Minute {
		bad("--interval must be from 10ms to 10m, not %s", cfg.interval)
	}
	if !cfg.idle && cfg.warmup < 2*cfg.interval {
		bad("--warmup (%s) must be at least twice --interval (%s): every job's trigger starts within the first interval "+
			"and opens its first checkpoint one interval later", cfg.warmup, cfg.interval)
	}
	if cfg.wait < time.Millisecond || cfg.wait > 60*time.Second {
		bad("--wait must be from 1ms to 60s, not %s", cfg.wait)
	}
	if cfg.checkpointTimeout < 100*time.Millisecond || cfg.checkpointTimeout > 10*time.Minute {
		bad("--checkpoint-timeout must be from 100ms to 10m, not %s", cfg.checkpointTimeout)
	}
	if cfg.coordinatorPID < 0 || cfg.rssPID < 0 {
		bad("--coordinator-pid and --rss-pid must be process ids")
	}
	if cfg.rssPID == 0 {
		cfg.rssPID = cfg.coordinatorPID
	}
	if cfg.rssInterval < 10*time.Millisecond {
		bad("--rss-interval must be at least 10ms, not %s", cfg.rssInterval)
	}
	if cfg.jobPrefix == "" {
		cfg.jobPrefix = "fleet-" + randomHex(3)
	}
	if !namePattern.MatchString(benchJobName(cfg.jobPrefix, maxFleetJobs)) {
		bad("--job-prefix %q does not make valid job names (letters, digits, '.', '_', '-'; at most 128 in all)", cfg.jobPrefix)
	}
	return errors.Join(errs...)
}

const fleetUsageHeader = `coordinator fleet: run jobs through the participant library at a fixed rate, and measure.

Usage:
  coordinator fleet [flags]

Creates --jobs jobs of --participants participants, runs one coordinatorclient.Runner per
participant (a trivial in-memory Participant: Prepare returns a small committable, Commit
and Abort do nothing) and one coordinatorclient.Trigger per job, opening a checkpoint every
--interval (the jobs' first openings spread over the interval). After --warmup it measures
for --duration: committed checkpoints and votes per second, whether a backlog builds up,
the latency from a checkpoint's opening to its participants' Prepare and to its last
participant's Commit (and the coordinator's own view, from its timestamps), the CPU of
--coordinator-pid and of every process named postgres, the RSS of --rss-pid, and the
requests the fleet made. Then it stops the triggers, waits for the open checkpoints to
commit, stops the runners, and checks that every checkpoint was committed.

With --idle there are no triggers: the participants only wait (one long-poll of --wait
each at a time), to measure the idle cost.

Flags of fleet:
`

const fleetUsageFooter = `
Exit status: 0 when every runner ran to the end and every checkpoint opened was committed,
1 otherwise, 2 on invalid flags.
`

// Fleet is "coordinator fleet": it parses args (the arguments after "fleet") and environ,
// runs the fleet until done or ctx ends, and returns the exit status. Help and the report
// go to stdout (the text report to stderr with --json); progress goes to stderr.
func Fleet(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	var cfg fleetConfig
	s := defineFleet(&cfg)
	rest, err := s.Parse(args, environ)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, fleetUsageHeader)
		printFlags(stdout, s, map[string]string{"job-prefix": "fleet-<random>", "rss-pid": "--coordinator-pid"})
		fmt.Fprint(stdout, fleetUsageFooter)
		return cli.ExitOK
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q", rest[0])
	}
	if err == nil {
		err = cfg.validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "coordinator fleet: %v\nRun 'coordinator fleet --help' for usage.\n", err)
		return cli.ExitUsage
	}
	rep, err := runFleet(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "coordinator fleet: %v\n", err)
		if rep == nil {
			return cli.ExitFailure
		}
	}
	text := stdout
	if cfg.json {
		text = stderr
	}
	rep.writeText(text)
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "coordinator fleet: write JSON: %v\n", err)
			return cli.ExitFailure
		}
	}
	if !rep.OK || err != nil {
		return cli.ExitFailure
	}
	return cli.ExitOK
}

// Latencies the fleet measures.
const (
	latOpenToPrepare      = "open_to_prepare"       // OpenCheckpoint returned -> a participant's Prepare called
	latCreatedToPrepare   = "created_to_prepare"    // created_at -> a participant's Prepare called (wall clock)
	latOpenToLastCommit   = "open_to_last_commit"   // OpenCheckpoint returned -> the last participant's Commit called
	latCoordCreatedToVote = "coord_created_to_vote" // created_at -> voted_at, per vote
	latCoordDecided       = "coord_created_to_decided"
	latCoordCommitted     = "coord_created_to_committed" // created_at -> completed_at (every ack in)
)

var fleetLatencyKinds = []string{latOpenToPrepare, latCreatedToPrepare, latCoordCreatedToVote, latOpenToLastCommit, latCoordDecided, latCoordCommitted}

var fleetLatencyLabels = map[string]string{
	latOpenToPrepare:      "open returned -> Prepare called",
	latCreatedToPrepare:   "created_at -> Prepare called",
	latCoordCreatedToVote: "created_at -> voted_at (coord.)",
	latOpenToLastCommit:   "open returned -> last Commit",
	latCoordDecided:       "created_at -> decided_at (coord.)",
	latCoordCommitted:     "created_at -> completed_at (coord.)",
}

// fleetRun is one run: the participants, triggers and the main goroutine share it.
type fleetRun struct {
	cfg   fleetConfig
	coord *cc.Coordinator
	tr    *countingTransport
	jobs  []*fleetJob

	measuring atomic.Bool // from the window's start to its end

	opened, committed, prepares, aborts atomic.Int64
	prepareBeforeOpen                   atomic.Int64 // Prepare called before OpenCheckpoint returned to the trigger

	histMu sync.Mutex
	hist   map[string]*histogram

	errMu         sync.Mutex
	runnerErrors  map[string]int64
	triggerErrors map[string]int64
	runnersDone   atomic.Int64
}

type fleetJob struct {
	name    string
	trigger *cc.Trigger

	mu       sync.Mutex
	tracks   map[int64]*cpTrack
	measured []int64 // ids opened in the window
}

// cpTrack follows one checkpoint until its last participant committed and its opening is
// known (either may come first).
type cpTrack struct {
	opened, created time.Time // zero until OpenCheckpoint returned
	measured        bool
	prepares        []time.Time
	commits         int
	committedAt     time.Time
	aborted, done   bool
}

func (j *fleetJob) track(id int64) *cpTrack {
	t := j.tracks[id]
	if t == nil {
		t = &cpTrack{}
		j.tracks[id] = t
	}
	return t
}

func (r *fleetRun) record(kind string, d time.Duration) {
	r.histMu.Lock()
	r.hist[kind].add(max(d, 0))
	r.histMu.Unlock()
}

func (r *fleetRun) recordPrepare(t *cpTrack, at time.Time) {
	if !t.measured {
		return
	}
	d := at.Sub(t.opened)
	if d < 0 {
		r.prepareBeforeOpen.Add(1)
	}
	r.record(latOpenToPrepare, d)
	r.record(latCreatedToPrepare, at.Round(0).Sub(t.created))
}

func (r *fleetRun) onOpen(j *fleetJob, cp *cc.Checkpoint, at time.Time) {
	r.opened.Add(1)
	measured := r.measuring.Load()
	j.mu.Lock()
	defer j.mu.Unlock()
	t := j.track(cp.Id)
	if !t.opened.IsZero() {
		return // a replay of the same opening
	}
	t.opened, t.created, t.measured = at, cp.CreatedAt, measured
	if measured {
		j.measured = append(j.measured, cp.Id)
	}
	for _, p := range t.prepares {
		r.recordPrepare(t, p)
	}
	r.finish(j, cp.Id, t)
}

func (r *fleetRun) onPrepare(j *fleetJob, id int64, at time.Time) {
	r.prepares.Add(1)
	j.mu.Lock()
	defer j.mu.Unlock()
	t := j.track(id)
	t.prepares = append(t.prepares, at)
	if !t.opened.IsZero() {
		r.recordPrepare(t, at)
	}
}

func (r *fleetRun) onCommit(j *fleetJob, id int64, at time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	t := j.track(id)
	t.commits++
	if t.commits == r.cfg.participants && !t.done {
		t.done, t.committedAt = true, at
		r.committed.Add(1)
		r.finish(j, id, t)
	}
}

func (r *fleetRun) onAbort(j *fleetJob, id int64) {
	r.aborts.Add(1)
	j.mu.Lock()
	defer j.mu.Unlock()
	j.track(id).aborted = true
}

// finish records a committed checkpoint's latency once its opening is known, and forgets it.
func (r *fleetRun) finish(j *fleetJob, id int64, t *cpTrack) {
	if !t.done || t.opened.IsZero() {
		return
	}
	if t.measured {
		r.record(latOpenToLastCommit, t.committedAt.Sub(t.opened))
	}
	delete(j.tracks, id)
}

// unfinished counts the checkpoints some participant prepared or a trigger opened that are
// neither committed by every participant nor aborted.
func (r *fleetRun) unfinished() int {
	n := 0
	for _, j := range r.jobs {
		j.mu.Lock()
		for _, t := range j.tracks {
			if !t.done && !t.aborted {
				n++
			}
		}
		j.mu.Unlock()
	}
	return n
}

func (r *fleetRun) noteError(m map[string]int64, err error) {
	msg := err.Error()
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	r.errMu.Lock()
	m[msg]++
	r.errMu.Unlock()
}

func (r *fleetRun) skipped() int64 {
	var n int64
	for _, j := range r.jobs {
		if j.trigger != nil {
			n += j.trigger.Skipped()
		}
	}
	return n
}

// fleetParticipant is the trivial participant every Runner drives.
type fleetParticipant struct {
	run          *fleetRun
	job          *fleetJob
	committables []string
}

func (p *fleetParticipant) Prepare(_ context.Context, id int64) ([]string, error) {
	p.run.onPrepare(p.job, id, time.Now())
	return p.committables, nil
}

func (p *fleetParticipant) Commit(_ context.Context, id int64, _ []string) error {
	p.run.onCommit(p.job, id, time.Now())
	return nil
}

func (p *fleetParticipant) Abort(_ context.Context, id int64, _ []string) error {
	p.run.onAbort(p.job, id)
	return nil
}

// fleetSnap is the counters at one end of the window.
type fleetSnap struct {
	at                                   time.Time
	req                                  requestCounts
	opened, committed, prepares, skipped int64
	coordCPU, pgCPU, selfCPU             time.Duration
	coordErr, pgErr                      error
	pgProcs                              int
	rssKiB                               int64
}

func (r *fleetRun) snapshot() fleetSnap {
	s := fleetSnap{at: time.Now(), req: r.tr.snapshot(), opened: r.opened.Load(), committed: r.committed.Load(),
		prepares: r.prepares.Load(), skipped: r.skipped(), selfCPU: cpuTime()}
	if r.cfg.coordinatorPID > 0 {
		s.coordCPU, s.coordErr = processCPU(r.cfg.coordinatorPID)
	}
	if r.cfg.postgres {
		s.pgCPU, s.pgProcs, s.pgErr = commandCPU("postgres")
		if s.pgErr == nil && s.pgProcs == 0 {
			s.pgErr = errors.New("no process named postgres")
		}
	}
	if r.cfg.rssPID > 0 {
		s.rssKiB, _ = readRSS(r.cfg.rssPID)
	}
	return s
}

// Bounds of the phases around the measurement.
const (
	fleetSetupParallel   = 32
	fleetRegisterBatch   = 250
	fleetRegisterTimeout = 60 * time.Second
	fleetStopTimeout     = 30 * time.Second
	fleetVerifyTimeout   = 5 * time.Minute
)

// runFleet sets the jobs up, starts the runners and triggers, measures, drains and checks.
// A nil report means nothing was measured.
func runFleet(ctx context.Context, cfg fleetConfig, progress io.Writer) (*fleetReport, error) {
	started := time.Now()
	runners := cfg.jobs * cfg.participants
	// Each idle Runner holds a long-poll; one voting also watches the decision; each
	// trigger opens checkpoints: keep all of those connections for reuse.
	tr := newCountingTransport(2*runners+cfg.jobs+64, cfg.http2, strings.HasPrefix(cfg.url, "https://"))
	defer tr.base.CloseIdleConnections()
	coord, err := cc.NewCoordinator(cfg.url, cc.Options{HTTPClient: &http.Client{Transport: tr}, Token: cfg.token})
	if err != nil {
		return nil, err
	}
	if limit, ok := openFileLimit(); ok && limit < uint64(2*runners+cfg.jobs+256) {
		fmt.Fprintf(progress, "fleet: warning: the open file limit is %d, and %d runners and %d triggers hold up to %d connections: raise it (ulimit -n)\n",
			limit, runners, cfg.jobs, 2*runners+cfg.jobs)
	}
	for _, pid := range []int{cfg.coordinatorPID, cfg.rssPID} {
		if pid > 0 {
			if _, err := processCPU(pid); err != nil {
				return nil, err
			}
		}
	}

	bc := newBenchClient(cfg.url)
	bc.authorization = bearer(cfg.token)
	target := readTarget(ctx, bc, progress)
	bc.close()

	var rss *rssSampler
	rssCtx, stopRSS := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRSS()
	var rssDone sync.WaitGroup
	if cfg.rssPID > 0 {
		rss = &rssSampler{pid: cfg.rssPID, start: started}
		rssDone.Go(func() { rss.run(rssCtx, cfg.rssInterval, io.Discard) })
	}

	r := &fleetRun{cfg: cfg, coord: coord, tr: tr, hist: map[string]*histogram{},
		runnerErrors: map[string]int64{}, triggerErrors: map[string]int64{}}
	for _, k := range fleetLatencyKinds {
		r.hist[k] = newHistogram()
	}
	for i := range cfg.jobs {
		r.jobs = append(r.jobs, &fleetJob{name: benchJobName(cfg.jobPrefix, i), tracks: map[int64]*cpTrack{}})
	}
	mode := "triggers"
	if cfg.idle {
		mode = "idle"
	}
	fmt.Fprintf(progress, "fleet: %s, %d jobs %s-0..%d x %d participants on %s: %s\n",
		mode, cfg.jobs, cfg.jobPrefix, cfg.jobs-1, cfg.participants, cfg.url, target.describe())
	if err := r.createJobs(ctx); err != nil {
		return nil, fmt.Errorf("create the jobs: %w", err)
	}

	// The runners, started in batches so that the coordinator is not asked for thousands
	// of connections at once.
	runCtx, stopRunners := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRunners()
	var runnerWG sync.WaitGroup
	all := make([]*cc.Runner[string], 0, runners)
	for _, j := range r.jobs {
		for p := range cfg.participants {
			name := benchParticipantName(p)
			part := &fleetParticipant{run: r, job: j, committables: []string{"txn-" + name}}
			all = append(all, cc.NewRunner[string](coord, j.name, name, part, cc.RunnerOptions{LongPoll: cfg.wait}))
		}
	}
	regStart := time.Now()
	for b := 0; b < len(all); b += fleetRegisterBatch {
		batch := all[b:min(b+fleetRegisterBatch, len(all))]
		for _, rn := range batch {
			runnerWG.Go(func() {
				err := rn.Run(runCtx)
				r.runnersDone.Add(1)
				if err != nil && runCtx.Err() == nil {
					r.noteError(r.runnerErrors, err)
				}
			})
		}
		if err := r.awaitRegistered(ctx, batch); err != nil {
			stopRunners()
			runnerWG.Wait()
			return nil, err
		}
	}
	fmt.Fprintf(progress, "fleet: %d runners registered in %.1fs\n", runners, time.Since(regStart).Seconds())

	// The triggers: job i starts i/jobs of an interval after the first.
	trigCtx, stopTriggers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopTriggers()
	var trigWG sync.WaitGroup
	t0 := time.Now()
	if !cfg.idle {
		for i, j := range r.jobs {
			j.trigger = &cc.Trigger{Coordinator: coord, Job: j.name, Interval: cfg.interval,
				KeyPrefix: j.name + "-" + randomHex(4), OnOpen: func(cp *cc.Checkpoint) { r.onOpen(j, cp, time.Now()) }}
			offset := time.Duration(int64(cfg.interval) * int64(i) / int64(cfg.jobs))
			trigWG.Go(func() {
				if sleep(trigCtx, offset) != nil {
					return
				}
				if err := j.trigger.Run(trigCtx); err != nil {
					r.noteError(r.triggerErrors, err)
				}
			})
		}
	}

	start, end, interrupted := r.measure(ctx, t0, progress)

	// Stop the triggers, let what they opened commit, stop the runners.
	stopTriggers()
	trigWG.Wait()
	var drainErr error
	if !cfg.idle {
		drainErr = r.drain(ctx, progress)
	}
	stopRunners()
	stopped := make(chan struct{})
	go func() { runnerWG.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(fleetStopTimeout):
		drainErr = errors.Join(drainErr, fmt.Errorf("%d runners did not stop within %s", int64(runners)-r.runnersDone.Load(), fleetStopTimeout))
	}
	if rss != nil {
		stopRSS()
		rssDone.Wait()
	}

	rep := r.report(target, start, end, interrupted, rss)
	if !cfg.idle && start != nil {
		r.verify(ctx, rep, progress)
	}
	rep.finish(drainErr)
	return rep, nil
}

// createJobs creates (or replaces) every job, a few at a time.
func (r *fleetRun) createJobs(ctx context.Context) error {
	names := make([]string, r.cfg.participants)
	for p := range names {
		names[p] = benchParticipantName(p)
	}
	timeout := r.cfg.checkpointTimeout.Milliseconds()
	autoCommit := true
	cfg := cc.JobConfig{Participants: names, CheckpointTimeoutMs: &timeout, AutoCommit: &autoCommit}
	ctx, cancel := context.WithTimeout(ctx, fleetRegisterTimeout)
	defer cancel()
	sem := make(chan struct{}, fleetSetupParallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, j := range r.jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := r.coord.PutJob(ctx, j.name, cfg); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	return first
}

// awaitRegistered waits until every runner of batch registered (or stopped).
func (r *fleetRun) awaitRegistered(ctx context.Context, batch []*cc.Runner[string]) error {
	deadline := time.Now().Add(fleetRegisterTimeout)
	for {
		waiting := 0
		for _, rn := range batch {
			if rn.Epoch() == 0 {
				waiting++
			}
		}
		r.errMu.Lock()
		failed := len(r.runnerErrors) > 0
		var example string
		for msg := range r.runnerErrors {
			example = msg
			break
		}
		r.errMu.Unlock()
		switch {
		case failed:
			return fmt.Errorf("a runner stopped while registering: %s", example)
		case waiting == 0:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(deadline):
			return fmt.Errorf("%d runners not registered after %s", waiting, fleetRegisterTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// measure waits for the warm-up, then measures until the window ends or ctx does, printing
// progress. start and end are nil when the window never began.
func (r *fleetRun) measure(ctx context.Context, t0 time.Time, progress io.Writer) (start, end *fleetSnap, interrupted bool) {
	windowStart := t0.Add(r.cfg.warmup)
	windowEnd := windowStart.Add(r.cfg.duration)
	fmt.Fprintf(progress, "fleet: warm-up %s, then measuring for %s\n", r.cfg.warmup, r.cfg.duration)
	every := time.Second
	if r.cfg.duration+r.cfg.warmup >= 30*time.Second {
		every = 5 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	startTimer := time.NewTimer(time.Until(windowStart))
	defer startTimer.Stop()
	var endTimer <-chan time.Time
	prev := r.snapshotLight()
	for {
		select {
		case <-ctx.Done():
			if start != nil {
				s := r.snapshot()
				end = &s
			}
			r.measuring.Store(false)
			return start, end, true
		case <-startTimer.C:
			s := r.snapshot()
			start = &s
			r.measuring.Store(true)
			endTimer = time.After(time.Until(windowEnd))
		case <-endTimer:
			r.measuring.Store(false)
			s := r.snapshot()
			return start, &s, false
		case now := <-tick.C:
			cur := r.snapshotLight()
			d := now.Sub(prev.at).Seconds()
			phase := "warm-up"
			if start != nil {
				phase = "measure"
			}
			fmt.Fprintf(progress, "fleet: %5.0fs %-7s opened %d, committed %d (%.0f/s), unfinished %d, skipped ticks %d, requests %.0f/s, runners stopped %d\n",
				now.Sub(t0).Seconds(), phase, cur.opened, cur.committed, float64(cur.committed-prev.committed)/d,
				r.unfinished(), cur.skipped, float64(cur.req.total()-prev.req.total())/d, r.runnersDone.Load())
			prev = cur
		}
	}
}

// snapshotLight is a snapshot without the /proc reads, for progress.
func (r *fleetRun) snapshotLight() fleetSnap {
	return fleetSnap{at: time.Now(), req: r.tr.snapshot(), opened: r.opened.Load(), committed: r.committed.Load(), skipped: r.skipped()}
}

// drain waits until every checkpoint opened was committed by every participant and acked.
func (r *fleetRun) drain(ctx context.Context, progress io.Writer) error {
	limit := r.cfg.checkpointTimeout + 5*time.Second
	deadline := time.Now().Add(limit)
	var quietSince time.Time
	for {
		unfinished := r.unfinished()
		committed := r.committed.Load()
		acks := r.tr.ok[reqAck].Load()
		switch {
		case unfinished != 0 || committed < r.opened.Load() || acks < committed*int64(r.cfg.participants) || r.anyOpen(ctx):
			quietSince = time.Time{}
		case quietSince.IsZero():
			// An open cancelled in flight may still be applied a moment later: wait for
			// the coordinator to list nothing open for a while.
			quietSince = time.Now()
		case time.Since(quietSince) >= fleetDrainQuiet:
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			err := fmt.Errorf("after the triggers stopped, %d checkpoints were still unfinished after %s (opened %d, committed %d, acks %d of %d)",
				unfinished, limit, r.opened.Load(), committed, acks, committed*int64(r.cfg.participants))
			fmt.Fprintf(progress, "fleet: %v\n", err)
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fleetDrainQuiet is how long the drain wants nothing open before it stops the runners.
const fleetDrainQuiet = 300 * time.Millisecond

// anyOpen reports whether the coordinator still lists a checkpoint of the fleet's jobs as
// preparing or committing. An opening in flight when its trigger stopped may have opened
// one that the trigger never heard of (its request cancelled after the coordinator applied
// it): the participants commit it all the same, and the drain waits for that too. A list
// the token may not read (it needs the read scope on every job of the prefix) counts as
// nothing open.
func (r *fleetRun) anyOpen(ctx context.Context) bool {
	pattern := r.cfg.jobPrefix + "-*"
	limit := 1
	resp, err := r.coord.Client().ListOpenCheckpointsWithResponse(ctx, &cc.ListOpenCheckpointsParams{Job: &pattern, Limit: &limit})
	if err != nil || resp.JSON200 == nil {
		return false
	}
	return len(resp.JSON200.Items) > 0
}

// verify lists every job's checkpoints: each must be committed. The coordinator's
// timestamps of the checkpoints opened in the window give its view of the latencies.
func (r *fleetRun) verify(ctx context.Context, rep *fleetReport, progress io.Writer) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fleetVerifyTimeout)
	defer cancel()
	statuses := map[string]int64{}
	var mu sync.Mutex
	var listErrs int64
	var example string
	sem := make(chan struct{}, fleetSetupParallel)
	var wg sync.WaitGroup
	for _, j := range r.jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cps, err := r.coord.Checkpoints(ctx, j.name)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				listErrs++
				example = err.Error()
				return
			}
			measured := map[int64]bool{}
			j.mu.Lock()
			for _, id := range j.measured {
				measured[id] = true
			}
			j.mu.Unlock()
			for _, cp := range cps {
				statuses[string(cp.Status)]++
				if !measured[cp.Id] {
					continue
				}
				for _, p := range cp.Participants {
					if p.VotedAt != nil {
						r.record(latCoordCreatedToVote, p.VotedAt.Sub(cp.CreatedAt))
					}
				}
				if cp.DecidedAt != nil {
					r.record(latCoordDecided, cp.DecidedAt.Sub(cp.CreatedAt))
				}
				if cp.CompletedAt != nil && cp.Status == cc.Committed {
					r.record(latCoordCommitted, cp.CompletedAt.Sub(cp.CreatedAt))
				}
			}
		})
	}
	wg.Wait()
	if listErrs > 0 {
		fmt.Fprintf(progress, "fleet: listing the checkpoints of %d jobs failed, e.g. %s\n", listErrs, example)
	}
	rep.Checkpoints = statuses
	rep.ListErrors = listErrs
	for status, n := range statuses {
		rep.AllCheckpoints += n
		if status != string(cc.Committed) {
			rep.NotCommitted += n
		}
	}
	rep.Verified = listErrs == 0
	r.fillLatency(rep, latCoordCreatedToVote, latCoordDecided, latCoordCommitted)
}

func (r *fleetRun) fillLatency(rep *fleetReport, kinds ...string) {
	r.histMu.Lock()
	defer r.histMu.Unlock()
	for _, k := range kinds {
		h := r.hist[k]
		if h.n == 0 {
			continue
		}
		rep.Latency[k] = latencySummary{Count: h.n, P50: ms(h.quantile(0.5)), P90: ms(h.quantile(0.9)), P99: ms(h.quantile(0.99)),
			Max: ms(h.max), Mean: ms(h.sum / time.Duration(h.n))}
	}
}

// cpuUse is a process's (or processes') CPU over the window.
type cpuUse struct {
	PID           int     `json:"pid,omitempty"`
	Processes     int     `json:"processes,omitempty"`
	Seconds       float64 `json:"cpu_seconds"`
	PercentOfCore float64 `json:"percent_of_one_core"`
}

type kindCount struct {
	Requests  int64   `json:"requests"`
	PerSecond float64 `json:"per_second"`
	Failed    int64   `json:"failed,omitempty"`
	Canceled  int64   `json:"canceled,omitempty"`
}

type fleetRSS struct {
	PID            int         `json:"pid"`
	StartKiB       int64       `json:"start_kib"` // before the jobs were set up
	WindowStartKiB int64       `json:"window_start_kib"`
	WindowEndKiB   int64       `json:"window_end_kib"`
	MaxKiB         int64       `json:"max_kib"`
	EndKiB         int64       `json:"end_kib"` // after the runners stopped
	Samples        []rssSample `json:"samples"`
}

// fleetReport is what "coordinator fleet" prints, as text or as JSON.
type fleetReport struct {
	URL             string  `json:"url"`
	Build           string  `json:"build"`
	GoVersion       string  `json:"go_version"`
	Store           string  `json:"store"`
	Mode            string  `json:"mode"`     // "triggers" or "idle"
	Protocol        string  `json:"protocol"` // "HTTP/1.1", "HTTP/2" or "HTTP/2 (h2c)": what the runners spoke
	Jobs            int     `json:"jobs"`
	Participants    int     `json:"participants"`
	JobPrefix       string  `json:"job_prefix"`
	IntervalSeconds float64 `json:"interval_seconds,omitempty"`
	WaitSeconds     float64 `json:"wait_seconds"`
	WarmupSeconds   float64 `json:"warmup_seconds"`
	WindowSeconds   float64 `json:"window_seconds"` // measured
	Interrupted     bool    `json:"interrupted"`
	MachineCPUs     int     `json:"machine_cpus"`

	// Over the window (trigger mode).
	Opened                  int64    `json:"opened"`
	Committed               int64    `json:"committed"` // every participant's Commit called
	RoundsPerSecond         float64  `json:"rounds_per_second"`
	ExpectedRoundsPerSecond float64  `json:"expected_rounds_per_second,omitempty"` // jobs / interval
	Votes                   int64    `json:"votes"`
	VotesPerSecond          float64  `json:"votes_per_second"`
	SkippedTicks            int64    `json:"skipped_ticks"`        // too many checkpoints preparing, or the open failed
	TooManyCheckpoints      int64    `json:"too_many_checkpoints"` // 409 answers to an open (the whole run)
	UnfinishedAtWindowEnd   int64    `json:"unfinished_at_window_end"`
	Backlog                 bool     `json:"backlog"`
	BacklogReasons          []string `json:"backlog_reasons,omitempty"`
	PrepareBeforeOpen       int64    `json:"prepare_before_open_returned"` // open_to_prepare samples counted as 0

	Latency map[string]latencySummary `json:"latency_ms"`

	// The whole run, checked after the drain.
	AllOpened      int64            `json:"all_opened"`    // OpenCheckpoint returned to the trigger (one in flight at the stop is not)
	AllCommitted   int64            `json:"all_committed"` // every participant's Commit called
	Aborts         int64            `json:"abort_callbacks"`
	Checkpoints    map[string]int64 `json:"checkpoints_by_status,omitempty"`
	AllCheckpoints int64            `json:"all_checkpoints"`
	NotCommitted   int64            `json:"not_committed"`
	ListErrors     int64            `json:"list_errors,omitempty"`
	Verified       bool             `json:"verified"`

	Requests          int64                `json:"requests"` // made by the fleet in the window
	RequestsPerSecond float64              `json:"requests_per_second"`
	RequestsByKind    map[string]kindCount `json:"requests_by_kind"`
	ConnectionsDialed int64                `json:"connections_dialed"` // in the window
	HTTPErrors        map[string]int64     `json:"http_errors"`        // the whole run, retried by the library
	HTTPErrorExamples map[string]string    `json:"http_error_examples,omitempty"`

	CoordinatorCPU *cpuUse   `json:"coordinator_cpu,omitempty"`
	PostgresCPU    *cpuUse   `json:"postgres_cpu,omitempty"`
	FleetCPU       *cpuUse   `json:"fleet_cpu,omitempty"`
	CPUNotes       []string  `json:"cpu_notes,omitempty"`
	RSS            *fleetRSS `json:"rss,omitempty"`

	RunnerErrors  map[string]int64 `json:"runner_errors"`
	TriggerErrors map[string]int64 `json:"trigger_errors"`
	DrainError    string           `json:"drain_error,omitempty"`

	OK      bool   `json:"ok"`
	Verdict string `json:"verdict"`
}

func cpuOver(d time.Duration, window float64) float64 {
	if window <= 0 {
		return 0
	}
	return 100 * d.Seconds() / window
}

func (r *fleetRun) report(target targetInfo, start, end *fleetSnap, interrupted bool, rss *rssSampler) *fleetReport {
	cfg := r.cfg
	rep := &fleetReport{URL: cfg.url, Build: target.Version, GoVersion: target.GoVersion, Store: target.Store,
		Mode: "triggers", Protocol: protocolName(cfg.http2, cfg.url), Jobs: cfg.jobs, Participants: cfg.participants, JobPrefix: cfg.jobPrefix,
		WaitSeconds: cfg.wait.Seconds(), WarmupSeconds: cfg.warmup.Seconds(), Interrupted: interrupted, MachineCPUs: runtime.NumCPU(),
		Latency: map[string]latencySummary{}, RequestsByKind: map[string]kindCount{},
		AllOpened: r.opened.Load(), AllCommitted: r.committed.Load(), Aborts: r.aborts.Load(),
		PrepareBeforeOpen: r.prepareBeforeOpen.Load()}
	if cfg.idle {
		rep.Mode = "idle"
	} else {
		rep.IntervalSeconds = cfg.interval.Seconds()
		rep.ExpectedRoundsPerSecond = float64(cfg.jobs) / cfg.interval.Seconds()
	}
	r.errMu.Lock()
	rep.RunnerErrors, rep.TriggerErrors = r.runnerErrors, r.triggerErrors
	r.errMu.Unlock()
	all := r.tr.snapshot()
	rep.HTTPErrors = all.statuses
	r.tr.mu.Lock()
	rep.HTTPErrorExamples = make(map[string]string, len(r.tr.examples))
	for k, v := range r.tr.examples {
		rep.HTTPErrorExamples[k] = v
	}
	r.tr.mu.Unlock()
	rep.TooManyCheckpoints = all.statuses[reqKindNames[reqOpen]+" 409"]
	if rss != nil {
		if rr := rss.report(); rr != nil {
			rep.RSS = &fleetRSS{PID: rr.PID, StartKiB: rr.FirstKiB, MaxKiB: rr.MaxKiB, EndKiB: rr.LastKiB, Samples: rr.Samples}
		}
	}
	r.fillLatency(rep, latOpenToPrepare, latCreatedToPrepare, latOpenToLastCommit)
	if start == nil || end == nil {
		return rep
	}
	w := end.at.Sub(start.at).Seconds()
	rep.WindowSeconds = w
	per := func(n int64) float64 {
		if w <= 0 {
			return 0
		}
		return float64(n) / w
	}
	rep.Opened = end.opened - start.opened
	rep.Committed = end.committed - start.committed
	rep.RoundsPerSecond = per(rep.Committed)
	rep.Votes = end.req.ok[reqVote] - start.req.ok[reqVote]
	rep.VotesPerSecond = per(rep.Votes)
	rep.SkippedTicks = end.skipped - start.skipped
	rep.UnfinishedAtWindowEnd = max(end.opened-end.committed, 0)
	rep.Requests = end.req.total() - start.req.total()
	rep.RequestsPerSecond = per(rep.Requests)
	rep.ConnectionsDialed = end.req.dials - start.req.dials
	for k := range reqKinds {
		n := end.req.sent[k] - start.req.sent[k]
		if n == 0 {
			continue
		}
		rep.RequestsByKind[reqKindNames[k]] = kindCount{Requests: n, PerSecond: per(n),
			Failed: end.req.failed[k] - start.req.failed[k], Canceled: end.req.canceled[k] - start.req.canceled[k]}
	}
	if cfg.coordinatorPID > 0 {
		if start.coordErr == nil && end.coordErr == nil {
			d := end.coordCPU - start.coordCPU
			rep.CoordinatorCPU = &cpuUse{PID: cfg.coordinatorPID, Seconds: d.Seconds(), PercentOfCore: cpuOver(d, w)}
		} else {
			rep.CPUNotes = append(rep.CPUNotes, fmt.Sprintf("coordinator CPU unknown: %v", errors.Join(start.coordErr, end.coordErr)))
		}
	}
	if cfg.postgres {
		if start.pgErr == nil && end.pgErr == nil {
			d := end.pgCPU - start.pgCPU
			rep.PostgresCPU = &cpuUse{Processes: end.pgProcs, Seconds: d.Seconds(), PercentOfCore: cpuOver(d, w)}
		} else {
			rep.CPUNotes = append(rep.CPUNotes, fmt.Sprintf("PostgreSQL CPU unknown: %v", errors.Join(start.pgErr, end.pgErr)))
		}
	}
	if d := end.selfCPU - start.selfCPU; d > 0 {
		rep.FleetCPU = &cpuUse{Seconds: d.Seconds(), PercentOfCore: cpuOver(d, w)}
	}
	if rep.RSS != nil {
		rep.RSS.WindowStartKiB, rep.RSS.WindowEndKiB = start.rssKiB, end.rssKiB
		rep.RSS.MaxKiB = max(rep.RSS.MaxKiB, start.rssKiB, end.rssKiB)
	}
	if !cfg.idle {
		if rep.SkippedTicks > 0 {
			rep.BacklogReasons = append(rep.BacklogReasons, fmt.Sprintf("%d ticks skipped: the job's previous checkpoint was still preparing (or the open failed)", rep.SkippedTicks))
		}
		if rep.UnfinishedAtWindowEnd > int64(cfg.jobs) {
			rep.BacklogReasons = append(rep.BacklogReasons, fmt.Sprintf("%d checkpoints opened but not committed at the end of the window (more than one per job)", rep.UnfinishedAtWindowEnd))
		}
		if rep.RoundsPerSecond < 0.95*rep.ExpectedRoundsPerSecond {
			rep.BacklogReasons = append(rep.BacklogReasons, fmt.Sprintf("%.1f rounds/s committed, below 95%% of the %.1f/s offered", rep.RoundsPerSecond, rep.ExpectedRoundsPerSecond))
		}
		rep.Backlog = len(rep.BacklogReasons) > 0
	}
	return rep
}

// finish sets the verdict.
func (rep *fleetReport) finish(drainErr error) {
	if drainErr != nil {
		rep.DrainError = drainErr.Error()
	}
	var failures []string
	if n := sumCounts(rep.RunnerErrors); n > 0 {
		failures = append(failures, fmt.Sprintf("%d runners stopped with an error", n))
	}
	if n := sumCounts(rep.TriggerErrors); n > 0 {
		failures = append(failures, fmt.Sprintf("%d triggers stopped with an error", n))
	}
	if rep.Interrupted {
		failures = append(failures, "interrupted")
	}
	if rep.WindowSeconds == 0 {
		failures = append(failures, "nothing measured")
	}
	if rep.Mode == "triggers" {
		if rep.Committed == 0 {
			failures = append(failures, "no checkpoint committed in the window")
		}
		if !rep.Verified {
			failures = append(failures, "the checkpoints could not all be listed")
		}
		if rep.NotCommitted > 0 {
			failures = append(failures, fmt.Sprintf("%d checkpoints not committed", rep.NotCommitted))
		}
		if rep.Aborts > 0 {
			failures = append(failures, fmt.Sprintf("%d abort callbacks", rep.Aborts))
		}
	}
	if rep.DrainError != "" {
		failures = append(failures, rep.DrainError)
	}
	if len(failures) > 0 {
		rep.Verdict = "FAILED: " + strings.Join(failures, "; ")
		return
	}
	rep.OK = true
	if rep.Mode == "idle" {
		rep.Verdict = "OK: every runner waited to the end"
	} else {
		rep.Verdict = fmt.Sprintf("OK: all %d checkpoints committed", rep.AllCheckpoints)
		if rep.Backlog {
			rep.Verdict += "; BACKLOG: " + strings.Join(rep.BacklogReasons, "; ")
		} else {
			rep.Verdict += "; no backlog"
		}
	}
	if n := sumCounts(rep.HTTPErrors); n > 0 {
		rep.Verdict += fmt.Sprintf(" (%d requests failed and were retried by the library)", n)
	}
}

func sumCounts(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// protocolName is what a load tool with --http2 set to http2 speaks to the coordinator at
// url.
func protocolName(http2 bool, url string) string {
	switch {
	case !http2:
		return "HTTP/1.1"
	case strings.HasPrefix(url, "https://"):
		return "HTTP/2"
	}
	return "HTTP/2 (h2c)"
}

func (rep *fleetReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "\ncoordinator fleet (%s): %s over %s, %d jobs x %d participants, %s\n",
		rep.Mode, rep.URL, rep.Protocol, rep.Jobs, rep.Participants, describeTarget(rep.Build, rep.GoVersion, rep.Store))
	if rep.Mode == "idle" {
		fmt.Fprintf(w, "no triggers, long-poll %.0fs; measured %.1fs after a %.1fs warm-up%s\n", rep.WaitSeconds, rep.WindowSeconds, rep.WarmupSeconds,
			map[bool]string{true: " (interrupted)"}[rep.Interrupted])
	} else {
		fmt.Fprintf(w, "a checkpoint per job every %gs (%.1f/s offered), long-poll %.0fs; measured %.1fs after a %.1fs warm-up%s\n",
			rep.IntervalSeconds, rep.ExpectedRoundsPerSecond, rep.WaitSeconds, rep.WindowSeconds, rep.WarmupSeconds,
			map[bool]string{true: " (interrupted)"}[rep.Interrupted])
		fmt.Fprintf(w, "  committed       %9d  %10.1f /s   (opened %d in the window)\n", rep.Committed, rep.RoundsPerSecond, rep.Opened)
		fmt.Fprintf(w, "  votes           %9d  %10.1f /s\n", rep.Votes, rep.VotesPerSecond)
		fmt.Fprintf(w, "  backlog: %v; skipped ticks %d, too_many_checkpoints answers %d, unfinished at the window's end %d\n",
			map[bool]string{true: "YES", false: "none"}[rep.Backlog], rep.SkippedTicks, rep.TooManyCheckpoints, rep.UnfinishedAtWindowEnd)
		fmt.Fprintf(w, "  latency ms (checkpoints opened in the window)  count       p50       p90       p99       max\n")
		for _, k := range fleetLatencyKinds {
			if l, ok := rep.Latency[k]; ok {
				fmt.Fprintf(w, "    %-36s %10d %9.1f %9.1f %9.1f %9.1f\n", fleetLatencyLabels[k], l.Count, l.P50, l.P90, l.P99, l.Max)
			}
		}
		if rep.PrepareBeforeOpen > 0 {
			fmt.Fprintf(w, "    (%d Prepare calls came before OpenCheckpoint returned to the trigger: counted as 0)\n", rep.PrepareBeforeOpen)
		}
		fmt.Fprintf(w, "  whole run: opened (seen by the triggers) %d, committed by every participant %d, abort callbacks %d; listed %d checkpoints, %d not committed %v\n",
			rep.AllOpened, rep.AllCommitted, rep.Aborts, rep.AllCheckpoints, rep.NotCommitted, rep.Checkpoints)
	}
	fmt.Fprintf(w, "  requests by the fleet %d, %.1f /s; connections dialed %d\n", rep.Requests, rep.RequestsPerSecond, rep.ConnectionsDialed)
	kinds := make([]string, 0, len(rep.RequestsByKind))
	for k := range rep.RequestsByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		c := rep.RequestsByKind[k]
		fmt.Fprintf(w, "    %-18s %9d %10.1f /s", k, c.Requests, c.PerSecond)
		if c.Failed > 0 {
			fmt.Fprintf(w, "  failed %d", c.Failed)
		}
		if c.Canceled > 0 {
			fmt.Fprintf(w, "  canceled %d", c.Canceled)
		}
		fmt.Fprintln(w)
	}
	if c := rep.CoordinatorCPU; c != nil {
		fmt.Fprintf(w, "  CPU coordinator (pid %d): %6.1f%% of one core (%.1fs)\n", c.PID, c.PercentOfCore, c.Seconds)
	}
	if c := rep.PostgresCPU; c != nil {
		fmt.Fprintf(w, "  CPU postgres (%d processes): %6.1f%% of one core (%.1fs)\n", c.Processes, c.PercentOfCore, c.Seconds)
	}
	if c := rep.FleetCPU; c != nil {
		fmt.Fprintf(w, "  CPU of the fleet itself:   %6.1f%% of one core (%.1fs), on a machine of %d CPUs\n", c.PercentOfCore, c.Seconds, rep.MachineCPUs)
	}
	for _, n := range rep.CPUNotes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	if m := rep.RSS; m != nil {
		fmt.Fprintf(w, "  coordinator RSS (pid %d): start %.1f MiB, window start %.1f, window end %.1f, max %.1f, end %.1f MiB\n",
			m.PID, mib(m.StartKiB), mib(m.WindowStartKiB), mib(m.WindowEndKiB), mib(m.MaxKiB), mib(m.EndKiB))
	}
	writeCounts(w, "HTTP errors (whole run, retried)", rep.HTTPErrors, rep.HTTPErrorExamples)
	writeCounts(w, "runner errors", rep.RunnerErrors, nil)
	writeCounts(w, "trigger errors", rep.TriggerErrors, nil)
	fmt.Fprintf(w, "%s\n", rep.Verdict)
}

// sleep waits d or until ctx ends, returning ctx's error then.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
